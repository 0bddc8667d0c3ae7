"""The owner's buyer balance and billing settings over HTTP and MCP, on SQLite and PostgreSQL: the balance read
from the ledger, spend caps, auto top-up, the statement, and who may see whose. After every test the books
must verify clean."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from callboard_core.billing import service as billing
from callboard_core.billing.models import MAX_SETTING_CENTS, BuyerProfile
from callboard_core.container import Core
from callboard_core.ids import new_id
from callboard_core.ledger import service as ledger
from tests.conftest import BASE_URL, key_headers, new_client, register_agent
from tests.jobs_helpers import Owner, new_agent, new_owner
from tests.mcp_helpers import call, call_error, http_client, serving

NULLS = (
    "processorCustomerId",
    "processorDefaultPaymentMethodId",
    "autoTopupThresholdCents",
    "autoTopupAmountCents",
    "dailySpendCapCents",
    "perTaskCapCents",
)


pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


async def fund(core: Core, user_id: str, *, top_up: int = 5000, reserve: int = 1200) -> str:
    """Ledger postings through the ledger's own service, in one unit of work: a top-up, then a reserve for a
    job. Returns the job id."""
    job_id = new_id("job")
    async with core.uow() as uow:
        await ledger.top_up(uow.session, user_id=user_id, amount_cents=top_up, processor_ref=new_id("cs"))
        await ledger.reserve(uow.session, user_id=user_id, amount_cents=reserve, job_id=job_id)
    return job_id


def assert_funded(body: dict[str, Any], user_id: str) -> None:
    assert body["userId"] == user_id
    assert (body["balanceCents"], body["reservedCents"], body["availableCents"]) == (5000, 1200, 3800)
    assert body["currency"] == "usd"


async def profiles(core: Core, user_id: str) -> int:
    async with core.uow(write=False) as uow:
        count = await uow.session.scalar(
            select(func.count()).select_from(BuyerProfile).where(BuyerProfile.user_id == user_id)
        )
    return int(count or 0)


# --- the balance ----------------------------------------------------------------------------------------


async def test_a_new_owner_sees_a_zero_balance_and_null_settings(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    assert await profiles(core, owner.user_id) == 0
    r = await owner.client.get("/me/billing")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("bpf_") and body["userId"] == owner.user_id
    assert (body["balanceCents"], body["reservedCents"], body["availableCents"]) == (0, 0, 0)
    assert body["currency"] == "usd" and body["autoTopupEnabled"] is False
    assert all(name in body and body[name] is None for name in NULLS)
    assert body["paymentMethods"] == [] and body.get("autoTopupDisabledReason") is None
    # A read writes nothing; later reads show the same id.
    assert await profiles(core, owner.user_id) == 0
    again = await owner.client.get("/me/billing")
    assert again.json()["id"] == body["id"]


async def test_reads_write_nothing_and_the_first_write_keeps_the_id_they_showed(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    answers = await asyncio.gather(*(owner.client.get("/me/billing") for _ in range(6)))
    assert {r.status_code for r in answers} == {200}
    assert len({r.json()["id"] for r in answers}) == 1
    assert await profiles(core, owner.user_id) == 0
    (shown,) = {r.json()["id"] for r in answers}
    written = await owner.client.patch("/me/billing/limits", json={"perTaskCapCents": 500})
    assert written.status_code == 200, written.text
    assert written.json()["id"] == shown and await profiles(core, owner.user_id) == 1
    assert (await owner.client.get("/me/billing")).json()["id"] == shown


async def test_ensure_is_race_safe_across_units_of_work(core: Core, app: Any) -> None:
    owner = await new_owner(app, core)

    async def one() -> str:
        async with core.uow() as uow:
            return (await billing.ensure(uow.session, owner.user_id)).id

    ids = await asyncio.gather(*(one() for _ in range(5)))
    assert len(set(ids)) == 1
    assert await profiles(core, owner.user_id) == 1


async def test_the_balance_comes_from_the_ledger_over_session_key_and_mcp(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    await fund(core, owner.user_id)

    mine = await owner.client.get("/me/billing")
    assert mine.status_code == 200, mine.text
    assert_funded(mine.json(), owner.user_id)

    async with new_client(app) as c:
        by_key = await c.get("/me/billing/api-key", headers=agent.h)
    assert by_key.status_code == 200, by_key.text
    assert by_key.json() == mine.json()

    async with serving(core) as url, http_client(url, agent.key) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert "billing_balance" in tools and tools["billing_balance"].output_schema is not None
        assert "owner" in (tools["billing_balance"].description or "")
        assert await call(mcp, "billing_balance") == mine.json()


async def test_a_read_only_key_and_an_owner_level_key_read_the_owners_balance(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    await fund(core, owner.user_id)
    read_only = await owner.client.post(
        "/api-keys/dashboard", json={"agentId": agent.id, "scopes": ["read"], "label": "ro"}
    )
    assert read_only.status_code == 201, read_only.text
    owner_level = await owner.client.post("/api-keys/dashboard", json={"label": "ops"})
    assert owner_level.status_code == 201, owner_level.text
    async with new_client(app) as c:
        for key in (read_only.json()["key"], owner_level.json()["key"]):
            r = await c.get("/me/billing/api-key", headers=key_headers(key))
            assert r.status_code == 200, r.text
            assert_funded(r.json(), owner.user_id)


# --- limits ---------------------------------------------------------------------------------------------


async def test_limits_set_clear_keep_and_refuse(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    c = owner.client

    r = await c.patch("/me/billing/limits", json={"perTaskCapCents": 500, "dailySpendCapCents": 2000})
    assert r.status_code == 200, r.text
    assert (r.json()["perTaskCapCents"], r.json()["dailySpendCapCents"]) == (500, 2000)

    # Omitted: unchanged.
    r = await c.patch("/me/billing/limits", json={"perTaskCapCents": 700})
    assert (r.json()["perTaskCapCents"], r.json()["dailySpendCapCents"]) == (700, 2000)
    r = await c.patch("/me/billing/limits", json={})
    assert (r.json()["perTaskCapCents"], r.json()["dailySpendCapCents"]) == (700, 2000)

    # Null clears; with no daily cap any per-task cap goes.
    r = await c.patch("/me/billing/limits", json={"dailySpendCapCents": None})
    assert r.status_code == 200, r.text
    assert (r.json()["perTaskCapCents"], r.json()["dailySpendCapCents"]) == (700, None)
    r = await c.patch("/me/billing/limits", json={"perTaskCapCents": 9000})
    assert r.status_code == 200 and r.json()["perTaskCapCents"] == 9000

    # Per-task above daily: refused naming both, whether the daily cap is sent or already set.
    for body in ({"dailySpendCapCents": 100}, {"perTaskCapCents": 300, "dailySpendCapCents": 200}):
        refused = await c.patch("/me/billing/limits", json=body)
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["code"] == "validation_failed"
        assert {e["field"] for e in problem["errors"]} == {"perTaskCapCents", "dailySpendCapCents"}
        assert "perTaskCapCents" in problem["message"] and "dailySpendCapCents" in problem["message"]
    # Equal caps are fine.
    r = await c.patch("/me/billing/limits", json={"perTaskCapCents": 250, "dailySpendCapCents": 250})
    assert (r.json()["perTaskCapCents"], r.json()["dailySpendCapCents"]) == (250, 250)

    # Negative, fractional, textual, boolean, above the ceiling: 422 on the field, nothing changes.
    for bad in (-1, 1.5, "100", True, MAX_SETTING_CENTS + 1):
        refused = await c.patch("/me/billing/limits", json={"perTaskCapCents": bad})
        assert refused.status_code == 422, (bad, refused.text)
        assert "perTaskCapCents" in {e["field"] for e in refused.json()["errors"]}
    current = (await c.get("/me/billing")).json()
    assert (current["perTaskCapCents"], current["dailySpendCapCents"]) == (250, 250)

    # Both cleared.
    r = await c.patch("/me/billing/limits", json={"perTaskCapCents": None, "dailySpendCapCents": None})
    assert (r.json()["perTaskCapCents"], r.json()["dailySpendCapCents"]) == (None, None)


async def test_the_first_write_creates_the_profile(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    r = await owner.client.patch("/me/billing/limits", json={"dailySpendCapCents": 10_000})
    assert r.status_code == 200, r.text
    assert await profiles(core, owner.user_id) == 1
    assert (await owner.client.get("/me/billing")).json()["id"] == r.json()["id"]


# --- auto top-up ----------------------------------------------------------------------------------------


async def test_enabling_auto_topup_needs_a_default_card(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    c = owner.client
    refused = await c.patch(
        "/me/billing/autotopup", json={"enabled": True, "thresholdCents": 1000, "amountCents": 5000}
    )
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["code"] == "default_payment_method_required"
    # The fix is a step the front end renders (here the route; over MCP what to ask the owner), and the
    # message itself names no route.
    assert (
        problem["nextAction"]["method"] == "POST"
        and problem["nextAction"]["path"] == "/me/billing/payment-methods"
    )
    assert "/me/billing" not in problem["message"]
    after = (await c.get("/me/billing")).json()
    assert after["autoTopupEnabled"] is False and after["autoTopupThresholdCents"] is None

    # Enabling without a threshold or an amount is a 422 naming what is missing (before the card check).
    missing = await c.patch("/me/billing/autotopup", json={"enabled": True, "thresholdCents": 1000})
    assert missing.status_code == 422, missing.text
    assert [e["field"] for e in missing.json()["errors"]] == ["amountCents"]

    # Below the minimum amount, a negative threshold, no `enabled`: 422.
    for body in (
        {"enabled": False, "amountCents": 99},
        {"enabled": False, "thresholdCents": -1},
        {"thresholdCents": 1000},
        {"enabled": "yes"},
    ):
        bad = await c.patch("/me/billing/autotopup", json=body)
        assert bad.status_code == 422, (body, bad.text)


async def test_disabling_auto_topup_always_works_and_clears_the_reason(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    c = owner.client
    # As the processor step will leave it: a card, auto top-up on, then switched off by the platform.
    async with core.uow() as uow:
        profile = await billing.ensure(uow.session, owner.user_id)
        profile.processor_default_payment_method_id = "pm_test"
        profile.autotopup_threshold_cents = 1000
        profile.autotopup_amount_cents = 2500
        profile.autotopup_enabled = False
        profile.autotopup_disabled_reason = "The card was declined."
    before = (await c.get("/me/billing")).json()
    assert before["autoTopupDisabledReason"] == "The card was declined."

    r = await c.patch("/me/billing/autotopup", json={"enabled": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["autoTopupEnabled"] is False and body["autoTopupDisabledReason"] is None
    assert (body["autoTopupThresholdCents"], body["autoTopupAmountCents"]) == (1000, 2500)  # kept

    # With a default card, enabling works (values from the profile), and disabling again too.
    on = await c.patch("/me/billing/autotopup", json={"enabled": True, "amountCents": 3000})
    assert on.status_code == 200, on.text
    assert on.json()["autoTopupEnabled"] is True and on.json()["autoTopupAmountCents"] == 3000
    off = await c.patch("/me/billing/autotopup", json={"enabled": False, "thresholdCents": None})
    assert off.status_code == 200, off.text
    assert off.json()["autoTopupEnabled"] is False and off.json()["autoTopupThresholdCents"] is None


# --- the statement --------------------------------------------------------------------------------------


async def test_the_statement_pages_newest_first_with_the_profile(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    job_id = await fund(core, owner.user_id)
    async with core.uow() as uow:
        await ledger.release(uow.session, user_id=owner.user_id, amount_cents=200, job_id=job_id)

    whole = await owner.client.get("/me/billing/statement")
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert body["profile"]["userId"] == owner.user_id
    assert (body["profile"]["balanceCents"], body["profile"]["availableCents"]) == (5000, 4000)
    entries = body["entries"]
    # top-up (1 owner entry), reserve (2), release (2): five entries on the owner's accounts.
    assert len(entries) == 5 and body["nextCursor"] is None
    keys = [(e["createdAt"], e["id"]) for e in entries]
    assert keys == sorted(keys, reverse=True)
    assert entries[-1]["kind"] == "TOPUP" and entries[-1]["amountCents"] == 5000
    assert {e["kind"] for e in entries[:2]} == {"RELEASE"}
    for entry in entries:
        assert set(entry) >= {
            "id",
            "kind",
            "amountCents",
            "taskContractId",
            "transactionId",
            "processorRef",
            "metadata",
            "createdAt",
        }

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = await owner.client.get("/me/billing/statement", params=params)
        assert page.status_code == 200, page.text
        assert page.json()["profile"]["id"] == body["profile"]["id"]
        seen += [e["id"] for e in page.json()["entries"]]
        pages += 1
        cursor = page.json()["nextCursor"]
        if cursor is None:
            break
    assert seen == [e["id"] for e in entries] and pages == 3

    for params in ({"cursor": "not-a-cursor"}, {"limit": 0}, {"limit": 101}):
        bad = await owner.client.get("/me/billing/statement", params=params)
        assert bad.status_code == 422, (params, bad.text)


# --- who sees whose -------------------------------------------------------------------------------------


async def test_owners_never_see_each_others_numbers(app: Any, core: Core) -> None:
    a = await new_owner(app, core)
    a_agent = await new_agent(a)
    b: Owner = await new_owner(app, core)
    b_agent = await new_agent(b)
    await fund(core, a.user_id)
    await a.client.patch("/me/billing/limits", json={"dailySpendCapCents": 777})

    mine = (await b.client.get("/me/billing")).json()
    assert mine["userId"] == b.user_id
    assert (mine["balanceCents"], mine["reservedCents"], mine["availableCents"]) == (0, 0, 0)
    assert mine["dailySpendCapCents"] is None
    assert (await b.client.get("/me/billing/statement")).json()["entries"] == []
    async with new_client(app) as c:
        by_key = (await c.get("/me/billing/api-key", headers=b_agent.h)).json()
        assert by_key["userId"] == b.user_id and by_key["balanceCents"] == 0
        assert (await c.get("/me/billing/api-key", headers=a_agent.h)).json()["balanceCents"] == 5000
    # B's settings changes touch B's profile only.
    await b.client.patch("/me/billing/limits", json={"dailySpendCapCents": 5})
    assert (await a.client.get("/me/billing")).json()["dailySpendCapCents"] == 777
    # The "me" routes take no owner id: a query naming A is refused, not followed.
    named = await b.client.get("/me/billing/statement", params={"userId": a.user_id})
    assert named.status_code == 422


async def test_an_unclaimed_agents_key_is_refused_with_agent_not_claimed(app: Any, core: Core) -> None:
    async with new_client(app) as c:
        provisional = await register_agent(c)
        key = provisional["apiKey"]
        r = await c.get("/me/billing/api-key", headers=key_headers(key))
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "agent_not_claimed" and "claim" in r.json()["message"]
    async with serving(core) as url, http_client(url, key) as mcp:
        error = await call_error(mcp, "billing_balance")
        assert error["code"] == "agent_not_claimed"


async def test_no_credential_is_401_and_the_wrong_kind_is_refused(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as c:
        for method, path, body in (
            ("GET", "/me/billing", None),
            ("GET", "/me/billing/api-key", None),
            ("GET", "/me/billing/statement", None),
            ("PATCH", "/me/billing/limits", {}),
            ("PATCH", "/me/billing/autotopup", {"enabled": False}),
        ):
            r = await c.request(method, path, json=body, headers={"Origin": BASE_URL})
            assert r.status_code == 401, (path, r.text)
        # An agent's key on a session route, a session on the key route: 401.
        assert (await c.get("/me/billing", headers=agent.h)).status_code == 401
    assert (await owner.client.get("/me/billing/api-key")).status_code == 401
    # MCP without a key never reaches a tool: the key gate answers 401 (tests/test_mcp.py).
