"""Paid jobs over HTTP and MCP, on SQLite and PostgreSQL: escrow of pay + fee at publish within the agent's
limit, the owner's caps and the activation's caps; the owner's confirmation; auto top-up (charged, declined);
capture at award; release on every end without an award; the payment routes and their isolation; races.
Owners are funded through the ledger's own service. After every test the books must verify clean."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from callboard_core import bus
from callboard_core.container import Core
from callboard_core.documents.models import CommercialDocument, DocumentKind
from callboard_core.errors import PrepareFirst
from callboard_core.jobs import service as jobs
from callboard_core.ledger.models import LedgerTransaction, TransactionKind
from callboard_core.onboarding.models import OnboardingActivation
from callboard_core.payments import service as payments
from callboard_core.payments.models import JobPayment
from callboard_core.principals import Actor
from callboard_core.processor.sandbox import SandboxProcessor, pending_events
from callboard_core.processor.translate import fact_of
from tests.jobs_helpers import new_agent, new_owner, postgres_only, to_review, travel
from tests.mcp_helpers import call, call_error, http_client, serving
from tests.payments_helpers import Buyer, buyer, draft, fund, kinds_for, money, platform_fees, save_card

pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


# --- builders -------------------------------------------------------------------------------------------


async def deliver_payment_events(core: Core) -> int:
    """The sandbox's payment_intent.succeeded events, verified and dispatched as the webhook route does."""
    p = core.processor
    assert isinstance(p, SandboxProcessor)
    async with core.db.session(write=False) as s:
        events = [e for e in await pending_events(s, 500) if e.type == "payment_intent.succeeded"]
    async with core.uow() as uow:
        for e in events:
            body, header = p.signed(e)
            fact = fact_of(p.parse_event(body, header))
            assert fact is not None
            await bus.publish(uow.session, fact)
    return len(events)


# --- publish -------------------------------------------------------------------------------------------


async def publish_a_paid_job(client: httpx.AsyncClient, b: Buyer) -> None:
    """The requester publishes a paid job: the owner's profile and escrow account exist from then on, and on
    PostgreSQL its next publish reads the profile with its job (`payments.with_paid_reads`)."""
    warm = await draft(client, b, 1000)
    assert (await client.post(f"/api/v2/jobs/{warm}/publish", headers=b.agent.h)).status_code == 200


