"""The human sign-in surface: register, magic links, password and dev login, sessions, claim verification."""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select, update

from callboard_core import clock
from callboard_core.auth.models import MagicLink
from callboard_core.auth.sessions import COOKIE_NAME
from callboard_core.config import Environment
from callboard_core.container import Core
from callboard_core.mail.models import OutboxMessage
from callboard_core.security import passwords
from callboard_core.users.models import LegalConsent, User, UserStatus
from http_api.app import create_app
from tests.conftest import (
    BASE_URL,
    ORIGIN,
    make_settings,
    make_user,
    new_client,
    owner_client,
    register_agent,
)

LEGAL = {"acceptedTerms": True, "acceptedPrivacy": True}
PASSWORD = "correct horse battery"
EVIL = {"Origin": "https://evil.example"}


def new_email() -> str:
    return f"p{uuid.uuid4().hex[:10]}@example.com"


async def mails_to(core: Core, email: str) -> list[OutboxMessage]:
    async with core.uow(write=False) as uow:
        return list(
            (
                await uow.session.execute(
                    select(OutboxMessage)
                    .where(OutboxMessage.to_address == email)
                    .order_by(OutboxMessage.created_at)
                )
            ).scalars()
        )


def token_of(message: OutboxMessage) -> str:
    match = re.search(r"/auth/magic\?token=([A-Za-z0-9_\-]+)", message.body_text)
    assert match, message.body_text
    return match.group(1)


async def last_token(core: Core, email: str) -> str:
    messages = await mails_to(core, email)
    assert messages, f"no mail to {email}"
    return token_of(messages[-1])


async def user_row(core: Core, email: str) -> User | None:
    async with core.uow(write=False) as uow:
        return (await uow.session.execute(select(User).where(User.email == email))).scalar_one_or_none()


async def consents(core: Core, user_id: str) -> int:
    async with core.uow(write=False) as uow:
        return int(
            (
                await uow.session.execute(
                    select(func.count()).select_from(LegalConsent).where(LegalConsent.user_id == user_id)
                )
            ).scalar_one()
        )


async def sign_in_by_link(client: httpx.AsyncClient, core: Core, email: str) -> dict[str, Any]:
    response = await client.post("/auth/magic-link", json={"email": email})
    assert response.status_code == 202, response.text
    verified = await client.post("/auth/verify", json={"token": await last_token(core, email)})
    assert verified.status_code == 200, verified.text
    return verified.json()


async def password_user(core: Core, *, verified: bool = True) -> str:
    email = new_email()
    await make_user(core, email=email, password=PASSWORD)
    if verified:
        async with core.uow() as uow:
            await uow.session.execute(
                update(User).where(User.email == email).values(email_verified_at=clock.now())
            )
    return email


# --- register, magic link, verify ----------------------------------------------------------------


async def test_register_then_link_then_verify_then_me(client, core):
    email = new_email()
    response = await client.post(
        "/auth/register",
        json={
            "email": email.upper(),
            "legalAcceptance": LEGAL,
            "name": "Ada",
            "company": "Engines Ltd",
            "signupIntent": "SELLER",
            "nextUrl": "/claim/abc",
        },
    )
    assert response.status_code == 202, response.text
    assert response.json() == {"status": "accepted"}
    user = await user_row(core, email)
    assert user is not None and user.email_verified_at is None and user.name == "Ada"
    assert await consents(core, user.id) == 1
    (message,) = await mails_to(core, email)
    assert message.kind == "magic_link"
    assert f"{BASE_URL}/auth/magic?token=" in message.body_text

    assert (await client.get("/auth/me")).status_code == 401
    verified = await client.post("/auth/verify", json={"token": token_of(message)})
    assert verified.status_code == 200, verified.text
    body = verified.json()
    assert body["nextUrl"] == "/claim/abc"
    assert body["user"]["email"] == email
    assert body["user"]["onboardingProfile"]["company"] == "Engines Ltd"
    assert body["user"]["onboardingProfile"]["signupIntent"] == "SELLER"
    set_cookie = verified.headers["set-cookie"]
    assert set_cookie.startswith(f"{COOKIE_NAME}=") and "httponly" in set_cookie.lower()
    assert "samesite=lax" in set_cookie.lower()

    me = await client.get("/auth/me")
    assert me.status_code == 200, me.text
    assert me.json()["user"]["id"] == user.id
    refreshed = await user_row(core, email)
    assert refreshed is not None and refreshed.email_verified_at is not None


