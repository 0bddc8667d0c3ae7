"""Disputes through the real app on SQLite and PostgreSQL: who may open one, the freeze of the job's money
(award, no-award, the payout), each resolution's effect on the ledger (balances equal the entries after every
test), a retried resolution applied once, two staff resolving at once, the SLA indicator on the sweeper, and
the MCP tools."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from callboard_core.agents.models import Agent, AgentCapability
from callboard_core.container import Core
from callboard_core.disputes import service as disputes
from callboard_core.documents.models import CommercialDocument
from callboard_core.ledger.models import LedgerTransaction
from callboard_core.payouts import service as payouts
from callboard_core.security.permissions import Role
from callboard_core.users.models import User
from tests.conftest import owner_client
from tests.jobs_helpers import AgentHandle, new_agent, new_owner, to_review
from tests.mcp_helpers import call, call_error, http_client, serving
from tests.payments_helpers import Buyer, award_documents, buyer, draft, money, platform_fees
from tests.payout_helpers import onboard_owner, payout_rows

pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test

REWARD = 1000
FEE = 100  # the default 10%
OPEN = {"reasonCode": "THEFT_CLAIM", "reasonText": "The deliverable was copied from our own repository."}


@dataclass
class Case:
    b: Buyer
    worker: AgentHandle
    job_id: str
    submission_id: str


async def paid_in_review(app: Any, core: Core, client: httpx.AsyncClient, *, onboard: bool = False) -> Case:
    b = await buyer(app, core, funds=5_000)
    owner = await new_owner(app, core)
    worker = await new_agent(owner)
    if onboard:
        await onboard_owner(owner, core)
    job_id = await draft(client, b, REWARD)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    submission_id = await to_review(client, job_id, b.agent, worker)
    return Case(b, worker, job_id, submission_id)


async def awarded(app: Any, core: Core, client: httpx.AsyncClient, *, onboard: bool = True) -> Case:
    c = await paid_in_review(app, core, client, onboard=onboard)
    r = await client.post(
        f"/api/v2/jobs/{c.job_id}/award", json={"submissionId": c.submission_id}, headers=c.b.agent.h
    )
    assert r.status_code == 200, r.text
    return c


async def resolve(admin: httpx.AsyncClient, dispute_id: str, **body: Any) -> httpx.Response:
    body.setdefault("resolutionNotes", "Reviewed the evidence of both parties.")
    return await admin.post(f"/api/v2/admin/job-disputes/{dispute_id}/resolve", json=body)


async def count(core: Core, statement: Any) -> int:
    async with core.uow(write=False) as uow:
        return int(await uow.session.scalar(statement) or 0)


# --- opening and the freeze -----------------------------------------------------------------------------


async def test_a_requester_dispute_freezes_the_award_and_the_no_award(
    app: Any, core: Core, client: Any
) -> None:
    c = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    assert opened.status_code == 201, opened.text
    dispute = opened.json()
    assert dispute["status"] == "OPEN" and dispute["side"] == "REQUESTER"
    assert dispute["slaState"] == "NEEDS_RESPONSE" and dispute["heldCents"] == 0

    job = (await c.b.owner.client.get(f"/api/v2/owner/jobs/{c.job_id}")).json()
    assert job["openDisputeId"] == dispute["id"]
    for path, body in (("award", {"submissionId": c.submission_id}), ("no-award", {"reasonCode": "OTHER"})):
        refused = await client.post(f"/api/v2/jobs/{c.job_id}/{path}", json=body, headers=c.b.agent.h)
        assert refused.status_code == 409, refused.text
        assert refused.json()["code"] == "dispute_open" and refused.json()["disputeId"] == dispute["id"]
    assert await money(core, c.b.owner.user_id) == (5_000 - REWARD - FEE, REWARD + FEE, 0)  # still in escrow

    again = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.worker.h)
    assert again.status_code == 409 and again.json()["code"] == "dispute_already_open"
    # Only a party may open one: another owner's agent does not see the job.
    stranger = await new_agent(await new_owner(app, core))
    hidden = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=stranger.h)
    assert hidden.status_code == 404 and hidden.json()["code"] == "job_not_found"
    # The other parties are told (agent notifications), and both owners get the owner notification.
    for who in (c.worker.owner, c.b.owner):
        listed = (await who.client.get("/me/notifications")).json()
        assert any(n["type"] == "BOUNTY_DISPUTE_OPENED" for n in listed["notifications"]), listed


async def test_who_may_open_and_until_when(app: Any, core: Core, client: Any, frozen_clock: Any) -> None:
    b = await buyer(app, core, funds=0)
    job = await client.post("/api/v2/jobs", json=_free_job(), headers=b.agent.h)
    refused = await client.post(f"/api/v2/jobs/{job.json()['id']}/disputes", json=OPEN, headers=b.agent.h)
    assert refused.status_code == 409 and refused.json()["code"] == "job_not_published"

    c = await paid_in_review(app, core, client)
    no = await client.post(
        f"/api/v2/jobs/{c.job_id}/no-award", json={"reasonCode": "OTHER"}, headers=c.b.agent.h
    )
    assert no.status_code == 200, no.text
    frozen_clock.advance(days=15)  # past the 14-day window after the job closed
    late = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.worker.h)
    assert late.status_code == 409 and late.json()["code"] == "dispute_window_closed"
    bad = await client.post(
        f"/api/v2/jobs/{c.job_id}/disputes",
        json={"reasonCode": "ANGRY", "reasonText": "x"},
        headers=c.worker.h,
    )
    assert bad.status_code == 422 and bad.json()["code"] == "validation_failed"


def _free_job() -> dict[str, Any]:
    from tests.jobs_helpers import job_body

    return job_body()


async def test_a_dispute_holds_the_payout_until_it_is_resolved(app: Any, core: Core, client: Any) -> None:
    c = await awarded(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    assert opened.status_code == 201, opened.text
    await payouts.send_due(core)
    [payout] = await payout_rows(core, c.worker.owner.user_id)
    assert payout.status == "PENDING"  # frozen: not sent
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await resolve(admin, opened.json()["id"], resolution="UPHOLD_AWARD")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "RESOLVED" and r.json()["slaState"] == "NONE"
    await payouts.send_due(core)
    [payout] = await payout_rows(core, c.worker.owner.user_id)
    assert payout.status == "PAID"
    listed = (await c.b.owner.client.get("/me/notifications")).json()["notifications"]
    assert any(n["type"] == "BOUNTY_DISPUTE_RESOLVED" for n in listed)


# --- each resolution's money ------------------------------------------------------------------------------


async def test_refund_requester_reverses_an_unsent_award(app: Any, core: Core, client: Any) -> None:
    c = await awarded(app, core, client, onboard=False)
    fees_before = await platform_fees(core)
    assert await money(core, c.worker.owner.user_id) == (0, 0, REWARD)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await resolve(admin, opened.json()["id"], resolution="REFUND_REQUESTER")
        assert r.status_code == 200, r.text
        outcome = r.json()["outcome"]
    assert await money(core, c.b.owner.user_id) == (5_000, 0, 0)  # pay and fee back
    assert await money(core, c.worker.owner.user_id) == (0, 0, 0)
    assert await platform_fees(core) == fees_before - FEE
    [payout] = await payout_rows(core, c.worker.owner.user_id)
    assert payout.status == "CANCELLED" and outcome["cancelledPayoutId"] == payout.id
    payment = (await client.get(f"/api/v2/jobs/{c.job_id}/payment", headers=c.b.agent.h)).json()
    assert payment["status"] == "REFUNDED"
    note = await count(
        core,
        select(func.count())
        .select_from(CommercialDocument)
        .where(
            CommercialDocument.transaction_id == outcome["refundTransactionId"],
            CommercialDocument.kind == "CREDIT_NOTE",
        ),
    )
    assert note == 1


async def test_refund_requester_cannot_take_back_a_sent_payout(app: Any, core: Core, client: Any) -> None:
    c = await awarded(app, core, client)
    await payouts.send_due(core)  # paid before anyone disputed
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await resolve(admin, opened.json()["id"], resolution="REFUND_REQUESTER")
        assert r.status_code == 409 and r.json()["code"] == "payout_already_sent", r.text
        detail = (await admin.get(f"/api/v2/admin/job-disputes/{opened.json()['id']}")).json()
        assert detail["status"] == "OPEN"  # nothing happened: still open for another resolution
        adjusted = await resolve(
            admin, opened.json()["id"], resolution="ADMIN_ADJUSTMENT", adjustmentAmountCents=REWARD
        )
        assert adjusted.status_code == 200, adjusted.text
    assert (await money(core, c.b.owner.user_id))[0] == 5_000 - FEE  # the platform made the requester whole


async def test_a_worker_dispute_after_no_award_holds_funds_and_force_award_pays(
    app: Any, core: Core, client: Any
) -> None:
    c = await paid_in_review(app, core, client)
    no = await client.post(
        f"/api/v2/jobs/{c.job_id}/no-award", json={"reasonCode": "OTHER"}, headers=c.b.agent.h
    )
    assert no.status_code == 200
    assert await money(core, c.b.owner.user_id) == (5_000, 0, 0)
    opened = await client.post(
        f"/api/v2/jobs/{c.job_id}/disputes",
        json={
            "reasonCode": "PAYMENT_DISPUTE",
            "reasonText": "The work met every requirement.",
            "evidenceJson": {"a": 1},
        },
        headers=c.worker.h,
    )
    assert opened.status_code == 201, opened.text
    assert opened.json()["side"] == "WORKER" and opened.json()["heldCents"] == REWARD + FEE
    assert await money(core, c.b.owner.user_id) == (5_000 - REWARD - FEE, REWARD + FEE, 0)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await resolve(admin, opened.json()["id"], resolution="FORCE_AWARD", submissionId=c.submission_id)
        assert r.status_code == 200, r.text
    assert await money(core, c.b.owner.user_id) == (5_000 - REWARD - FEE, 0, 0)
    assert await money(core, c.worker.owner.user_id) == (0, 0, REWARD)
    job = (await c.b.owner.client.get(f"/api/v2/owner/jobs/{c.job_id}")).json()
    assert (
        job["status"] == "AWARDED"
        and job["awardedSubmissionId"] == c.submission_id
        and job["openDisputeId"] is None
    )
    assert len(await payout_rows(core, c.worker.owner.user_id)) == 1
    # The capture's documents, numbered when the transaction committed (no closing statement carried their
    # numbers: the job's work was closed by the no-award).
    documents = await award_documents(core, c.job_id)
    invoice, receipt = documents["INVOICE"], documents["RECEIPT"]
    assert invoice[0].startswith("INV-") and invoice[1] == FEE
    assert receipt[0].startswith("RCT-") and receipt[1:] == (REWARD + FEE, invoice[0])


async def test_uphold_no_award_gives_the_hold_back(app: Any, core: Core, client: Any) -> None:
    c = await paid_in_review(app, core, client)
    await client.post(f"/api/v2/jobs/{c.job_id}/no-award", json={"reasonCode": "OTHER"}, headers=c.b.agent.h)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.worker.h)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        wrong = await resolve(admin, opened.json()["id"], resolution="UPHOLD_AWARD")
        assert wrong.status_code == 409 and wrong.json()["code"] == "resolution_not_applicable"
        r = await resolve(admin, opened.json()["id"], resolution="UPHOLD_NO_AWARD")
        assert r.status_code == 200, r.text
    assert await money(core, c.b.owner.user_id) == (5_000, 0, 0)
    held_back = await count(
        core,
        select(func.count()).select_from(CommercialDocument).where(CommercialDocument.job_id == c.job_id),
    )
    assert held_back == 1  # the no-award's credit note only: a hold and its return are not documents


async def test_refund_requester_on_an_open_job_cancels_it(app: Any, core: Core, client: Any) -> None:
    c = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.worker.h)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await resolve(admin, opened.json()["id"], resolution="REFUND_REQUESTER", flagRequesterAbuse=False)
        assert r.status_code == 200, r.text
    assert await money(core, c.b.owner.user_id) == (5_000, 0, 0)
    job = (await c.b.owner.client.get(f"/api/v2/owner/jobs/{c.job_id}")).json()
    assert job["status"] == "CANCELLED"


async def test_suspend_requester_and_mark_worker_invalid(app: Any, core: Core, client: Any) -> None:
    c = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.worker.h)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await resolve(admin, opened.json()["id"], resolution="SUSPEND_REQUESTER")
        assert r.status_code == 200, r.text
    refused = await client.get("/api/v2/agents/me", headers=c.b.agent.h)
    assert refused.status_code == 401  # suspended: its keys are revoked
    async with core.uow(write=False) as uow:
        agent = await uow.session.get(Agent, c.b.agent.id)
        assert agent is not None and agent.status == "SUSPENDED"

    d = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{d.job_id}/disputes", json=OPEN, headers=d.b.agent.h)
    async with core.uow(write=False) as uow:
        tag_id = (
            await uow.session.scalars(
                select(AgentCapability.tag_id).where(AgentCapability.agent_id == d.worker.id)
            )
        ).first()
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await resolve(
            admin,
            opened.json()["id"],
            resolution="MARK_WORKER_INVALID",
            workerAgentId=d.worker.id,
            suspendCapability=True,
            capabilityTagId=tag_id,
        )
        assert r.status_code == 200, r.text
        assert r.json()["outcome"]["capabilityRemoved"] is True
    assert (
        await count(
            core,
            select(func.count())
            .select_from(AgentCapability)
            .where(AgentCapability.agent_id == d.worker.id, AgentCapability.tag_id == tag_id),
        )
        == 0
    )
    # The job is unfrozen and its money untouched: the requester may now decide.
    r = await client.post(
        f"/api/v2/jobs/{d.job_id}/no-award", json={"reasonCode": "OTHER"}, headers=d.b.agent.h
    )
    assert r.status_code == 200, r.text


# --- exactly once -----------------------------------------------------------------------------------------


async def test_a_retried_resolution_applies_once(app: Any, core: Core, client: Any) -> None:
    c = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    body = {"resolution": "ADMIN_ADJUSTMENT", "adjustmentAmountCents": 250, "idempotencyKey": "settle-1"}
    async with admin:
        first = await resolve(admin, opened.json()["id"], **body)
        again = await resolve(admin, opened.json()["id"], **body)
        other = await resolve(admin, opened.json()["id"], **{**body, "idempotencyKey": "settle-2"})
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert first.json() == again.json()
    assert other.status_code == 409 and other.json()["code"] == "dispute_already_resolved"
    auditor, _ = await owner_client(app, core, role=Role.ADMIN)
    async with auditor:  # audited once, with the staff member's role and the request it was made in
        log = (await auditor.get("/admin/audit-log", params={"action": "dispute.resolved"})).json()["entries"]
    [entry] = [e for e in log if e["targetId"] == opened.json()["id"]]
    assert entry["actorRole"] == "ADMIN" and entry["requestId"] == first.headers["x-request-id"]
    assert entry["data"]["resolution"] == "ADMIN_ADJUSTMENT" and entry["data"]["notes"]
    assert (await money(core, c.b.owner.user_id))[0] == 5_000 - REWARD - FEE + 250
    adjustments = await count(
        core,
        select(func.count())
        .select_from(LedgerTransaction)
        .where(
            LedgerTransaction.idempotency_key.like("dispute_adjustment:%"),
            LedgerTransaction.job_id == c.job_id,
        ),
    )
    assert adjustments == 1


async def test_two_staff_resolving_at_once_one_wins(app: Any, core: Core, client: Any) -> None:
    c = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    first, _ = await owner_client(app, core, role=Role.ADMIN)
    second, _ = await owner_client(app, core, role=Role.SUPERADMIN)
    async with first, second:
        answers = await asyncio.gather(
            resolve(first, opened.json()["id"], resolution="ADMIN_ADJUSTMENT", adjustmentAmountCents=300),
            resolve(second, opened.json()["id"], resolution="REFUND_REQUESTER"),
        )
    codes = sorted(a.status_code for a in answers)
    assert codes == [200, 409], [a.text for a in answers]
    loser = next(a for a in answers if a.status_code == 409)
    assert loser.json()["code"] == "dispute_already_resolved"
    winner = next(a for a in answers if a.status_code == 200).json()["resolution"]
    available = (await money(core, c.b.owner.user_id))[0]
    assert available == (5_000 - REWARD - FEE + 300 if winner == "ADMIN_ADJUSTMENT" else 5_000)


async def test_support_and_moderators_cannot_resolve(app: Any, core: Core, client: Any) -> None:
    c = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    for role in (Role.SUPPORT, Role.MODERATOR):
        staff, _ = await owner_client(app, core, role=role)
        async with staff:
            r = await resolve(staff, opened.json()["id"], resolution="UPHOLD_AWARD")
            assert r.status_code == 403, r.text
            via_task = await staff.post(
                f"/admin/tasks/{c.job_id}/action",
                json={
                    "action": "resolve",
                    "note": "x",
                    "resolve": {"resolution": "REFUND_REQUESTER", "resolutionNotes": "x"},
                },
            )
            assert via_task.status_code == 403, via_task.text
    # A party can never settle: there is no such route for it, and the staff route refuses a key.
    assert (await resolve(client, opened.json()["id"], resolution="REFUND_REQUESTER")).status_code == 401


# --- the SLA indicator ------------------------------------------------------------------------------------


async def test_the_sla_indicator_moves_with_the_clock_and_staff_response(
    app: Any, core: Core, client: Any, frozen_clock: Any
) -> None:
    c = await paid_in_review(app, core, client)
    opened = await client.post(f"/api/v2/jobs/{c.job_id}/disputes", json=OPEN, headers=c.b.agent.h)
    dispute_id = opened.json()["id"]
    staff = await new_owner(app, core)  # a session that outlives the days the clock moves through
    async with core.uow() as uow:
        user = await uow.session.get(User, staff.user_id)
        assert user is not None
        user.role = Role.ADMIN
    admin = staff.client

    async def state() -> tuple[str, list[str]]:
        await disputes.sweep_sla(core)
        shown = (await admin.get(f"/api/v2/admin/job-disputes/{dispute_id}")).json()["slaState"]
        due_soon = (await admin.get("/admin/tasks", params={"risk": "DISPUTE_DUE_SOON"})).json()["tasks"]
        breached = (await admin.get("/admin/tasks", params={"risk": "DISPUTE_BREACHED"})).json()["tasks"]
        flags = [
            name
            for name, rows in (("due_soon", due_soon), ("breached", breached))
            if any(t["id"] == c.job_id for t in rows)
        ]
        return shown, flags

    async with admin:
        assert await state() == ("NEEDS_RESPONSE", [])
        frozen_clock.advance(hours=21)  # the response is due at 24 h; "due soon" 4 h before
        assert await state() == ("RESPONSE_DUE_SOON", ["due_soon"])
        frozen_clock.advance(hours=4)
        assert await state() == ("RESPONSE_BREACHED", ["breached"])
        noted = await admin.post(
            f"/admin/tasks/{c.job_id}/action", json={"action": "note", "note": "Looking into it."}
        )
        assert noted.status_code == 200, noted.text
        assert await state() == ("ESCALATED", [])
        frozen_clock.advance(hours=92)  # the resolution is due at 120 h
        assert await state() == ("RESOLUTION_DUE_SOON", ["due_soon"])
        frozen_clock.advance(hours=4)
        assert await state() == ("RESOLUTION_BREACHED", ["breached"])
        events = (await admin.get(f"/admin/tasks/{c.job_id}")).json()["notes"]
        assert [n["note"] for n in events] == ["Looking into it."]


# --- over MCP ----------------------------------------------------------------------------------------------


async def test_agents_open_and_follow_a_dispute_over_mcp(app: Any, core: Core, client: Any) -> None:
    c = await paid_in_review(app, core, client)
    async with serving(core) as url, http_client(url, c.worker.key) as mcp:
        opened = await call(
            mcp,
            "open_dispute",
            job_id=c.job_id,
            dispute={"reasonCode": "OTHER", "reasonText": "Unclear brief."},
        )
        assert opened["status"] == "OPEN" and opened["side"] == "WORKER"
        again = await call_error(
            mcp, "open_dispute", job_id=c.job_id, dispute={"reasonCode": "OTHER", "reasonText": "x"}
        )
        assert again["code"] == "dispute_already_open"
        status = await call(mcp, "dispute_status", job_id=c.job_id)
        assert [d["id"] for d in status["disputes"]] == [opened["id"]]
    async with serving(core) as url, http_client(url, c.b.agent.key) as mcp:
        frozen = await call_error(mcp, "award", job_id=c.job_id, submission_id=c.submission_id)
        assert frozen["code"] == "dispute_open"
    stranger = await new_agent(await new_owner(app, core))
    async with serving(core) as url, http_client(url, stranger.key) as mcp:
        assert (await call_error(mcp, "dispute_status", job_id=c.job_id))["code"] == "job_not_found"
