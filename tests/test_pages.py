"""Server-rendered pages: sign in, the magic-link landing, the claim page."""

from __future__ import annotations

import uuid
from datetime import datetime
from urllib.parse import quote

from sqlalchemy import select

from callboard_core.agents.models import Agent
from callboard_core.auth.models import MagicLink
from callboard_core.auth.sessions import COOKIE_NAME
from callboard_core.container import Core
from tests.conftest import ORIGIN, key_headers, make_user, new_client, owner_client, register_agent
from tests.test_auth import LEGAL, PASSWORD, last_token, mails_to, new_email, password_user

EVIL = {"Origin": "https://evil.example"}


def claim_code(reg: dict) -> str:
    return str(reg["claimUrl"].rsplit("/", 1)[1])


async def link_used_at(core: Core, email: str) -> datetime | None:
    async with core.uow(write=False) as uow:
        return (
            await uow.session.execute(select(MagicLink.used_at).where(MagicLink.email == email))
        ).scalar_one()


async def test_login_page_renders_both_forms(client):
    response = await client.get("/login", params={"next": "/claim/abc"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert 'action="/login"' in html and 'name="email"' in html and 'name="password"' in html
    assert 'value="/claim/abc"' in html
    assert response.headers["x-frame-options"] == "DENY"
    offsite = await client.get("/login", params={"next": "https://evil.example/"})
    assert "evil.example" not in offsite.text


async def test_login_form_mails_a_link(client, core):
    email = new_email()
    await make_user(core, email=email)
    response = await client.post(
        "/login", data={"action": "magic", "email": email, "next": "/claim/xyz"}, headers=ORIGIN
    )
    assert response.status_code == 200
    assert "Check your mail" in response.text
    (message,) = await mails_to(core, email)
    assert "/auth/magic?token=" in message.body_text
    async with core.uow(write=False) as uow:
        next_url = (
            await uow.session.execute(select(MagicLink.next_url).where(MagicLink.email == email))
        ).scalar_one()
    assert next_url == "/claim/xyz"
    unknown = await client.post("/login", data={"action": "magic", "email": new_email()}, headers=ORIGIN)
    assert unknown.status_code == 200 and "Check your mail" in unknown.text
    bad = await client.post("/login", data={"action": "magic", "email": "nope"}, headers=ORIGIN)
    assert bad.status_code == 422 and "valid email" in bad.text


async def test_login_form_with_password(client, core):
    email = await password_user(core)
    wrong = await client.post(
        "/login", data={"action": "password", "identifier": email, "password": "wrong one!"}, headers=ORIGIN
    )
    assert wrong.status_code == 401 and "not right" in wrong.text
    assert client.cookies.get(COOKIE_NAME) is None
    ok = await client.post(
        "/login",
        data={"action": "password", "identifier": email, "password": PASSWORD, "next": "/claim/abc"},
        headers=ORIGIN,
    )
    assert ok.status_code == 303 and ok.headers["location"] == "/claim/abc"
    assert client.cookies.get(COOKIE_NAME)
    assert (await client.get("/auth/me")).json()["user"]["email"] == email
    home = await client.get("/")
    assert home.status_code == 200 and email in home.text


async def test_login_form_first_password_with_terms(client, core):
    email = new_email()
    ok = await client.post(
        "/login",
        data={"action": "password", "identifier": email, "password": PASSWORD, "accept_legal": "1"},
        headers=ORIGIN,
    )
    assert ok.status_code == 303 and ok.headers["location"] == "/"
    assert (await client.get("/auth/me")).status_code == 200


async def test_login_form_refuses_a_foreign_origin(client, core):
    email = await password_user(core)
    response = await client.post(
        "/login", data={"action": "password", "identifier": email, "password": PASSWORD}, headers=EVIL
    )
    assert response.status_code == 403
    assert client.cookies.get(COOKIE_NAME) is None


async def test_magic_landing_does_not_consume_on_get(client, core):
    email = new_email()
    await make_user(core, email=email)
    await client.post(
        "/auth/magic-link", json={"email": email, "nextUrl": "/claim/abc", "legalAcceptance": LEGAL}
    )
    token = await last_token(core, email)
    for _ in range(2):  # a mail scanner prefetching the link changes nothing
        landing = await client.get(f"/auth/magic?token={quote(token)}")
        assert landing.status_code == 200
        assert 'action="/auth/magic"' in landing.text and token in landing.text
        assert landing.headers["cache-control"] == "no-store"
        assert landing.headers["referrer-policy"] == "same-origin"
    assert await link_used_at(core, email) is None
    assert client.cookies.get(COOKIE_NAME) is None

    done = await client.post("/auth/magic", data={"token": token}, headers=ORIGIN)
    assert done.status_code == 303 and done.headers["location"] == "/claim/abc"
    assert COOKIE_NAME in done.headers["set-cookie"]
    assert await link_used_at(core, email) is not None
    assert (await client.get("/auth/me")).json()["user"]["email"] == email

    again = await client.post("/auth/magic", data={"token": token}, headers=ORIGIN)
    assert again.status_code == 410 and "used already" in again.text
    stale = await client.get(f"/auth/magic?token={quote(token)}")
    assert stale.status_code == 410 and 'action="/auth/magic"' not in stale.text
    unknown = await client.get("/auth/magic?token=nothing")
    assert unknown.status_code == 401 and "not valid" in unknown.text


async def test_claim_page_signed_out_then_signed_in(client, app, core):
    reg = await register_agent(client, description="Summarises <b>papers</b>")
    code = claim_code(reg)
    anonymous = await client.get(f"/claim/{code}")
    assert anonymous.status_code == 200
    assert reg["agent"]["name"] in anonymous.text
    assert "&lt;b&gt;papers&lt;/b&gt;" in anonymous.text  # escaped
    assert f"/login?next=%2Fclaim%2F{code}" in anonymous.text
    assert f'action="/claim/{code}"' not in anonymous.text
    bounce = await client.post(f"/claim/{code}", headers=ORIGIN)
    assert bounce.status_code == 303 and bounce.headers["location"] == f"/login?next=%2Fclaim%2F{code}"

    owner, owner_id = await owner_client(app, core)
    async with owner:
        page = await owner.get(f"/claim/{code}")
        assert page.status_code == 200 and f'action="/claim/{code}"' in page.text
        no_origin = await owner.post(f"/claim/{code}", headers={"Origin": ""})
        assert no_origin.status_code == 403
        claimed = await owner.post(f"/claim/{code}")
        assert claimed.status_code == 200, claimed.text
        assert "Claimed" in claimed.text
        again = await owner.post(f"/claim/{code}")
        assert again.status_code == 409 and "claimed already" in again.text
    async with core.uow(write=False) as uow:
        agent = await uow.session.get(Agent, reg["agent"]["id"])
        assert agent is not None and agent.owner_id == owner_id
    patched = await client.patch(
        "/api/v2/agents/me", json={"name": "Mine now"}, headers=key_headers(reg["apiKey"])
    )
    assert patched.status_code == 200


async def test_claim_page_unknown_code(client):
    response = await client.get(f"/claim/{uuid.uuid4().hex}")
    assert response.status_code == 404
    assert "No such claim link" in response.text


async def test_logout_page(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        out = await owner.post("/logout")
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert (await owner.get("/auth/me")).status_code == 401
    async with new_client(app) as anonymous:
        assert (await anonymous.get("/")).status_code == 200


# --- error pages: a refused request is a page, never problem+json --------------------------------


def assert_page(response, status: int, *texts: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"
    for text in texts:
        assert text in response.text


async def test_login_form_errors_keep_next_and_what_was_typed(client, core):
    email = await password_user(core)
    wrong = await client.post(
        "/login",
        data={"action": "password", "identifier": email, "password": "wrong one!", "next": "/claim/abc"},
        headers=ORIGIN,
    )
    assert_page(wrong, 401, "not right", f'value="{email}"', 'value="/claim/abc"')
    assert "wrong one!" not in wrong.text
    empty = await client.post("/login", data={"action": "password", "identifier": "grace"}, headers=ORIGIN)
    assert_page(empty, 422, "Please fill in every field.", 'value="grace"')
    bad = await client.post("/login", data={"action": "magic", "email": " nope "}, headers=ORIGIN)
    assert_page(bad, 422, "Enter a valid email address.", 'value=" nope "')
    # A post from another site is refused before anything it sent is shown back.
    foreign = await client.post(
        "/login",
        data={"action": "password", "identifier": email, "password": PASSWORD, "next": "/claim/abc"},
        headers=EVIL,
    )
    assert_page(foreign, 403, "trusted origin", 'value="/claim/abc"')
    assert f'value="{email}"' not in foreign.text


async def test_page_posts_from_a_foreign_origin_are_refused_as_pages(client, app, core):
    email = new_email()
    await make_user(core, email=email)
    await client.post("/auth/magic-link", json={"email": email})
    token = await last_token(core, email)
    magic = await client.post("/auth/magic", data={"token": token}, headers=EVIL)
    assert_page(magic, 403, "trusted origin", "This link cannot be used")
    assert await link_used_at(core, email) is None

    reg = await register_agent(client)
    owner, _ = await owner_client(app, core)
    async with owner:
        claim = await owner.post(f"/claim/{claim_code(reg)}", headers=EVIL)
        assert_page(claim, 403, "trusted origin")
        out = await owner.post("/logout", headers=EVIL)
        assert_page(out, 403, "Not signed out", "trusted origin")
        assert (await owner.get("/auth/me")).status_code == 200
    async with core.uow(write=False) as uow:
        agent = await uow.session.get(Agent, reg["agent"]["id"])
        assert agent is not None and agent.owner_id is None