async def test_register_existing_account_answers_the_same_and_changes_nothing(client, core):
    email = new_email()
    first = await client.post("/auth/register", json={"email": email, "name": "Owner"})
    second = await client.post("/auth/register", json={"email": email, "name": "Intruder", "company": "X"})
    assert (
        (first.status_code, first.json())
        == (second.status_code, second.json())
        == (202, {"status": "accepted"})
    )
    user = await user_row(core, email)
    assert user is not None and user.name == "Owner" and user.company is None
    assert len(await mails_to(core, email)) == 2
    assert await consents(core, user.id) == 0  # no legal acceptance given


async def test_magic_link_same_answer_for_known_and_unknown_email(client, core):
    known = new_email()
    await make_user(core, email=known)
    unknown = new_email()
    a = await client.post("/auth/magic-link", json={"email": known})
    b = await client.post("/auth/magic-link", json={"email": unknown})
    assert a.status_code == b.status_code == 202
    assert a.json() == b.json() == {"status": "accepted"}
    assert len(await mails_to(core, known)) == 1
    assert await mails_to(core, unknown) == []  # no legal acceptance: nothing sent, no account made
    assert await user_row(core, unknown) is None


async def test_magic_link_sign_up_with_legal_acceptance_creates_account_on_verify(client, core):
    email = new_email()
    response = await client.post(
        "/auth/magic-link", json={"email": email, "legalAcceptance": LEGAL, "nextUrl": f"{BASE_URL}/welcome"}
    )
    assert response.status_code == 202
    assert await user_row(core, email) is None  # created only once the address is proved
    verified = await client.post("/auth/verify", json={"token": await last_token(core, email)})
    assert verified.status_code == 200, verified.text
    assert verified.json()["nextUrl"] == f"{BASE_URL}/welcome"
    user = await user_row(core, email)
    assert user is not None and user.email_verified_at is not None
    assert await consents(core, user.id) == 1


async def test_magic_link_validation(client, core):
    bad_email = await client.post("/auth/magic-link", json={"email": "not-an-email"})
    assert bad_email.status_code == 422
    for next_url in ("//evil.example/x", "https://evil.example/x", "javascript:alert(1)", "/\\evil.example"):
        response = await client.post("/auth/magic-link", json={"email": new_email(), "nextUrl": next_url})
        assert response.status_code == 422, next_url
        assert response.json()["errors"][0]["field"] == "nextUrl"
        assert response.json()["errors"][0]["code"] == "invalid_next_url"
    stale = await client.post(
        "/auth/magic-link",
        json={"email": new_email(), "legalAcceptance": {**LEGAL, "termsVersion": "1999-01-01"}},
    )
    assert stale.status_code == 422 and stale.json()["errors"][0]["code"] == "outdated_version"
    versions = await client.get("/auth/legal-versions")
    assert versions.status_code == 200
    assert versions.json() == {
        "termsVersion": core.settings.terms_version,
        "privacyVersion": core.settings.privacy_version,
    }


