"""The console's read-only surfaces through the real app on SQLite and PostgreSQL: the overview and the
moderation queue for every staff role, and the financial surfaces (analytics, audit log, payments,
transactions) for ADMIN only, with figures that match the ledger."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from callboard_core.container import Core
from callboard_core.security.permissions import Role
from tests.conftest import owner_client
from tests.jobs_helpers import new_agent, new_owner
from tests.payments_helpers import buyer, draft, fund

pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test

FINANCIAL = ("/admin/analytics", "/admin/audit-log", "/admin/payments", "/admin/transactions")


async def test_support_sees_the_overview_and_queue_but_no_money(app: Any, core: Core, client: Any) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    await client.post("/api/bridge/report_bug", json={"summary": "The list is empty"})
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with support, admin:
        await admin.patch(f"/admin/agents/{agent.id}/status", json={"status": "SUSPENDED", "reason": "x"})
        overview = (await support.get("/admin/overview")).json()
        assert overview["agents"].get("SUSPENDED", 0) >= 1 and overview["bugReports"].get("PENDING", 0) >= 1
        assert overview["users"]["ACTIVE"] >= 3
        queue = (await support.get("/admin/moderation")).json()["items"]
        kinds = {(i["kind"], i["id"]) for i in queue}
        assert ("SUSPENDED_AGENT", agent.id) in kinds and any(k == "BUG_REPORT" for k, _ in kinds)
        assert [i["createdAt"] for i in queue] == sorted(i["createdAt"] for i in queue)
        for path in FINANCIAL:
            refused = await support.get(path)
            assert refused.status_code == 403, path
            assert (await admin.get(path)).status_code == 200, path


async def test_money_surfaces_match_the_ledger(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core)
    job_id = await draft(client, b, 1000)
    published = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert published.status_code == 200, published.text
    other = await new_owner(app, core)
    await fund(core, other.user_id, 2500)
    admin, admin_id = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        payments = (await admin.get("/admin/payments", params={"query": job_id})).json()["payments"]
        assert [(p["jobId"], p["status"], p["payCents"]) for p in payments] == [(job_id, "RESERVED", 1000)]
        held = (
            await admin.get("/admin/transactions", params={"escrowStatus": "HELD", "query": job_id})
        ).json()
        [reserve] = held["transactions"]
        assert reserve["kind"] == "RESERVE" and reserve["amountCents"] == 1000 + payments[0]["feeCents"]
        cards = await admin.get(
            "/admin/transactions", params={"paymentMethod": "CARD", "query": other.user_id}
        )
        [topup] = cards.json()["transactions"]
        assert topup["kind"] == "TOPUP" and topup["amountCents"] == 2500
        detail = (await admin.get(f"/admin/transactions/{topup['id']}")).json()
        assert sum(e["amountCents"] for e in detail["entries"]) == 0
        owner_leg = next(e for e in detail["entries"] if e["holderId"] == other.user_id)
        assert owner_leg["accountKind"] == "OWNER_AVAILABLE" and owner_leg["balanceAfterCents"] == 2500
        missing = await admin.get("/admin/transactions/ltx_nope")
        assert missing.status_code == 404 and missing.json()["code"] == "transaction_not_found"
        analytics = (await admin.get("/admin/analytics", params={"days": 7})).json()
        assert analytics["money"]["TOPUP"] >= 2500 and analytics["money"]["RESERVE"] >= 1000
        assert analytics["newUsers"] >= 2 and analytics["jobsPublished"] >= 1
        assert (await admin.get("/admin/analytics", params={"days": 0})).status_code == 422
        # The audit log shows a staff action, filterable by action and by actor.
        await admin.patch(f"/admin/users/{other.user_id}/status", json={"status": "SUSPENDED"})
        log = await admin.get("/admin/audit-log", params={"action": "user.status_changed", "query": admin_id})
        [entry] = log.json()["entries"]
        assert entry["targetId"] == other.user_id and entry["data"]["after"] == "SUSPENDED"


async def test_balance_adjustments_credit_debit_once_and_never_below_zero(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await fund(core, owner.user_id, 1000)
    profile = (await owner.client.get("/me/billing")).json()["id"]
    path = f"/admin/payments/buyer-profiles/{profile}/adjustments"
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with support, admin:
        refused = await support.post(path, json={"amountCents": 500, "reason": "goodwill"})
        assert refused.status_code == 403 and refused.json()["code"] == "insufficient_role"
        credit = {"amountCents": 500, "reason": "goodwill after an outage", "idempotencyKey": "outage-1"}
        first = await admin.post(path, json=credit)
        assert first.status_code == 201, first.text
        body = first.json()
        assert body["balance"]["availableCents"] == 1500 and body["document"]["kind"] == "CREDIT_NOTE"
        assert body["transaction"]["kind"] == "ADJUSTMENT" and body["transaction"]["amountCents"] == 500
        again = await admin.post(path, json=credit)  # a retry applies it once
        assert again.status_code == 201 and again.json()["transaction"]["id"] == body["transaction"]["id"]
        assert again.json()["balance"]["availableCents"] == 1500
        reused = await admin.post(path, json={**credit, "amountCents": 700})
        assert reused.status_code == 409
        debit = await admin.post(path, json={"amountCents": -300, "reason": "duplicate credit"})
        assert (
            debit.json()["balance"]["availableCents"] == 1200
            and debit.json()["document"]["kind"] == "INVOICE"
        )
        short = await admin.post(path, json={"amountCents": -5000, "reason": "too much"})
        assert short.status_code == 409 and short.json()["code"] == "insufficient_funds"
        assert (await admin.post(path, json={"amountCents": 0, "reason": "nothing"})).status_code == 422
        assert (await admin.post(path, json={"amountCents": 5, "reason": ""})).status_code == 422
        unknown = await admin.post("/admin/payments/buyer-profiles/bpf_nope/adjustments", json=credit)
        assert unknown.status_code == 404 and unknown.json()["code"] == "buyer_profile_not_found"
    assert (await owner.client.get("/me/billing")).json()["availableCents"] == 1200
    log = await admin_log(app, core, "buyer_profile.adjusted")
    assert [e["data"]["amountCents"] for e in log] == [-300, 500]  # newest first, the retry not twice


async def admin_log(app: Any, core: Core, action: str) -> list[dict[str, Any]]:
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        return list((await admin.get("/admin/audit-log", params={"action": action})).json()["entries"])


async def test_concurrent_adjustments_with_one_key_credit_once(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    path = (
        f"/admin/payments/buyer-profiles/{(await owner.client.get('/me/billing')).json()['id']}/adjustments"
    )
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    body = {"amountCents": 400, "reason": "refund of a failed job", "idempotencyKey": "race-1"}
    async with admin:
        answers = await asyncio.gather(*(admin.post(path, json=body) for _ in range(5)))
    assert {r.status_code for r in answers} <= {201, 409}, [r.text for r in answers]
    assert len({r.json()["transaction"]["id"] for r in answers if r.status_code == 201}) == 1
    assert (await owner.client.get("/me/billing")).json()["availableCents"] == 400
