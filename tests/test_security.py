"""Attacks found by a probe of the real server (issue 23), replayed as sequences of requests through the app on
SQLite and PostgreSQL. Each test is the attack; it passes when the attack does no harm."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from callboard_core.agents import dashboard
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.agents.keys import create_for_owner
from callboard_core.api_keys.schemas import ApiKeyCreate
from callboard_core.audit.models import AuditEvent
from callboard_core.auth.sessions import COOKIE_NAME
from callboard_core.container import Core
from callboard_core.ids import new_id
from callboard_core.principals import Actor
from callboard_core.processor import webhooks
from callboard_core.processor.sandbox import CARD_OK
from callboard_core.security import tokens
from callboard_core.setup_links.models import SetupLinkStart
from callboard_core.users.models import User
from tests.conftest import BASE_URL, ORIGIN, PG_ADMIN_URL, key_headers, make_user, new_client, register_agent
from tests.jobs_helpers import create_published, new_agent, new_owner, to_review
from tests.mcp_helpers import call, http_client, on_database_env, serving, stdio_client
from tests.payments_helpers import browser, buyer, draft, money, post_event, sandbox, start_topup, submit_page
from tests.payments_helpers import deliver as deliver_payments
from tests.payout_helpers import deliver, onboard_through_setup_link
from tests.server_process import spawn, wait_ready
from tests.test_auth import LEGAL, mails_to, new_email, token_of
from tests.test_cards import available, paid_topup_event, topup_row, topup_transactions

PASSWORD = "attacker chose this one"


def _attacker(app: Any) -> httpx.AsyncClient:
    attacker = new_client(app)
    attacker.headers.update(ORIGIN)
    return attacker


async def _first_password(attacker: httpx.AsyncClient, email: str) -> None:
    """The attacker sets the first password on an address that is not theirs (allowed by the spec)."""
    r = await attacker.post(
        "/auth/password-login", json={"identifier": email, "password": PASSWORD, "legalAcceptance": LEGAL}
    )
    assert r.status_code == 200, r.text


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["code"] == "email_unverified"
    assert "magic-link" in response.json()["message"]


async def test_an_unverified_account_can_create_no_credential_agent_token_or_money_move(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    victim_email = new_email()
    provisional = await register_agent(client)
    code = provisional["claimUrl"].rsplit("/", 1)[1]
    async with _attacker(app) as attacker:
        await _first_password(attacker, victim_email)
        assert (await attacker.get("/auth/me")).json()["user"]["email"] == victim_email
        agent_body = {"name": "Mine", "endpointUrl": "https://a.example.com/h", "capabilities": ["python"]}
        for method, path, body in (
            ("POST", "/agents/dashboard", agent_body),
            ("POST", "/api-keys/dashboard", {}),
            ("POST", "/api/v2/owner/agent-enroll-tokens", None),
            ("POST", "/api/onboarding/mint", {}),
            ("POST", f"/api/v2/claim/{code}", None),
            ("PATCH", "/api/v2/agents/dashboard/agt_x/policy", {"autoPublishLimitCents": 100_000}),
            ("POST", "/me/billing/topup", {"amountCents": 10_000}),
            ("POST", "/me/billing/payment-methods", None),
            ("PATCH", "/me/billing/limits", {"perTaskCapCents": None}),
            ("POST", "/me/processor/onboarding-link", {}),
            ("GET", "/me/billing", None),
            ("GET", "/agents/dashboard/mine", None),
        ):
            _refused(await attacker.request(method, path, json=body))
        # The claim page refuses the same way.
        page = await attacker.post(f"/claim/{code}")
        assert page.status_code == 403 and "Confirm your email" in page.text

    # The provisional agent is still unclaimed: its key is still read-only.
    me = await client.get("/api/v2/agents/me", headers=key_headers(provisional["apiKey"]))
    assert me.json()["bountyProfile"]["claimStatus"] == "PROVISIONAL"


async def test_the_owners_first_verification_ends_the_attackers_session_and_password(
    app: Any, core: Core
) -> None:
    victim_email = new_email()
    async with _attacker(app) as attacker, new_client(app) as owner:
        await _first_password(attacker, victim_email)
        (verify_mail,) = await mails_to(core, victim_email)  # the first password mails the address a link
        assert "Confirm your email" in verify_mail.subject
        owner.headers.update(ORIGIN)
        r = await owner.post("/auth/verify", json={"token": token_of(verify_mail)})
        assert r.status_code == 200, r.text
        assert (await attacker.get("/auth/me")).status_code == 401
        again = await attacker.post(
            "/auth/password-login", json={"identifier": victim_email, "password": PASSWORD}
        )
        assert again.status_code == 401
        # The owner, now verified, can act.
        made = await owner.post(
            "/agents/dashboard",
            json={"name": "Real", "endpointUrl": "https://r.example.com/h", "capabilities": []},
        )
        assert made.status_code == 201, made.text


async def test_grants_held_before_verification_are_revoked_and_listed_to_the_owner(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """The second wall: an account that already held credentials before the rule (made here through the core,
    as a release without the rule let the attacker do) loses them all when the real owner verifies."""
    victim_email = new_email()
    async with _attacker(app) as attacker:
        await _first_password(attacker, victim_email)
    async with core.uow() as uow:
        user = (await uow.session.execute(select(User).where(User.email == victim_email))).scalar_one()
        actor = Actor.owner(user.id)
        made = await dashboard.create(
            uow.session,
            actor,
            agent_schemas.AgentCreate(
                name="Planted", endpoint_url="https://p.example.com/h", capabilities=[]
            ),
        )
        agent_id, agent_key = made.agent.id, made.api_key
        owner_key = (await create_for_owner(uow.session, actor, ApiKeyCreate())).key
        await agents.update_policy(
            uow.session, actor, agent_id, agent_schemas.AgentPolicyUpdate(auto_publish_limit_cents=100_000)
        )
        enroll = await agents.mint_enroll_token(uow.session, core.settings, actor)
        handle = made.agent.handle
    assert (await client.get("/api/v2/agents/me", headers=key_headers(agent_key))).status_code == 200

    async with new_client(app) as owner:
        owner.headers.update(ORIGIN)
        assert (await owner.post("/auth/magic-link", json={"email": victim_email})).status_code == 202
        mail = (await mails_to(core, victim_email))[-1]
        assert (await owner.post("/auth/verify", json={"token": token_of(mail)})).status_code == 200

        for key in (agent_key, owner_key):
            r = await client.get("/api/v2/agents/me", headers=key_headers(key))
            assert r.status_code == 401 and r.json()["code"] == "invalid_api_key"
        enrolled = await client.post(
            "/api/v2/agents/register",
            json={
                "name": "Via enroll",
                "endpointUrl": "https://e.example.com/h",
                "enrollToken": enroll.enroll_token,
            },
        )
        assert enrolled.status_code == 422 and enrolled.json()["code"] == "invalid_enroll_token"
        agent = (await owner.get(f"/agents/dashboard/{agent_id}")).json()
        assert agent["bountyProfile"]["autoPublishLimitCents"] == 0

    notice = (await mails_to(core, victim_email))[-1]
    assert notice.subject == "callboard: access revoked on your account"
    for line in (
        tokens.api_key_prefix(agent_key),
        tokens.api_key_prefix(owner_key),
        "1 unused agent enroll token",
        f"@{handle}",
    ):
        assert line in notice.body_text, (line, notice.body_text)
    async with core.uow(write=False) as uow:
        audit = (
            await uow.session.execute(
                select(AuditEvent).where(AuditEvent.action == "user.unverified_grants_revoked")
            )
        ).scalar_one()
        assert audit.target_id == user.id


# --- an agent's key and the owner's payout account --------------------------------------------------


async def test_an_agent_key_alone_never_makes_a_payout_account_ready(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    path = f"/agents/{agent.id}/processor/onboarding-link"
    async with new_client(app) as runtime, _attacker(app) as stranger, new_client(app) as anonymous:
        off_site = await runtime.post(path, json={"returnUrl": "https://evil.example/x"}, headers=agent.h)
        assert off_site.status_code == 422 and off_site.json()["code"] == "validation_failed", off_site.text
        assert off_site.json()["errors"][0]["code"] == "untrusted_return_url"

        link = await runtime.post(path, headers=agent.h)
        assert link.status_code == 200, link.text
        url = link.json()["url"]
        # What the key gets is this site's setup page, never the processor's onboarding.
        assert urlsplit(url).path.startswith("/setup/"), url
        setup_path = urlsplit(url).path

        # Opened by anyone but the signed-in owner, it starts nothing.
        assert (await anonymous.get(setup_path)).status_code == 200
        signed_out = await anonymous.post(setup_path)
        assert signed_out.status_code == 303 and signed_out.headers["location"].startswith("/login")
        _, stranger_token = await make_user(core)
        stranger.cookies.set(COOKIE_NAME, stranger_token)
        refused = await stranger.post(setup_path)
        assert refused.status_code == 404, refused.text
        # The account's id (the status answers it to the key) opens no hosted onboarding either: the
        # processor's links hold a single-use secret of their own.
        account_id = link.json()["processorAccountId"]
        guessed = f"/sandbox/processor/onboarding/{account_id}"
        assert (await anonymous.get(guessed)).status_code == 404
        assert (await anonymous.post(guessed)).status_code == 404
        await deliver(core)
        status = await runtime.get(f"/agents/{agent.id}/processor/status", headers=agent.h)
        assert status.json()["processorPayoutsEnabled"] is False
        async with core.uow(write=False) as uow:  # no processor onboarding was ever started
            assert await uow.session.scalar(select(func.count()).select_from(SetupLinkStart)) == 0

        # The owner, signed in, completes it: now (and only now) the agent's account is ready.
        await onboard_through_setup_link(owner.client, url)
        await deliver(core)
        status = await runtime.get(f"/agents/{agent.id}/processor/status", headers=agent.h)
        assert status.json()["processorPayoutsEnabled"] is True
        assert status.json()["processorAccountId"] == link.json()["processorAccountId"]


async def test_the_owners_return_urls_stay_on_this_site(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    for path in ("/me/processor/onboarding-link", f"/agents/dashboard/{agent.id}/processor/onboarding-link"):
        for field in ("returnUrl", "refreshUrl"):
            r = await owner.client.post(path, json={field: "https://evil.example/after"})
            assert r.status_code == 422 and r.json()["errors"][0]["code"] == "untrusted_return_url", r.text
    topup = await owner.client.post(
        "/me/billing/topup", json={"amountCents": 1000, "returnUrl": "https://evil.example"}
    )
    assert topup.status_code == 422 and topup.json()["errors"][0]["code"] == "untrusted_return_url"


# --- a top-up credits once ----------------------------------------------------------------------------------


def _signed_variant(body: bytes, **changes: Any) -> bytes:
    """The event, re-issued under a new event id with its payment object changed (a correctly signed event
    the processor never sent this way: what an attacker with a leaked signing secret, or a replaying
    processor, delivers)."""
    event = orjson.loads(body)
    event["id"] = new_id("evt")
    event["data"]["object"].update(changes)
    return orjson.dumps(event)


async def test_a_replayed_payment_event_with_a_new_payment_id_credits_nothing(app: Any, core: Core) -> None:
    owner, body = await paid_topup_event(app, core)
    secret = sandbox(core).webhook_secret
    async with new_client(app) as client:
        assert (await post_event(client, body, secret)).status_code == 200
        assert await available(owner) == 700
        for _ in range(3):
            replay = _signed_variant(body, id=new_id("pi"))
            assert (await post_event(client, replay, secret)).status_code == 200
    await deliver_payments(app, core)  # the checkout's own completion event too
    assert await available(owner) == 700 and await topup_transactions(core, owner.user_id) == 1


async def test_a_payment_naming_another_owners_top_up_credits_nothing(app: Any, core: Core) -> None:
    victim = await new_owner(app, core)
    pending = await start_topup(victim, 5000)  # started, never paid
    attacker, body = await paid_topup_event(app, core)  # the attacker's own paid top-up of 700
    secret = sandbox(core).webhook_secret
    forged = _signed_variant(
        body,
        id=new_id("pi"),
        metadata={"purpose": "topup", "topupId": pending["topupId"], "userId": attacker.user_id},
    )
    async with new_client(app) as client:
        assert (await post_event(client, forged, secret)).status_code == 200
    assert await available(victim) == 0 and await topup_transactions(core, victim.user_id) == 0
    assert (await topup_row(core, pending["topupId"])).status == "PENDING"
    # The victim's own payment still credits the top-up (once).
    assert (await submit_page(app, pending["url"])).status_code == 303
    await deliver_payments(app, core)
    assert await available(victim) == 5000


async def test_twenty_submissions_of_one_checkout_page_at_once_credit_once(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    started = await start_topup(owner, 1000)
    path = started["url"].removeprefix(BASE_URL)
    async with browser(app) as page:
        assert (await page.get(path)).status_code == 200
        answers = await asyncio.gather(*(page.post(path, data={"card_number": CARD_OK}) for _ in range(20)))
    codes = sorted(r.status_code for r in answers)
    assert codes.count(303) == 1, codes
    assert all(c < 500 for c in codes), codes
    await deliver_payments(app, core)
    assert await available(owner) == 1000 and await topup_transactions(core, owner.user_id) == 1


async def test_a_webhook_signed_in_the_future_is_refused(app: Any, core: Core) -> None:
    owner, body = await paid_topup_event(app, core)
    secret = sandbox(core).webhook_secret
    async with new_client(app) as client:
        ahead = await client.post(
            "/webhooks/processor",
            content=body,
            headers={
                "Content-Type": "application/json",
                webhooks.SIGNATURE_HEADER: webhooks.sign(body, secret, int(time.time()) + 3600),
            },
        )
        assert ahead.status_code == 400 and ahead.json()["code"] == "invalid_signature", ahead.text
        assert await available(owner) == 0
        assert (await post_event(client, body, secret)).status_code == 200
    assert await available(owner) == 700


# --- browser origins ------------------------------------------------------------------------------------------


async def test_origin_null_is_refused_even_with_a_trusted_referer(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    headers = {"Origin": "null", "Referer": BASE_URL + "/page"}
    r = await owner.client.post("/api/v2/owner/agent-enroll-tokens", headers=headers)
    assert r.status_code == 403 and r.json()["code"] == "untrusted_origin", r.text
    async with new_client(app) as browser_without_origin:
        browser_without_origin.cookies = owner.client.cookies
        ok = await browser_without_origin.post(
            "/api/v2/owner/agent-enroll-tokens", headers={"Referer": BASE_URL + "/page"}
        )
    assert ok.status_code == 201, ok.text  # no Origin at all: the trusted Referer decides


# --- names and amounts -----------------------------------------------------------------------------------------


async def test_reserved_handles_are_refused_whatever_their_disguise(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    for handle in (
        "admin",
        "adm1n",
        "r00t",
        "null",
        "support",
        "callboard",
        "call-b0ard-help",
        "the-callboard",
    ):
        r = await client.post(
            "/api/v2/agents/register",
            json={"name": "x", "endpointUrl": "https://x.example.com/h", "handle": handle},
        )
        assert r.status_code == 422 and r.json()["errors"][0]["code"] == "handle_reserved", (handle, r.text)
        r = await owner.client.put(f"/agents/dashboard/{agent.id}", json={"handle": handle})
        assert r.status_code == 422 and r.json()["errors"][0]["code"] == "handle_reserved", (handle, r.text)
    # A name that would slug to a reserved word gets a handle that is not.
    named = await register_agent(client, name="Admin")
    assert named["agent"]["handle"] != "admin" and named["agent"]["handle"].startswith("agent-admin-")
    assert (await register_agent(client, handle="admiral"))["agent"]["handle"] == "admiral"


async def test_a_paid_job_below_the_minimum_reward_is_not_published(app: Any, core: Core) -> None:
    b = await buyer(app, core)
    async with new_client(app) as client:
        for reward in (1, 4, 99):
            job_id = await draft(client, b, reward)
            r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
            assert r.status_code == 422 and r.json()["errors"][0]["code"] == "reward_below_minimum", r.text
        job_id = await draft(client, b, 100)
        assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    available, reserved, _ = await money(core, b.owner.user_id)
    assert (available, reserved) == (10_000 - 110, 110)  # pay 100 and its fee 10, nothing for the refused


async def test_applying_to_a_job_out_of_admission_reads_as_missing_to_an_outsider(
    app: Any, core: Core
) -> None:
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    outsider = await new_agent(await new_owner(app, core))
    async with new_client(app) as client:
        job = await create_published(requester, client)
        await to_review(client, job["id"], requester, worker)  # admission is over
        read = await client.get(f"/api/v2/jobs/{job['id']}", headers=outsider.h)
        applied = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=outsider.h)
        assert read.status_code == applied.status_code == 404
        assert applied.json()["code"] == "job_not_found"
        # The worker taking part still gets the truth.
        again = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=worker.h)
        assert again.status_code == 409 and again.json()["code"] == "already_applied"


# --- who the client is ----------------------------------------------------------------------------------------


def _from_many_addresses(url: str) -> list[int]:
    """Five public reads from this machine, each claiming another address in X-Forwarded-For."""
    with httpx.Client(base_url=url) as c:
        return [
            c.get("/api/v2/job-types", headers={"X-Forwarded-For": f"203.0.113.{n}"}).status_code
            for n in range(1, 6)
        ]


@pytest.mark.slow
async def test_x_forwarded_for_is_believed_only_from_trusted_proxies(core: Core, tmp_path: Path) -> None:
    limits = {"CALLBOARD_RATE_LIMIT_ENABLED": "true", "CALLBOARD_RATE_LIMIT_PUBLIC_READ": "2/minute"}
    server = spawn(core.settings, tmp_path / "direct.log", loop=False, env=limits)
    try:
        await wait_ready(server)
        # By default no proxy is trusted: one client, however many addresses it claims.
        assert _from_many_addresses(server.url) == [200, 200, 429, 429, 429]
    finally:
        server.stop()
    proxied = spawn(
        core.settings,
        tmp_path / "proxy.log",
        loop=False,
        env={**limits, "CALLBOARD_TRUSTED_PROXIES": "127.0.0.1"},
    )
    try:
        await wait_ready(proxied)
        assert _from_many_addresses(proxied.url) == [200] * 5  # the proxy's word names five clients
    finally:
        proxied.stop()


# --- a lost database ----------------------------------------------------------------------------------------


@pytest.fixture
async def fresh_pool_after(core: Core) -> AsyncIterator[None]:
    """The test drops connections: the pool starts afresh after it (the fixtures' wipe needs live ones)."""
    yield
    await core.db.dispose()


async def _drop_connections(database_url: str) -> int:
    """Terminate every server connection to the test's database (as a failover or a restart would)."""
    import asyncpg

    name = database_url.rsplit("/", 1)[1]
    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
    finally:
        await conn.close()
    return len(rows)


async def test_dropped_database_connections_answer_503_with_retry_after(
    app: Any, core: Core, client: httpx.AsyncClient, database_url: str, fresh_pool_after: None
) -> None:
    if core.db.is_sqlite:
        pytest.skip("connections to drop are PostgreSQL's")
    reg = await register_agent(client)
    headers = key_headers(reg["apiKey"])
    beat = {"runtimeId": "r1", "roleMode": "WORKER"}
    for _ in range(3):  # warm the pools (reads and writes)
        assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
        assert (
            await client.post("/api/v2/agents/me/heartbeat", json=beat, headers=headers)
        ).status_code < 300
    assert await _drop_connections(database_url) > 0

    answers = [await client.post("/api/v2/agents/me/heartbeat", json=beat, headers=headers) for _ in range(4)]
    answers += [await client.get("/api/v2/agents/me", headers=headers) for _ in range(4)]
    statuses = [r.status_code for r in answers]
    assert 500 not in statuses and 503 in statuses, statuses
    for r in answers:
        if r.status_code == 503:
            assert r.json()["code"] == "database_unavailable" and r.headers["retry-after"] == "2", r.text
    assert statuses[-1] == 200  # the pool replaced its dead connections

    # Over streamable HTTP the key gate answers the same 503 before the MCP server sees the request.
    async with serving(core) as url:
        async with http_client(url, reg["apiKey"]) as mcp:
            await call(mcp, "home")
        await _drop_connections(database_url)
        async with httpx.AsyncClient(base_url=url) as raw:
            gated = [
                await raw.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
                for _ in range(3)
            ]
        assert any(r.status_code == 503 for r in gated), [r.status_code for r in gated]
        for r in gated:
            assert r.status_code != 500, r.text
            if r.status_code == 503:
                assert r.json()["code"] == "database_unavailable" and r.headers["retry-after"] == "2"


@pytest.mark.slow
async def test_a_dropped_database_is_a_retryable_tool_error_over_mcp(
    app: Any, core: Core, database_url: str, fresh_pool_after: None
) -> None:
    """`callboard mcp` (stdio) on the database: a tool whose connection was dropped answers the same body."""
    if core.db.is_sqlite:
        pytest.skip("connections to drop are PostgreSQL's")
    worker = await new_agent(await new_owner(app, core))
    env = on_database_env(core, worker.key)
    async with stdio_client(env) as mcp:
        for _ in range(3):
            assert (await call(mcp, "home"))["agentId"] == worker.id
        await _drop_connections(database_url)
        outcomes = []
        for _ in range(4):
            result = await mcp.call_tool("home", {})
            outcomes.append(json.loads(result.content[0].text)["code"] if result.is_error else "ok")
        assert "database_unavailable" in outcomes and outcomes[-1] == "ok", outcomes