async def test_magic_link_is_single_use_and_stored_hashed(client, app, core):
    email = new_email()
    await make_user(core, email=email)
    await client.post("/auth/magic-link", json={"email": email})
    token = await last_token(core, email)
    async with core.uow(write=False) as uow:
        stored = (
            await uow.session.execute(select(MagicLink.token_hash).where(MagicLink.email == email))
        ).scalar_one()
    assert token not in stored
    assert (await client.post("/auth/verify", json={"token": token})).status_code == 200
    async with new_client(app) as other:
        again = await other.post("/auth/verify", json={"token": token})
    assert again.status_code == 410 and again.json()["code"] == "magic_link_used"
    unknown = await client.post("/auth/verify", json={"token": "nope-" + secrets.token_urlsafe(16)})
    assert unknown.status_code == 401 and unknown.json()["code"] == "invalid_magic_link"


async def test_magic_link_expires_after_fifteen_minutes(client, core):
    email = new_email()
    await make_user(core, email=email)
    frozen = clock.FrozenClock()
    previous = clock.set_clock(frozen)
    try:
        await client.post("/auth/magic-link", json={"email": email})
        token = await last_token(core, email)
        frozen.advance(minutes=14)
        await client.post("/auth/magic-link", json={"email": email})
        fresh = await last_token(core, email)
        frozen.advance(minutes=2)
        expired = await client.post("/auth/verify", json={"token": token})
        assert expired.status_code == 410 and expired.json()["code"] == "magic_link_expired"
        assert (await client.post("/auth/verify", json={"token": fresh})).status_code == 200
    finally:
        clock.set_clock(previous)


async def test_suspended_user_gets_no_link_and_cannot_verify_an_old_one(client, core):
    email = new_email()
    await make_user(core, email=email)
    await client.post("/auth/magic-link", json={"email": email})
    token = await last_token(core, email)
    async with core.uow() as uow:
        await uow.session.execute(update(User).where(User.email == email).values(status=UserStatus.SUSPENDED))
    response = await client.post("/auth/magic-link", json={"email": email})
    assert response.status_code == 202
    assert len(await mails_to(core, email)) == 1
    refused = await client.post("/auth/verify", json={"token": token})
    assert refused.status_code == 401 and refused.json()["code"] == "account_unavailable"


# --- sessions ------------------------------------------------------------------------------------


async def test_sign_in_again_rotates_the_session(client, app, core):
    email = new_email()
    await make_user(core, email=email)
    await sign_in_by_link(client, core, email)
    old = client.cookies.get(COOKIE_NAME)
    assert old
    await sign_in_by_link(client, core, email)
    new = client.cookies.get(COOKIE_NAME)
    assert new and new != old
    assert (await client.get("/auth/me")).status_code == 200
    async with new_client(app) as stale:
        stale.cookies.set(COOKIE_NAME, old)
        response = await stale.get("/auth/me")
    assert response.status_code == 401 and response.json()["code"] == "invalid_session"


async def test_logout_ends_every_session_of_the_user(app, core):
    email = await password_user(core)
    async with new_client(app) as laptop, new_client(app) as phone:
        for browser in (laptop, phone):
            signed = await browser.post(
                "/auth/password-login", json={"identifier": email, "password": PASSWORD}
            )
            assert signed.status_code == 200, signed.text
        assert (await phone.get("/auth/me")).status_code == 200
        out = await laptop.post("/auth/logout", headers=ORIGIN)
        assert out.status_code == 200 and out.json() == {"status": "ok"}
        assert laptop.cookies.get(COOKIE_NAME) is None
        assert "max-age=0" in out.headers["set-cookie"].lower()
        assert (await phone.get("/auth/me")).status_code == 401


