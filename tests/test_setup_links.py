"""Setup links over HTTP and MCP with the sandbox processor, on SQLite and PostgreSQL: an agent asks for one,
its owner previews and starts it (a fresh hosted flow each time), the processor's events complete it, the
agent polls its status."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest

from callboard_core import clock
from callboard_core.billing import service as billing
from callboard_core.container import Core
from callboard_core.errors import Forbidden
from callboard_core.principals import Actor
from callboard_core.processor.sandbox import CARD_OK
from callboard_core.setup_links import service as setup_links
from callboard_core.setup_links.schemas import SetupLinkCreate
from tests.conftest import new_client, register_agent
from tests.jobs_helpers import AgentHandle, new_agent, new_owner
from tests.mcp_helpers import call, call_error, http_client, serving
from tests.payout_helpers import deliver, onboard_through_page, sandbox, sandbox_count

pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


async def create(app: Any, agent: AgentHandle, kind: str) -> dict[str, Any]:
    async with new_client(app) as c:
        r = await c.post("/api/v2/agents/me/setup-links", json={"kind": kind}, headers=agent.h)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def poll(app: Any, agent: AgentHandle, link_id: str) -> dict[str, Any]:
    async with new_client(app) as c:
        r = await c.get(f"/api/v2/agents/me/setup-links/{link_id}", headers=agent.h)
    assert r.status_code == 200, r.text
    return dict(r.json())


def code_of(link: dict[str, Any]) -> str:
    return str(link["url"]).rsplit("/", 1)[1]


async def test_a_payout_link_from_creation_to_completed(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    link = await create(app, agent, "PAYOUT")
    assert link["id"].startswith("stl_") and link["kind"] == "PAYOUT" and link["status"] == "PENDING"
    assert link["url"].startswith("http://testserver/setup/") and link["expiresAt"]
    code = code_of(link)
    assert len(code) >= 32

    # The public preview: what the page needs, nothing private.
    async with new_client(app) as anyone:
        preview = await anyone.get(f"/api/v2/setup-links/{code}")
        assert preview.status_code == 200, preview.text
        assert (await anyone.get("/api/v2/setup-links/not-a-real-code")).status_code == 404
    body = preview.json()
    assert set(body) == {"kind", "status", "agent", "expiresAt"} and set(body["agent"]) == {"handle", "name"}
    assert body["kind"] == "PAYOUT" and body["status"] == "PENDING"
    for secret in (owner.user_id, agent.id, link["id"], "@example.com"):
        assert secret not in preview.text

    # The agent polls: the URL is not shown again.
    polled = await poll(app, agent, link["id"])
    assert polled["status"] == "PENDING" and polled["url"] is None

    # Another owner cannot start it (404); its own owner can, as many times as needed.
    stranger = await new_owner(app, core)
    assert (await stranger.client.post(f"/api/v2/setup-links/{code}/start")).status_code == 404
    started = await owner.client.post(f"/api/v2/setup-links/{code}/start")
    assert started.status_code == 200, started.text
    again = await owner.client.post(f"/api/v2/setup-links/{code}/start")
    assert again.status_code == 200, again.text
    assert (await poll(app, agent, link["id"]))["status"] == "STARTED"
    # PAYOUT onboards the owner's own payout account.
    account_id = (await owner.client.get("/me/processor/status")).json()["processorAccountId"]
    assert account_id and "/sandbox/processor/onboarding/" in started.json()["url"]
    page = await owner.client.get(urlsplit(started.json()["url"]).path)
    assert page.status_code == 200 and account_id in page.text  # the hosted page is that account's
    assert await sandbox_count(core, "account") == 1

    await onboard_through_page(owner.client, started.json()["url"])
    assert (await poll(app, agent, link["id"]))["status"] == "STARTED"  # until the processor's word arrives
    await deliver(core)
    done = await poll(app, agent, link["id"])
    assert done["status"] == "COMPLETED" and done["completedAt"]
    assert (await owner.client.get("/me/processor/status")).json()["processorPayoutsEnabled"] is True
    refused = await owner.client.post(f"/api/v2/setup-links/{code}/start")
    assert refused.status_code == 409 and refused.json()["code"] == "setup_link_completed"


async def test_a_card_link_gives_a_fresh_flow_each_start_and_completes(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    link = await create(app, agent, "CARD")
    code = code_of(link)
    first = await owner.client.post(f"/api/v2/setup-links/{code}/start")
    second = await owner.client.post(f"/api/v2/setup-links/{code}/start")
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["url"] != second.json()["url"]
    # One processor customer for the owner, kept on the buyer profile.
    assert await sandbox_count(core, "customer") == 1
    async with core.uow(write=False) as uow:
        profile = await billing.find(uow.session, owner.user_id)
    assert profile is not None and profile.processor_customer_id

    # The owner completes the FIRST form: the link is complete all the same.
    setup_id = first.json()["url"].rsplit("/", 1)[1]
    assert (await sandbox(core).complete_card_setup(setup_id, CARD_OK)).status == "complete"
    assert (await poll(app, agent, link["id"]))["status"] == "STARTED"
    types = {e.type for e in await deliver(core)}
    assert {"setup_intent.succeeded", "checkout.session.completed"} <= types
    assert (await poll(app, agent, link["id"]))["status"] == "COMPLETED"

    # Another card link of the same owner is not completed by that card.
    other = await create(app, agent, "CARD")
    assert (await poll(app, agent, other["id"]))["status"] == "PENDING"


async def test_links_are_the_agents_own_and_expire(
    app: Any, core: Core, frozen_clock: clock.FrozenClock
) -> None:
    owner = await new_owner(app, core)
    agent, sibling = await new_agent(owner), await new_agent(owner)
    link = await create(app, agent, "PAYOUT")
    async with new_client(app) as c:
        r = await c.get(f"/api/v2/agents/me/setup-links/{link['id']}", headers=sibling.h)
        assert r.status_code == 404 and r.json()["code"] == "setup_link_not_found"
        bad = await c.post("/api/v2/agents/me/setup-links", json={"kind": "BANK"}, headers=agent.h)
        assert bad.status_code == 422

    frozen_clock.advance(seconds=(timedelta(days=7) + timedelta(seconds=1)).total_seconds())
    assert (await poll(app, agent, link["id"]))["status"] == "EXPIRED"
    async with new_client(app) as anyone:
        assert (await anyone.get(f"/api/v2/setup-links/{code_of(link)}")).json()["status"] == "EXPIRED"
    gone = await owner.client.post(f"/api/v2/setup-links/{code_of(link)}/start")
    assert gone.status_code == 410 and gone.json()["code"] == "setup_link_expired"


async def test_an_unclaimed_agent_gets_agent_not_claimed(app: Any, core: Core, client: Any) -> None:
    provisional = await register_agent(client)
    # Its key is read-only, so the HTTP route refuses it for scope first; the rule itself:
    async with core.uow() as uow:
        with pytest.raises(Forbidden) as refused:
            await setup_links.create(
                uow.session,
                core.settings,
                Actor.agent(provisional["agent"]["id"]),
                SetupLinkCreate.model_validate({"kind": "CARD"}),
            )
    assert refused.value.code == "agent_not_claimed" and "claim" in refused.value.message
    r = await client.post(
        "/api/v2/agents/me/setup-links", json={"kind": "CARD"}, headers={"X-API-Key": provisional["apiKey"]}
    )
    assert r.status_code == 403


async def test_mcp_setup_link_create_and_status(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    other = await new_agent(owner)
    async with serving(core) as url:
        async with http_client(url, agent.key) as mcp:
            made = await call(mcp, "setup_link_create", kind="PAYOUT")
            assert made["status"] == "PENDING" and made["url"]
            await owner.client.post(f"/api/v2/setup-links/{code_of(made)}/start")
            status = await call(mcp, "setup_link_status", link_id=made["id"])
            assert status["status"] == "STARTED" and status["url"] is None
        async with http_client(url, other.key) as mcp:
            error = await call_error(mcp, "setup_link_status", link_id=made["id"])
            assert error["code"] == "setup_link_not_found"


async def test_the_setup_page_previews_and_starts_for_the_owner(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    link = await create(app, agent, "PAYOUT")
    path = "/setup/" + code_of(link)
    async with new_client(app) as anyone:
        page = await anyone.get(path)
        assert page.status_code == 200 and "Sign in" in page.text and "<form" not in page.text
        signed_out = await anyone.post(path, headers={"Origin": "http://testserver"})
        assert signed_out.status_code == 303 and signed_out.headers["location"].startswith("/login")
    mine = await owner.client.get(path)
    assert mine.status_code == 200 and "<form" in mine.text
    stranger = await new_owner(app, core)
    refused = await stranger.client.post(path)
    assert refused.status_code == 404 and "No such setup link" in refused.text
    went = await owner.client.post(path)
    assert went.status_code == 303, went.text
    assert "/sandbox/processor/onboarding/" in went.headers["location"]
    assert (await poll(app, agent, link["id"]))["status"] == "STARTED"