async def test_paid_publish_reserves_pay_and_fee_and_the_job_shows_the_fee(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    job_id = await draft(client, b, 1005)
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert r.status_code == 200, r.text
    # 10% of 1005 is 100.5: whole cents, rounded half up.
    assert r.json()["status"] == "ADMISSION_OPEN" and r.json()["platformFeeCents"] == 101
    assert await money(core, b.owner.user_id) == (10_000 - 1106, 1106, 0)
    pay = await client.get(f"/api/v2/jobs/{job_id}/payment", headers=b.agent.h)
    assert pay.status_code == 200, pay.text
    body = pay.json()
    assert body["id"].startswith("jpy_") and body["status"] == "RESERVED"
    assert (body["payCents"], body["feeCents"], body["feeBps"], body["totalCents"]) == (1005, 101, 1000, 1106)
    assert body["missing"] == [] and body["reserveTransactionId"].startswith("ltx")
    # The same payment under the bounty naming and the owner mirrors.
    for path, c, h in (
        (f"/api/v2/bounties/{job_id}/payment", client, b.agent.h),
        (f"/api/v2/owner/jobs/{job_id}/payment", b.owner.client, {}),
        (f"/api/v2/owner/bounties/{job_id}/payment", b.owner.client, {}),
    ):
        assert (await c.get(path, headers=h)).json() == body
    # The owner's job view shows the fee too; a free job records none and has no payment.
    assert (await b.owner.client.get(f"/api/v2/owner/jobs/{job_id}")).json()["platformFeeCents"] == 101
    free = await draft(client, b, 0)
    assert (await client.post(f"/api/v2/jobs/{free}/publish", headers=b.agent.h)).json()[
        "platformFeeCents"
    ] is None
    none = await client.get(f"/api/v2/jobs/{free}/payment", headers=b.agent.h)
    assert none.status_code == 404 and none.json()["code"] == "no_payment"


async def test_caps_refuse_with_what_fixes_them_and_a_retry_publishes_once_raised(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    limits = await b.owner.client.patch(
        "/me/billing/limits", json={"perTaskCapCents": 1000, "dailySpendCapCents": 1500}
    )
    assert limits.status_code == 200, limits.text
    big = await draft(client, b, 1000)  # 1100 with the fee: above the per-task cap
    r = await client.post(f"/api/v2/jobs/{big}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["code"] == "payment_not_ready"
    assert r.json()["missing"] == ["PER_TASK_CAP"]
    fix = r.json()["requirements"][0]["fixes"][0]
    assert (fix["who"], fix["method"], fix["path"]) == ("OWNER", "PATCH", "/me/billing/limits")
    # Within the per-task cap twice: the second goes past the daily cap (825 + 825 > 1500).
    first, second = await draft(client, b, 750), await draft(client, b, 750)
    assert (await client.post(f"/api/v2/jobs/{first}/publish", headers=b.agent.h)).status_code == 200
    r = await client.post(f"/api/v2/jobs/{second}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["DAILY_CAP"]
    waiting = (await client.get(f"/api/v2/jobs/{second}/payment", headers=b.agent.h)).json()
    assert waiting["status"] == "REQUIRES_ACTION" and [m["code"] for m in waiting["missing"]] == ["DAILY_CAP"]
    assert (await client.get(f"/api/v2/jobs/{second}", headers=b.agent.h)).json()["job"]["status"] == "DRAFT"
    # The owner raises the caps; the agent's retry publishes, and a second retry changes nothing.
    await b.owner.client.patch(
        "/me/billing/limits", json={"perTaskCapCents": None, "dailySpendCapCents": None}
    )
    retried = await client.post(f"/api/v2/jobs/{second}/payment/retry", headers=b.agent.h)
    assert retried.status_code == 200 and retried.json()["status"] == "RESERVED", retried.text
    again = await client.post(f"/api/v2/bounties/{second}/payment/retry", headers=b.agent.h)
    assert again.status_code == 200 and again.json() == retried.json()
    assert await money(core, b.owner.user_id) == (10_000 - 2 * 825, 2 * 825, 0)
    assert await kinds_for(core, second) == [TransactionKind.RESERVE]


async def test_the_activation_caps_bound_the_agent_alone_and_the_owner_confirms_past_them(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    async with core.uow() as uow:
        uow.session.add(
            OnboardingActivation(
                source="session",
                owner_id=b.owner.user_id,
                agent_id=b.agent.id,
                runtime_target="CODING_RUNTIME_1",
                activation_mode="NEW",
                enable_buyer=True,
                approve_seller_listing=False,
                is_test_mode=False,
                max_spend_cents_per_task=2000,
                max_spend_cents_per_day=3000,
                require_approval_over_cents=1_000_000,
                allowed_buyer_capabilities=[],
                seller_autonomy="OWNER_APPROVAL",
            )
        )
    over = await draft(client, b, 2000)  # 2200 > 2000 per task
    r = await client.post(f"/api/v2/jobs/{over}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["ACTIVATION_CAP"]
    ok = await draft(client, b, 1500)  # 1650 within both
    assert (await client.post(f"/api/v2/jobs/{ok}/publish", headers=b.agent.h)).status_code == 200
    day = await draft(client, b, 1500)  # 1650 + 1650 > 3000 per day
    r = await client.post(f"/api/v2/jobs/{day}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["ACTIVATION_CAP"]
    # The owner's confirmation lifts the agent's own caps.
    confirmed = await b.owner.client.post(f"/api/v2/owner/jobs/{over}/payment/retry")
    assert confirmed.status_code == 200 and confirmed.json()["status"] == "RESERVED", confirmed.text
    assert confirmed.json()["confirmedAt"] is not None


async def test_limit_zero_needs_the_owners_confirmation_which_publishes(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, limit=0)
    job_id = await draft(client, b, 1000)
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["CONFIRMATION"]
    fixes = r.json()["requirements"][0]["fixes"]
    assert fixes[0]["path"] == f"/api/v2/owner/jobs/{job_id}/payment/retry" and fixes[0]["who"] == "OWNER"
    # The agent's own retry is refused the same way; nothing moved.
    again = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=b.agent.h)
    assert again.status_code == 409 and again.json()["missing"] == ["CONFIRMATION"]
    assert await money(core, b.owner.user_id) == (10_000, 0, 0)
    # The agent's home names the obligation and the call that fixes it.
    home = (await client.get("/api/v2/home", headers=b.agent.h)).json()
    ob = next(o for o in home["obligations"] if o["jobId"] == job_id)
    assert ob["kind"] == "PAYMENT_REQUIRED" and ob["path"] == f"/api/v2/owner/jobs/{job_id}/payment/retry"
    assert "CONFIRMATION" in ob["description"]
    # The owner confirms: reserved and published.
    ok = await b.owner.client.post(f"/api/v2/owner/jobs/{job_id}/payment/retry")
    assert ok.status_code == 200 and ok.json()["status"] == "RESERVED", ok.text
    assert (await client.get(f"/api/v2/jobs/{job_id}", headers=b.agent.h)).json()["job"][
        "status"
    ] == "ADMISSION_OPEN"
    assert await money(core, b.owner.user_id) == (8_900, 1_100, 0)
    home = (await client.get("/api/v2/home", headers=b.agent.h)).json()
    assert "PAYMENT_REQUIRED" not in [o["kind"] for o in home["obligations"]]
    # The owner's publish is a confirmation too.
    other = await draft(client, b, 500)
    pub = await b.owner.client.post(f"/api/v2/owner/bounties/{other}/publish")
    assert pub.status_code == 200 and pub.json()["platformFeeCents"] == 50, pub.text


async def test_short_balance_with_auto_topup_charges_the_card_then_publishes(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=300)
    await save_card(core, b.owner, amount=500)
    job_id = await draft(client, b, 1000)  # 1100: short by 800, above the top-up amount
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert r.status_code == 200, r.text
    assert await money(core, b.owner.user_id) == (0, 1_100, 0)
    pay = (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=b.agent.h)).json()
    charge = pay["autotopupChargeId"]
    assert charge and pay["status"] == "RESERVED"
    # The payment intent's webhook (delivered twice) credits under the same key: no second credit.
    assert await deliver_payment_events(core) == await deliver_payment_events(core) == 1
    assert await money(core, b.owner.user_id) == (0, 1_100, 0)
    async with core.uow(write=False) as uow:
        topups = (
            await uow.session.scalars(
                select(LedgerTransaction).where(LedgerTransaction.processor_ref == charge)
            )
        ).all()
    assert [(t.kind, t.idempotency_key) for t in topups] == [(TransactionKind.TOPUP, f"topup:{charge}")]


async def test_a_declined_auto_topup_names_the_card_and_turns_auto_topup_off(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=0)
    await save_card(core, b.owner, card="4000000000000341")  # saves, then declines every charge
    job_id = await draft(client, b, 1000)
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["CARD_DECLINED", "BALANCE"], r.text
    assert r.json()["requirements"][0]["fixes"][0]["path"] == "/api/v2/agents/me/setup-links"
    profile = (await b.owner.client.get("/me/billing")).json()
    assert profile["autoTopupEnabled"] is False and "declined" in profile["autoTopupDisabledReason"]
    assert await money(core, b.owner.user_id) == (0, 0, 0)
    # The owner adds funds; the retry publishes without charging again.
    await fund(core, b.owner.user_id, 1100)
    ok = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=b.agent.h)
    assert ok.status_code == 200 and ok.json()["status"] == "RESERVED", ok.text


async def test_an_auto_topup_needing_authentication_waits_and_its_webhook_funds_the_retry(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=0)
    await save_card(core, b.owner, card="4000002500003155", amount=1100)
    job_id = await draft(client, b, 1000)
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["CARD_DECLINED", "BALANCE"], r.text
    charge = (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=b.agent.h)).json()[
        "autotopupChargeId"
    ]
    assert charge and await money(core, b.owner.user_id) == (0, 0, 0)
    # The owner passes the authentication; the payment intent's webhook credits the balance once.
    p = core.processor
    assert isinstance(p, SandboxProcessor)
    assert (await p.complete_action(charge)).status == "complete"
    assert await deliver_payment_events(core) == 1
    assert await money(core, b.owner.user_id) == (1100, 0, 0)
    ok = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=b.agent.h)
    assert ok.status_code == 200 and ok.json()["status"] == "RESERVED", ok.text
    assert await money(core, b.owner.user_id) == (0, 1100, 0)


async def test_nothing_submitted_by_the_deadline_releases(
    app: Any, core: Core, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    b = await buyer(app, core)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1000, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    assert (await client.post(f"/api/v2/jobs/{job_id}/applications", headers=worker.h)).status_code == 201
    assert (await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=b.agent.h)).status_code == 200
    assert await money(core, b.owner.user_id) == (8_900, 1_100, 0)
    await travel(core, hours=7)  # the worker never acknowledges nor submits; every deadline passes
    await travel(core, minutes=1)
    job = (await client.get(f"/api/v2/jobs/{job_id}", headers=b.agent.h)).json()["job"]
    assert job["status"] == "NO_AWARD"
    assert await money(core, b.owner.user_id) == (10_000, 0, 0)
    assert await kinds_for(core, job_id) == sorted([TransactionKind.RESERVE, TransactionKind.RELEASE])


async def test_no_card_and_no_funds_name_the_setup_link_and_the_topup(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=0)
    job_id = await draft(client, b, 1000)
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["CARD", "BALANCE"]
    card, balance = r.json()["requirements"]
    assert card["fixes"][0] == {
        "who": "AGENT",
        "method": "POST",
        "path": "/api/v2/agents/me/setup-links",
        "body": {"kind": "CARD"},
        "description": card["fixes"][0]["description"],
    }
    assert balance["fixes"][0]["path"] == "/me/billing/topup"
    # Funded: the agent's retry publishes.
    await fund(core, b.owner.user_id, 5000)
    ok = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=b.agent.h)
    assert ok.status_code == 200 and ok.json()["status"] == "RESERVED", ok.text


async def test_a_waiting_payment_of_a_draft_made_free_is_voided_when_it_publishes(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """The publish's one locked read says whether the job has a payment row; a free job that has one (its
    paid version's payment, waiting) still finds it and voids it, so no obligation is left behind."""
    b = await buyer(app, core, funds=0)
    job_id = await draft(client, b, 1000)
    refused = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert refused.status_code == 409 and refused.json()["code"] == "payment_not_ready"
    home = (await client.get("/api/v2/home", headers=b.agent.h)).json()
    assert [o["kind"] for o in home["obligations"] if o.get("jobId") == job_id] == ["PAYMENT_REQUIRED"]
    made_free = await client.patch(f"/api/v2/jobs/{job_id}", json={"rewardAmountCents": 0}, headers=b.agent.h)
    assert made_free.status_code == 200, made_free.text
    published = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert published.status_code == 200 and published.json()["status"] == "ADMISSION_OPEN", published.text
    home = (await client.get("/api/v2/home", headers=b.agent.h)).json()
    assert [o for o in home["obligations"] if o.get("jobId") == job_id] == []
    async with core.db.session(write=False) as s:
        status = await s.scalar(select(JobPayment.status).where(JobPayment.job_id == job_id))
    assert status == "VOID"


# --- the end of a paid job -----------------------------------------------------------------------------


async def test_award_captures_pay_to_the_worker_owner_and_the_fee_to_the_platform(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    worker_owner = await new_owner(app, core)
    worker = await new_agent(worker_owner)
    job_id = await draft(client, b, 2000, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    fees_before = await platform_fees(core)
    submission = await to_review(client, job_id, b.agent, worker)
    won = await client.post(
        f"/api/v2/jobs/{job_id}/award", json={"submissionId": submission}, headers=b.agent.h
    )
    assert won.status_code == 200, won.text
    assert await money(core, b.owner.user_id) == (10_000 - 2200, 0, 0)
    assert await money(core, worker_owner.user_id) == (0, 0, 2000)
    assert await platform_fees(core) == fees_before + 200
    pay = (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=b.agent.h)).json()
    assert pay["status"] == "CAPTURED" and pay["captureTransactionId"] and pay["workerAgentId"] == worker.id
    async with core.uow(write=False) as uow:
        txn = await uow.session.get(LedgerTransaction, pay["captureTransactionId"])
        assert txn is not None
        assert txn.meta["jobPaymentId"] == pay["id"] and txn.meta["workerAgentId"] == worker.id
    assert await kinds_for(core, job_id) == sorted([TransactionKind.RESERVE, TransactionKind.CAPTURE])


async def test_no_award_and_cancel_direct_hire_release_in_full(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1000, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    await to_review(client, job_id, b.agent, worker)
    closed = await client.post(
        f"/api/v2/jobs/{job_id}/no-award", json={"reasonCode": "NO_ACCEPTABLE_SUBMISSIONS"}, headers=b.agent.h
    )
    assert closed.status_code == 200, closed.text
    assert await money(core, b.owner.user_id) == (10_000, 0, 0)
    pay = (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=b.agent.h)).json()
    assert pay["status"] == "RELEASED" and pay["releaseTransactionId"]

    hire = await draft(client, b, 700, directHireWorkerAgentId=worker.id, participantCap=1)
    pub = await client.post(f"/api/v2/jobs/{hire}/publish", headers=b.agent.h)
    assert pub.status_code == 200 and pub.json()["status"] == "PENDING_ACCEPTANCE"
    assert await money(core, b.owner.user_id) == (10_000 - 770, 770, 0)
    cancelled = await b.owner.client.post(f"/api/v2/owner/jobs/{hire}/cancel-direct-hire")
    assert cancelled.status_code == 200, cancelled.text
    assert await money(core, b.owner.user_id) == (10_000, 0, 0)
    assert await kinds_for(core, hire) == sorted([TransactionKind.RESERVE, TransactionKind.RELEASE])


async def test_sweeper_ends_and_a_declined_direct_hire_release(
    app: Any, core: Core, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    b = await buyer(app, core)
    worker = await new_agent(await new_owner(app, core))
    nobody = await draft(client, b, 1000)
    assert (await client.post(f"/api/v2/jobs/{nobody}/publish", headers=b.agent.h)).status_code == 200
    hire = await draft(client, b, 500, directHireWorkerAgentId=worker.id, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{hire}/publish", headers=b.agent.h)).status_code == 200
    declined = await draft(client, b, 300, directHireWorkerAgentId=worker.id, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{declined}/publish", headers=b.agent.h)).status_code == 200
    assert await money(core, b.owner.user_id) == (10_000 - 1100 - 550 - 330, 1980, 0)
    offers = (await client.get("/api/v2/invitations/mine", headers=worker.h)).json()["invitations"]
    offer = next(o for o in offers if o["jobId"] == declined)
    no = await client.post(
        f"/api/v2/invitations/{offer['id']}/respond",
        json={"decision": "DECLINE", "reasonCode": "REWARD_TOO_LOW"},
        headers=worker.h,
    )
    assert no.status_code == 200, no.text
    assert await money(core, b.owner.user_id) == (10_000 - 1100 - 550, 1650, 0)
    # Admission closes with nobody (NO_AWARD) and the Direct Hire offer expires (CANCELLED).
    await travel(core, hours=1, seconds=1)
    await travel(core, minutes=1)
    statuses = {
        j: (await client.get(f"/api/v2/jobs/{j}", headers=b.agent.h)).json()["job"]["status"]
        for j in (nobody, hire)
    }
    assert statuses == {nobody: "NO_AWARD", hire: "CANCELLED"}
    assert await money(core, b.owner.user_id) == (10_000, 0, 0)
    for j in (nobody, hire, declined):
        assert (await client.get(f"/api/v2/jobs/{j}/payment", headers=b.agent.h)).json()[
            "status"
        ] == "RELEASED"


# --- isolation -----------------------------------------------------------------------------------------


async def test_another_owners_job_payment_is_404_over_key_and_session_and_both_namings(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    job_id = await draft(client, b, 1000)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    stranger = await buyer(app, core)
    for naming in ("jobs", "bounties"):
        for method, suffix in (("GET", "payment"), ("POST", "payment/retry")):
            r = await client.request(method, f"/api/v2/{naming}/{job_id}/{suffix}", headers=stranger.agent.h)
            assert r.status_code == 404 and r.json()["code"] == "job_not_found", r.text
            r = await stranger.owner.client.request(method, f"/api/v2/owner/{naming}/{job_id}/{suffix}")
            assert r.status_code == 404 and r.json()["code"] == "job_not_found", r.text
    # The owner's other agent is not the requester either (an agent sees its own jobs only).
    sibling = await new_agent(b.owner)
    assert (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=sibling.h)).status_code == 404


async def test_a_paying_requester_cannot_publish_another_owners_paid_draft(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """An agent whose last publish was paid reads a publish's job with the owner's profile and accounts
    (`payments.with_paid_reads`); pointed at another owner's paid draft, that read finds nothing: 404, and
    the other owner's draft stays a draft with no payment and no money held."""
    stranger = await buyer(app, core)
    await publish_a_paid_job(client, stranger)
    assert payments.reads_paid_with_job(Actor.agent(stranger.agent.id))
    b = await buyer(app, core)
    job_id = await draft(client, b, 1000)
    before = await money(core, b.owner.user_id)
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=stranger.agent.h)
    assert r.status_code == 404 and r.json()["code"] == "job_not_found", r.text
    assert (await client.get(f"/api/v2/jobs/{job_id}", headers=b.agent.h)).json()["job"]["status"] == "DRAFT"
    assert await money(core, b.owner.user_id) == before
    assert await kinds_for(core, job_id) == []
    async with core.db.session(write=False) as s:
        assert (await s.scalar(select(JobPayment).where(JobPayment.job_id == job_id))) is None


# --- races ---------------------------------------------------------------------------------------------


async def test_concurrent_paid_publishes_never_overdraw(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=5_500)  # room for exactly five jobs of 1100
    jobs = [await draft(client, b, 1000) for _ in range(22)]
    answers = await asyncio.gather(
        *(client.post(f"/api/v2/jobs/{j}/publish", headers=b.agent.h) for j in jobs)
    )
    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) == 5 and codes.count(409) == 17, [a.text for a in answers if a.status_code >= 500]
    assert all("BALANCE" in a.json()["missing"] for a in answers if a.status_code == 409)
    assert await money(core, b.owner.user_id) == (0, 5_500, 0)


@pytest.mark.parametrize("paid_before", [False, True], ids=["first", "after-a-paid-publish"])
async def test_concurrent_publishes_of_one_paid_job_reserve_once(
    app: Any, core: Core, client: httpx.AsyncClient, paid_before: bool
) -> None:
    """`paid_before`: the requester published a paid job before, so its publishes read the owner's profile
    with the job (PostgreSQL: `payments.with_paid_reads`), racing the payment's retries."""
    b = await buyer(app, core, funds=10_000 + (1_100 if paid_before else 0))
    if paid_before:
        await publish_a_paid_job(client, b)
    job_id = await draft(client, b, 1000)
    answers = await asyncio.gather(
        *(client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h) for _ in range(8)),
        *(b.owner.client.post(f"/api/v2/owner/jobs/{job_id}/payment/retry") for _ in range(4)),
    )
    publishes, retries = answers[:8], answers[8:]
    assert [a.status_code for a in publishes].count(200) <= 1
    assert all(a.status_code in (200, 409) for a in answers), [a.text for a in answers]
    assert all(a.json()["status"] == "RESERVED" for a in retries if a.status_code == 200)
    assert await money(core, b.owner.user_id) == (8_900, 1_100 * (1 + paid_before), 0)
    assert await kinds_for(core, job_id) == [TransactionKind.RESERVE]


async def test_concurrent_publishes_hold_the_daily_cap(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=100_000)
    await b.owner.client.patch("/me/billing/limits", json={"dailySpendCapCents": 3_300})
    jobs = [await draft(client, b, 1000) for _ in range(20)]
    answers = await asyncio.gather(
        *(client.post(f"/api/v2/jobs/{j}/publish", headers=b.agent.h) for j in jobs)
    )
    assert sorted(a.status_code for a in answers).count(200) == 3
    assert all(a.json()["missing"] == ["DAILY_CAP"] for a in answers if a.status_code == 409)
    assert await money(core, b.owner.user_id) == (100_000 - 3_300, 3_300, 0)


ONE_WRITER = "SQLite has one writer: a publish's write step holds the database until it ends"


async def test_a_publish_without_spending_caps_shares_the_profile_and_its_reserve_waits_for_the_commit(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """PostgreSQL: an owner without a daily cap or an activation's caps. A publish's write step held open
    before its commit locks neither the owner's profile against another publish nor the accounts its
    reserve moves (that reserve rides with the commit): a second publish goes through meanwhile and takes
    the money. The first's commit then finds the balance short: nothing of it is stored, and the pipeline
    is told to run the prepare step (PrepareFirst), after which the publish is refused naming the balance."""
    postgres_only(core, ONE_WRITER)
    b = await buyer(app, core, funds=2_200)  # two jobs' pay and fee
    # The owner's first paid publish makes the profile and the escrow account (a second waits for those).
    await publish_a_paid_job(client, b)
    first, second = await draft(client, b, 1000), await draft(client, b, 1000)
    with pytest.raises(PrepareFirst):
        async with core.uow() as uow:
            await jobs.publish(uow.session, core.blobs, core.settings, Actor.agent(b.agent.id), first)
            r = await asyncio.wait_for(client.post(f"/api/v2/jobs/{second}/publish", headers=b.agent.h), 10)
            assert r.status_code == 200, r.text
    assert await money(core, b.owner.user_id) == (0, 2_200, 0)
    assert await kinds_for(core, first) == [] and await kinds_for(core, second) == [TransactionKind.RESERVE]
    r = await client.post(f"/api/v2/jobs/{first}/publish", headers=b.agent.h)
    assert r.status_code == 409 and "BALANCE" in r.json()["missing"], r.text
    assert (await client.get(f"/api/v2/jobs/{first}", headers=b.agent.h)).json()["job"]["status"] == "DRAFT"


async def test_a_change_of_limits_waits_for_a_publish_sharing_the_profile(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """PostgreSQL: a publish that shares the profile's lock (no cap to add up) still holds it until it ends,
    so a daily cap set meanwhile applies to every publish after it, none of which can miss the one before."""
    postgres_only(core, ONE_WRITER)
    b = await buyer(app, core)
    # The owner's first paid publish makes the profile (a change of limits would wait for its insert).
    await publish_a_paid_job(client, b)
    job_id = await draft(client, b, 1000)
    async with core.uow() as uow:
        await jobs.publish(uow.session, core.blobs, core.settings, Actor.agent(b.agent.id), job_id)
        limits = asyncio.create_task(
            b.owner.client.patch("/me/billing/limits", json={"dailySpendCapCents": 2_500})
        )
        await asyncio.sleep(0.3)
        assert not limits.done(), "the owner's limits changed while a publish held the profile"
    assert (await asyncio.wait_for(limits, 10)).status_code == 200
    # The cap counts the publish that held the profile: 1100 + 1100 + 1100 > 2500 (without it, 2200 fits).
    r = await client.post(f"/api/v2/jobs/{await draft(client, b, 1000)}/publish", headers=b.agent.h)
    assert r.status_code == 409 and r.json()["missing"] == ["DAILY_CAP"], r.text


async def test_a_payment_made_while_a_publish_waits_for_its_job_refuses_that_publishs_commit(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """PostgreSQL: a requester whose last publish was paid has its next publish read the owner's profile with
    the job (`payments.with_paid_reads`), and that read cannot see a payment written while it waited for the
    job's lock (the prepare step of a concurrent publish of the same draft, which holds that lock). Its
    insert of a second payment then stores nothing: the commit is refused, the pipeline runs the prepare
    step, and the next attempt reserves against the payment that was made. One payment, one reserve."""
    postgres_only(core, ONE_WRITER)
    b = await buyer(app, core)
    await publish_a_paid_job(client, b)
    job_id = await draft(client, b, 1000)
    async with core.uow() as uow:
        # What the prepare step's short write does: the job locked, its waiting payment recorded.
        job = await jobs.lock(uow.session, job_id)
        await payments._open_row(uow.session, job, core.settings.platform_fee_bps)
        publish = asyncio.create_task(client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h))
        await asyncio.sleep(0.3)
        assert not publish.done(), "the publish did not wait for the job's lock"
    r = await asyncio.wait_for(publish, 10)
    assert r.status_code == 200, r.text
    async with core.db.session(write=False) as s:
        rows = list(await s.scalars(select(JobPayment).where(JobPayment.job_id == job_id)))
    assert [row.status for row in rows] == ["RESERVED"]
    assert await kinds_for(core, job_id) == [TransactionKind.RESERVE]


async def test_concurrent_award_and_no_award_leave_exactly_one_posting(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    worker_owner = await new_owner(app, core)
    worker = await new_agent(worker_owner)
    job_id = await draft(client, b, 1000, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    submission = await to_review(client, job_id, b.agent, worker)
    award, no_award = await asyncio.gather(
        client.post(f"/api/v2/jobs/{job_id}/award", json={"submissionId": submission}, headers=b.agent.h),
        b.owner.client.post(f"/api/v2/owner/jobs/{job_id}/no-award", json={"reasonCode": "OTHER"}),
    )
    assert sorted([award.status_code, no_award.status_code]) == [200, 409], (award.text, no_award.text)
    ended = await kinds_for(core, job_id)
    if award.status_code == 200:
        assert ended == sorted([TransactionKind.RESERVE, TransactionKind.CAPTURE])
        assert await money(core, worker_owner.user_id) == (0, 0, 1000)
    else:
        assert ended == sorted([TransactionKind.RESERVE, TransactionKind.RELEASE])
        assert await money(core, b.owner.user_id) == (10_000, 0, 0)


async def test_concurrent_paid_awards_of_one_payer_capture_once_each_with_gapless_documents(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """Awards of one payer's jobs at once share the payer's escrow, the payee's payable account, the
    platform's fee account and the documents' counters (on PostgreSQL the capture's accounts locked by the
    commit's statement, the counters before them, in every award alike): each captures once, each gets its
    receipt and invoice, numbered without a gap, and the books stay clean."""
    b = await buyer(app, core, funds=10_000)
    worker_owner = await new_owner(app, core)
    jobs = []
    for _ in range(6):
        job_id = await draft(client, b, 1000, participantCap=1)
        assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
        jobs.append((job_id, await to_review(client, job_id, b.agent, await new_agent(worker_owner))))
    async with core.uow(write=False) as uow:
        before = set((await uow.session.scalars(select(CommercialDocument.number))).all())
    answers = await asyncio.gather(
        *(
            client.post(f"/api/v2/jobs/{job_id}/award", json={"submissionId": sub}, headers=b.agent.h)
            for job_id, sub in jobs
        )
    )
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert await money(core, b.owner.user_id) == (10_000 - 6 * 1_100, 0, 0)
    assert await money(core, worker_owner.user_id) == (0, 0, 6 * 1_000)
    for job_id, _ in jobs:
        assert await kinds_for(core, job_id) == sorted([TransactionKind.RESERVE, TransactionKind.CAPTURE])
    async with core.uow(write=False) as uow:
        issued = (
            await uow.session.execute(
                select(CommercialDocument.kind, CommercialDocument.number).where(
                    CommercialDocument.number.not_in(before)
                )
            )
        ).all()
    for kind in (DocumentKind.RECEIPT, DocumentKind.INVOICE):
        serials = sorted(int(number.rsplit("-", 1)[1]) for k, number in issued if k == kind)
        assert len(serials) == 6 and serials == list(range(serials[0], serials[0] + 6)), (kind, serials)


async def test_a_retried_request_with_the_same_idempotency_key_reserves_once(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, limit=0)
    job_id = await draft(client, b, 1000)
    key = {"Idempotency-Key": uuid.uuid4().hex}
    answers = await asyncio.gather(
        *(b.owner.client.post(f"/api/v2/owner/jobs/{job_id}/payment/retry", headers=key) for _ in range(4))
    )
    ok = [a for a in answers if a.status_code == 200]
    assert ok and all(a.json() == ok[0].json() for a in ok), [a.text for a in answers]
    assert all(a.status_code in (200, 409) for a in answers)  # 409: the same key still in flight
    replay = await b.owner.client.post(f"/api/v2/owner/jobs/{job_id}/payment/retry", headers=key)
    assert replay.status_code == 200 and replay.json() == ok[0].json()
    assert await money(core, b.owner.user_id) == (8_900, 1_100, 0)
    assert await kinds_for(core, job_id) == [TransactionKind.RESERVE]


# --- MCP -----------------------------------------------------------------------------------------------


async def test_mcp_payment_tools_and_home_obligations(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=0)
    job_id = await draft(client, b, 1000)
    async with serving(core) as url, http_client(url, b.agent.key) as mcp:
        refused = await call_error(mcp, "publish_job", job_id=job_id)
        assert refused["code"] == "payment_not_ready" and refused["missing"] == ["CARD", "BALANCE"]
        waiting = await call(mcp, "job_payment", job_id=job_id)
        assert waiting["status"] == "REQUIRES_ACTION" and [m["code"] for m in waiting["missing"]] == [
            "CARD",
            "BALANCE",
        ]
        home = await call(mcp, "home")
        ob = next(o for o in home["obligations"] if o["jobId"] == job_id)
        # Over MCP the obligation names the tool and its arguments (test_guidance.py has the HTTP form).
        assert ob["kind"] == "PAYMENT_REQUIRED" and ob["tool"] == "setup_link_create"
        assert ob["arguments"] == {"kind": "CARD"}
        still = await call_error(mcp, "retry_job_payment", job_id=job_id)
        assert still["code"] == "payment_not_ready"
        await fund(core, b.owner.user_id, 2000)
        done = await call(mcp, "retry_job_payment", job_id=job_id)
        assert done["status"] == "RESERVED" and done["totalCents"] == 1100
        assert await call(mcp, "job_payment", job_id=job_id) == done
        home = await call(mcp, "home")
        assert "PAYMENT_REQUIRED" not in [o["kind"] for o in home["obligations"]]
        free = await draft(client, b, 0)
        assert (await call_error(mcp, "job_payment", job_id=free))["code"] == "no_payment"