async def test_session_mutations_need_a_trusted_origin(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        evil = await owner.post("/auth/logout", headers=EVIL)
        assert evil.status_code == 403 and evil.json()["code"] == "untrusted_origin"
        # The refusal says which origin this server takes (serving on another port than the base URL's).
        assert evil.json()["expected"] == [BASE_URL] and BASE_URL in evil.json()["message"]
        del owner.headers["Origin"]
        missing = await owner.post("/auth/logout")
        assert missing.status_code == 403 and missing.json()["code"] == "untrusted_origin"
        assert (await owner.get("/auth/me")).status_code == 200  # still signed in
        assert (await owner.post("/auth/logout", headers=ORIGIN)).status_code == 200


async def test_me_without_session_is_401(client):
    response = await client.get("/auth/me")
    assert response.status_code == 401 and response.json()["code"] == "session_required"


# --- password login ------------------------------------------------------------------------------


async def test_password_login_first_time_needs_legal_acceptance(client, app, core):
    email = new_email()
    refused = await client.post("/auth/password-login", json={"identifier": email, "password": PASSWORD})
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_credentials"
    assert await user_row(core, email) is None
    weak = await client.post(
        "/auth/password-login", json={"identifier": email, "password": "short", "legalAcceptance": LEGAL}
    )
    assert weak.status_code == 422 and weak.json()["errors"][0]["field"] == "password"
    created = await client.post(
        "/auth/password-login", json={"identifier": email, "password": PASSWORD, "legalAcceptance": LEGAL}
    )
    assert created.status_code == 200, created.text
    assert created.json()["user"]["email"] == email
    assert client.cookies.get(COOKIE_NAME)
    user = await user_row(core, email)
    assert user is not None and user.email_verified_at is None and user.password_hash
    assert await consents(core, user.id) == 1
    async with new_client(app) as other:
        again = await other.post(
            "/auth/password-login", json={"identifier": email.upper(), "password": PASSWORD}
        )
        assert again.status_code == 200, again.text


async def test_password_login_failures_are_one_401(client, core):
    email = await password_user(core)
    async with core.uow() as uow:
        await uow.session.execute(update(User).where(User.email == email).values(username="Grace"))
    wrong = await client.post(
        "/auth/password-login", json={"identifier": email, "password": "wrong password!"}
    )
    unknown = await client.post("/auth/password-login", json={"identifier": "nobody", "password": PASSWORD})
    for response in (wrong, unknown):
        assert response.status_code == 401
        assert response.json()["code"] == "invalid_credentials"
    assert wrong.json()["message"] == unknown.json()["message"]
    by_username = await client.post(
        "/auth/password-login", json={"identifier": "grace", "password": PASSWORD}
    )
    assert by_username.status_code == 200, by_username.text
    async with core.uow() as uow:
        await uow.session.execute(update(User).where(User.email == email).values(status=UserStatus.SUSPENDED))
    suspended = await client.post("/auth/password-login", json={"identifier": email, "password": PASSWORD})
    assert suspended.status_code == 401 and suspended.json()["code"] == "invalid_credentials"


async def test_first_password_cannot_be_set_on_a_verified_account(client, app, core):
    """A magic-link user has no password; nobody may set one for them through the login form."""
    email = new_email()
    await make_user(core, email=email)
    async with new_client(app) as owner:
        await sign_in_by_link(owner, core, email)
    taken = await client.post(
        "/auth/password-login", json={"identifier": email, "password": PASSWORD, "legalAcceptance": LEGAL}
    )
    assert taken.status_code == 401 and taken.json()["code"] == "invalid_credentials"


async def test_verifying_the_address_drops_a_password_set_by_someone_else(app, core):
    email = new_email()
    async with new_client(app) as squatter, new_client(app) as owner:
        squat = await squatter.post(
            "/auth/password-login", json={"identifier": email, "password": PASSWORD, "legalAcceptance": LEGAL}
        )
        assert squat.status_code == 200
        await sign_in_by_link(owner, core, email)
        assert (await squatter.get("/auth/me")).status_code == 401
        retry = await squatter.post("/auth/password-login", json={"identifier": email, "password": PASSWORD})
        assert retry.status_code == 401
        assert (await owner.get("/auth/me")).status_code == 200


async def test_verifying_in_the_same_browser_keeps_your_password(client, app, core):
    email = new_email()
    created = await client.post(
        "/auth/password-login", json={"identifier": email, "password": PASSWORD, "legalAcceptance": LEGAL}
    )
    assert created.status_code == 200
    await sign_in_by_link(client, core, email)
    async with new_client(app) as other:
        again = await other.post("/auth/password-login", json={"identifier": email, "password": PASSWORD})
    assert again.status_code == 200, again.text


async def test_login_csrf_untrusted_origin_is_refused(client, core):
    email = await password_user(core)
    body = {"identifier": email, "password": PASSWORD}
    evil = await client.post("/auth/password-login", json=body, headers=EVIL)
    assert evil.status_code == 403 and evil.json()["code"] == "untrusted_origin"
    assert (await client.post("/auth/password-login", json=body, headers=ORIGIN)).status_code == 200
    assert (
        await client.post("/auth/password-login", json=body)
    ).status_code == 200  # no Origin: not a browser


async def test_sign_in_is_not_replayed_by_idempotency_key(client, core):
    email = await password_user(core)
    headers = {"Idempotency-Key": "login-1"}
    body = {"identifier": email, "password": PASSWORD}
    first = await client.post("/auth/password-login", json=body, headers=headers)
    second = await client.post("/auth/password-login", json=body, headers=headers)
    assert first.status_code == second.status_code == 200
    assert "idempotent-replayed" not in second.headers
    assert first.cookies.get(COOKIE_NAME) != second.cookies.get(COOKIE_NAME)


# --- dev login -----------------------------------------------------------------------------------


async def test_dev_login_outside_production(client, core):
    email = new_email()
    created = await client.post("/auth/dev-login", json={"email": email, "password": PASSWORD})
    assert created.status_code == 200, created.text
    assert (await client.get("/auth/me")).json()["user"]["email"] == email
    wrong = await client.post("/auth/dev-login", json={"email": email, "password": "another password"})
    assert wrong.status_code == 401 and wrong.json()["code"] == "invalid_credentials"


async def test_dev_login_is_refused_in_production(database_url, tmp_root, core):
    settings = make_settings(
        database_url, tmp_root, env=Environment.PRODUCTION, allow_sandbox_in_production=True
    )
    prod = Core.build(settings)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(core=prod)), base_url=BASE_URL
        ) as c:
            response = await c.post("/auth/dev-login", json={"email": new_email(), "password": PASSWORD})
        assert response.status_code == 403 and response.json()["code"] == "dev_login_disabled"
        assert "set-cookie" not in response.headers
    finally:
        passwords.configure(fast=True)
        await prod.mailer.drain()
        await prod.db.dispose()


