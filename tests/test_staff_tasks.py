"""The staff console's tasks (jobs as staff run them) and the job administration routes, through the real app
on SQLite and PostgreSQL: the risk filters, the redacted detail for SUPPORT, each action and its audit entry,
the partial refund, auto-award and award override. The ledger verifies clean after every test."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from callboard_core.container import Core
from callboard_core.security.permissions import Role
from callboard_core.users.models import User
from tests.conftest import owner_client
from tests.jobs_helpers import AgentHandle, all_submit, new_agent, new_owner, submit_body
from tests.payments_helpers import Buyer, award_documents, buyer, draft, money

pytestmark = pytest.mark.usefixtures("books_balance")

REWARD, FEE = 1000, 100


async def published(client: httpx.AsyncClient, b: Buyer, **overrides: Any) -> str:
    job_id = await draft(client, b, REWARD, **overrides)
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert r.status_code == 200, r.text
    return job_id


async def staff_member(app: Any, core: Core, role: Role) -> httpx.AsyncClient:
    """A staff session that outlives the days the clock may move through."""
    owner = await new_owner(app, core)
    async with core.uow() as uow:
        user = await uow.session.get(User, owner.user_id)
        assert user is not None
        user.role = role
    return owner.client


async def workers(app: Any, core: Core, n: int) -> list[AgentHandle]:
    return [await new_agent(await new_owner(app, core)) for _ in range(n)]


async def actions_logged(admin: httpx.AsyncClient, job_id: str) -> list[str]:
    entries = (await admin.get("/admin/audit-log", params={"query": job_id, "targetType": "job"})).json()[
        "entries"
    ]
    return sorted(e["action"] for e in entries)


async def test_risk_filters_find_what_needs_attention(
    app: Any, core: Core, client: Any, frozen_clock: Any
) -> None:
    b = await buyer(app, core, funds=10_000)
    admin = await staff_member(app, core, Role.ADMIN)
    [w] = await workers(app, core, 1)
    overdue = await published(client, b)
    await all_submit(client, overdue, b.agent, [w])
    disputed = await published(client, b)
    opened = await admin.post(
        f"/admin/tasks/{disputed}/action", json={"action": "dispute", "note": "Reported by a worker by mail."}
    )
    assert opened.status_code == 200, opened.text
    stuck = await published(client, b)  # the sweeper never ran: its admission stays open past its close
    frozen_clock.advance(hours=13)  # past the review deadline (12 h) and an hour past admission (1 h)

    async def found(risk: str) -> set[str]:
        r = await admin.get("/admin/tasks", params={"risk": risk, "limit": 200})
        assert r.status_code == 200, r.text
        return {t["id"] for t in r.json()["tasks"]} & {overdue, disputed, stuck}

    assert await found("OVERDUE") == {overdue}
    assert await found("DISPUTED") == {disputed}
    assert await found("STUCK") == {stuck}
    assert await found("NEEDS_ATTENTION") == {overdue, disputed, stuck}
    assert await found("ALL") == {overdue, disputed, stuck}
    listed = (await admin.get("/admin/tasks", params={"query": disputed})).json()
    assert (
        listed["total"] == 1
        and listed["tasks"][0]["openDisputeId"]
        and listed["tasks"][0]["disputeSlaState"] == "ESCALATED"
    )


async def test_support_gets_the_redacted_detail(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core)
    job_id = await published(client, b)
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with support, admin:
        assert (
            await support.post(f"/admin/tasks/{job_id}/action", json={"action": "note", "note": "Called"})
        ).status_code == 200
        seen = (await support.get(f"/admin/tasks/{job_id}")).json()
        assert seen["redacted"] is True and seen["payment"] is None and seen["auditEntries"] is None
        assert seen["job"]["id"] == job_id and [n["note"] for n in seen["notes"]] == ["Called"]
        full = (await admin.get(f"/admin/tasks/{job_id}")).json()
        assert full["redacted"] is False
        assert full["payment"] == {
            "status": "RESERVED",
            "payCents": REWARD,
            "feeCents": FEE,
            "refundedCents": 0,
            "payoutStatus": None,
        }
        assert [e["action"] for e in full["auditEntries"]] == ["task.note"]
        for action in ("cancel", "dispute", "archive"):
            refused = await support.post(
                f"/admin/tasks/{job_id}/action", json={"action": action, "note": "x"}
            )
            assert refused.status_code == 403 and refused.json()["code"] == "insufficient_role", action
        assert (
            await support.post(f"/admin/tasks/{job_id}/refund", json={"amountCents": 1, "reason": "x"})
        ).status_code == 403
        assert (await support.get("/admin/tasks/job_nope")).status_code == 404


async def test_cancel_archive_restore_each_audited(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core, funds=5_000)
    job_id = await published(client, b)
    moderator, _ = await owner_client(app, core, role=Role.MODERATOR)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with moderator, admin:
        early = await moderator.post(f"/admin/tasks/{job_id}/action", json={"action": "archive", "note": "x"})
        assert early.status_code == 409 and early.json()["code"] == "invalid_state"
        cancelled = await moderator.post(
            f"/admin/tasks/{job_id}/action", json={"action": "cancel", "note": "Spam job."}
        )
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["task"]["status"] == "CANCELLED"
        assert await money(core, b.owner.user_id) == (5_000, 0, 0)  # the escrow went back in full
        again = await moderator.post(f"/admin/tasks/{job_id}/action", json={"action": "cancel", "note": "x"})
        assert again.status_code == 409
        archived = await moderator.post(
            f"/admin/tasks/{job_id}/action", json={"action": "archive", "note": "Done."}
        )
        assert archived.status_code == 200 and archived.json()["task"]["archived"] is True
        assert job_id not in {
            t["id"] for t in (await moderator.get("/admin/tasks", params={"limit": 200})).json()["tasks"]
        }
        shown = (
            await moderator.get("/admin/tasks", params={"includeArchived": True, "query": job_id})
        ).json()
        assert [t["id"] for t in shown["tasks"]] == [job_id]
        restored = await moderator.post(
            f"/admin/tasks/{job_id}/action", json={"action": "restore", "note": "Oops."}
        )
        assert restored.json()["task"]["archived"] is False
        assert await actions_logged(admin, job_id) == ["task.archive", "task.cancel", "task.restore"]
        resolve = await admin.post(
            f"/admin/tasks/{job_id}/action",
            json={
                "action": "resolve",
                "note": "x",
                "resolve": {"resolution": "UPHOLD_AWARD", "resolutionNotes": "x"},
            },
        )
        assert resolve.status_code == 409 and resolve.json()["code"] == "no_open_dispute"


async def test_staff_dispute_and_resolve_through_the_task(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core, funds=5_000)
    job_id = await published(client, b)
    moderator, _ = await owner_client(app, core, role=Role.MODERATOR)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with moderator, admin:
        opened = await moderator.post(
            f"/admin/tasks/{job_id}/action",
            json={"action": "dispute", "reasonCode": "POLICY_ABUSE", "note": "Scam."},
        )
        assert opened.status_code == 200, opened.text
        [dispute] = opened.json()["disputes"]
        assert dispute["side"] == "STAFF" and dispute["status"] == "OPEN"
        frozen = await moderator.post(f"/admin/tasks/{job_id}/action", json={"action": "cancel", "note": "x"})
        assert frozen.status_code == 409 and frozen.json()["code"] == "dispute_open"
        resolved = await admin.post(
            f"/admin/tasks/{job_id}/action",
            json={
                "action": "resolve",
                "note": "Refunding.",
                "resolve": {"resolution": "REFUND_REQUESTER", "resolutionNotes": "The job broke the rules."},
            },
        )
        assert resolved.status_code == 200, resolved.text
        assert (
            resolved.json()["task"]["status"] == "CANCELLED"
            and resolved.json()["disputes"][0]["status"] == "RESOLVED"
        )
    assert await money(core, b.owner.user_id) == (5_000, 0, 0)


async def test_a_partial_refund_of_the_escrow(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core, funds=5_000)
    job_id = await published(client, b)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    moderator, _ = await owner_client(app, core, role=Role.MODERATOR)
    async with admin, moderator:
        assert (
            await moderator.post(f"/admin/tasks/{job_id}/refund", json={"amountCents": 300, "reason": "x"})
        ).status_code == 403
        body = {"amountCents": 300, "reason": "Scope cut by agreement.", "idempotencyKey": "r-1"}
        first = await admin.post(f"/admin/tasks/{job_id}/refund", json=body)
        again = await admin.post(f"/admin/tasks/{job_id}/refund", json=body)
        assert first.status_code == again.status_code == 200, (first.text, again.text)
        assert first.json()["transactionId"] == again.json()["transactionId"]
        assert (
            first.json()["payment"]["payCents"] == REWARD - 300
            and first.json()["payment"]["refundedCents"] == 300
        )
        assert first.json()["task"]["rewardAmountCents"] == REWARD - 300
        assert first.json()["document"]["kind"] == "CREDIT_NOTE"
        too_much = await admin.post(
            f"/admin/tasks/{job_id}/refund", json={"amountCents": REWARD, "reason": "x"}
        )
        assert too_much.status_code == 422 and too_much.json()["errors"][0]["code"] == "refund_too_large"
        assert await actions_logged(admin, job_id) == ["task.refunded"]
    assert await money(core, b.owner.user_id) == (5_000 - REWARD - FEE + 300, REWARD + FEE - 300, 0)
    # The award pays the smaller reward: the escrow left is exactly what it captures.
    [w] = await workers(app, core, 1)
    [sub] = await all_submit(client, job_id, b.agent, [w])
    r = await client.post(f"/api/v2/jobs/{job_id}/award", json={"submissionId": sub}, headers=b.agent.h)
    assert r.status_code == 200, r.text
    assert await money(core, b.owner.user_id) == (5_000 - REWARD - FEE + 300, 0, 0)
    assert await money(core, w.owner.user_id) == (0, 0, REWARD - 300)


async def test_auto_award_after_the_review_deadline(
    app: Any, core: Core, client: Any, frozen_clock: Any
) -> None:
    b = await buyer(app, core, funds=5_000)
    job_id = await published(client, b)
    first, second = await workers(app, core, 2)
    for w in (second, first):
        assert (await client.post(f"/api/v2/jobs/{job_id}/applications", headers=w.h)).status_code == 201
    assert (await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=b.agent.h)).status_code == 200
    subs = []
    for w in (first, second):  # the first worker delivers a minute before the second
        [slot] = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=w.h)).json()[
            "slots"
        ]
        await client.post(f"/api/v2/participation-slots/{slot['id']}/acknowledge", headers=w.h)
        sub = await client.post(
            f"/api/v2/participation-slots/{slot['id']}/submit", json=submit_body(), headers=w.h
        )
        assert sub.status_code == 201, sub.text
        subs.append(sub.json()["id"])
        frozen_clock.advance(minutes=1)
    admin = await staff_member(app, core, Role.ADMIN)
    early = await admin.post(f"/api/v2/admin/jobs/{job_id}/auto-award")
    assert early.status_code == 409 and early.json()["code"] == "review_not_overdue"
    frozen_clock.advance(hours=13)
    r = await admin.post(f"/api/v2/admin/bounties/{job_id}/auto-award")
    assert r.status_code == 200, r.text
    assert r.json()["award"]["submissionId"] == subs[0]  # the earliest submission
    assert await money(core, first.owner.user_id) == (0, 0, REWARD)
    assert await actions_logged(admin, job_id) == ["job.auto_awarded"]


async def test_award_override(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core, funds=5_000)
    job_id = await published(client, b)
    first, second = await workers(app, core, 2)
    subs = await all_submit(client, job_id, b.agent, [first, second])
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        r = await admin.post(
            f"/api/v2/admin/jobs/{job_id}/award-override",
            json={"submissionId": subs[1], "reason": "Requester unreachable."},
        )
        assert r.status_code == 200, r.text
        assert r.json()["job"]["status"] == "AWARDED" and r.json()["award"]["submissionId"] == subs[1]
        again = await admin.post(
            f"/api/v2/admin/jobs/{job_id}/award-override", json={"submissionId": subs[0], "reason": "x"}
        )
        assert again.status_code == 409 and again.json()["code"] == "already_awarded"
        assert await actions_logged(admin, job_id) == ["job.award_overridden"]
    assert await money(core, second.owner.user_id) == (0, 0, REWARD)
    documents = await award_documents(core, job_id)  # numbered in the award's closing statement (PostgreSQL)
    assert documents["INVOICE"][1] == FEE and documents["RECEIPT"][1:] == (
        REWARD + FEE,
        documents["INVOICE"][0],
    )

    other = await published(client, b)
    [w] = await workers(app, core, 1)
    [sub] = await all_submit(client, other, b.agent, [w])
    opened = await client.post(
        f"/api/v2/jobs/{other}/disputes", json={"reasonCode": "OTHER", "reasonText": "x"}, headers=w.h
    )
    assert opened.status_code == 201
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        frozen = await admin.post(
            f"/api/v2/admin/jobs/{other}/award-override", json={"submissionId": sub, "reason": "x"}
        )
        assert frozen.status_code == 409 and frozen.json()["code"] == "dispute_open"