# --- the signed-in account -----------------------------------------------------------------------


async def test_onboarding_profile(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        assert (await owner.get("/auth/me")).json()["user"]["onboardingProfile"] is None
        response = await owner.post(
            "/auth/onboarding-profile",
            json={
                "name": "Lin",
                "company": "Acme",
                "roleTitle": "CTO",
                "signupIntent": "BOTH",
                "useCase": "hire agents",
            },
        )
        assert response.status_code == 200, response.text
        user = response.json()["user"]
        assert user["name"] == "Lin"
        assert user["onboardingProfile"] == {
            "company": "Acme",
            "industry": None,
            "roleTitle": "CTO",
            "signupIntent": "BOTH",
            "useCase": "hire agents",
        }
        partial = await owner.post("/auth/onboarding-profile", json={"industry": "Robotics"})
        assert partial.json()["user"]["onboardingProfile"]["company"] == "Acme"
        assert partial.json()["user"]["onboardingProfile"]["industry"] == "Robotics"
        bad = await owner.post("/auth/onboarding-profile", json={"signupIntent": "EVERYTHING"})
        assert bad.status_code == 422


async def test_change_password_then_sign_in_with_it(app, core):
    email = await password_user(core)
    async with new_client(app) as browser, new_client(app) as other:
        for c in (browser, other):
            assert (
                await c.post("/auth/password-login", json={"identifier": email, "password": PASSWORD})
            ).status_code == 200
        weak = await browser.post("/auth/password", json={"password": "short"}, headers=ORIGIN)
        assert weak.status_code == 422
        changed = await browser.post(
            "/auth/password", json={"password": "a brand new passphrase"}, headers=ORIGIN
        )
        assert changed.status_code == 200 and changed.json() == {"status": "updated"}
        assert (await browser.get("/auth/me")).status_code == 200  # this session stays
        assert (await other.get("/auth/me")).status_code == 401  # the others end
    async with new_client(app) as fresh:
        old = await fresh.post("/auth/password-login", json={"identifier": email, "password": PASSWORD})
        assert old.status_code == 401
        new = await fresh.post(
            "/auth/password-login", json={"identifier": email, "password": "a brand new passphrase"}
        )
        assert new.status_code == 200


# --- claim verification --------------------------------------------------------------------------


async def test_claim_verification_start_then_verify(client, app, core):
    """An unverified account cannot claim; once its address is verified it claims and the claim verifies."""
    email = new_email()
    _, token = await make_user(core, email=email, verified=False)
    reg = await register_agent(client)
    agent_id = reg["agent"]["id"]
    code = reg["claimUrl"].rsplit("/", 1)[1]
    async with new_client(app) as owner:
        owner.cookies.set(COOKIE_NAME, token)
        owner.headers.update(ORIGIN)
        early = await owner.post(f"/api/v2/claim/{code}")
        assert early.status_code == 403 and early.json()["code"] == "email_unverified"

        assert (await owner.post("/auth/magic-link", json={"email": email})).status_code == 202
        (message,) = await mails_to(core, email)
        assert (await owner.post("/auth/verify", json={"token": token_of(message)})).status_code == 200
        assert (await owner.post(f"/api/v2/claim/{code}")).status_code == 200

        started = await owner.post(f"/api/v2/agents/{agent_id}/claim/start")
        assert started.status_code == 200, started.text
        assert started.json()["claimStatus"] == "CLAIMED"
        done = await owner.post(f"/api/v2/agents/{agent_id}/claim/verify")
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "verified" and done.json()["claimStatus"] == "VERIFIED"
        assert done.json()["verifiedAt"]

        again = await owner.post(f"/api/v2/agents/{agent_id}/claim/start")
        assert again.json()["status"] == "verified"
        assert len(await mails_to(core, email)) == 1  # a verified owner gets no further mail
        me = await client.get("/api/v2/agents/me", headers={"X-API-Key": reg["apiKey"]})
        assert me.json()["bountyProfile"]["claimStatus"] == "VERIFIED"

    stranger, _ = await owner_client(app, core)
    async with stranger:
        for step in ("start", "verify"):
            response = await stranger.post(f"/api/v2/agents/{agent_id}/claim/{step}")
            assert response.status_code == 404 and response.json()["code"] == "agent_not_found"


async def test_claim_start_for_a_verified_owner_needs_no_mail(client, app, core):
    email = new_email()
    await make_user(core, email=email)
    reg = await register_agent(client)
    code = reg["claimUrl"].rsplit("/", 1)[1]
    async with new_client(app) as owner:
        await sign_in_by_link(owner, core, email)
        owner.headers.update(ORIGIN)
        assert (await owner.post(f"/api/v2/claim/{code}")).status_code == 200
        started = await owner.post(f"/api/v2/agents/{reg['agent']['id']}/claim/start")
        assert started.json()["status"] == "verification_sent"
        assert len(await mails_to(core, email)) == 1  # only the sign-in link
        done = await owner.post(f"/api/v2/agents/{reg['agent']['id']}/claim/verify")
        assert done.status_code == 200 and done.json()["status"] == "verified"
        verified_at = datetime.fromisoformat(done.json()["verifiedAt"].replace("Z", "+00:00"))
        assert timedelta(0) <= clock.now() - verified_at < timedelta(minutes=5)
