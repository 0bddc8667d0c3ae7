"""Issue 11's money, end to end over HTTP on SQLite and PostgreSQL with the sandbox processor: owners act in
their browsers (the API with a session, the processor's hosted pages like a browser), agents with their keys,
and the processor's webhook events reach `/webhooks/processor` only through the background pass
(`worker.run_once`), as in production. The walk: card, top-up, a paid job published by an agent within its
limit, a worker of another owner admitted and awarded, the payout waiting for an account until the worker's
owner onboards through the agent's setup link, then paid; statements and documents add up to the cent. Then
the refused paths, each asserting what the caller sees and that no money moved. The books verify after each
test."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from callboard_core.billing.models import TopUp, TopUpStatus
from callboard_core.container import Core
from callboard_core.ledger import accounts
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import AccountKind, LedgerTransaction
from callboard_core.processor.sandbox import CARD_DECLINED, CARD_DECLINED_AFTER_ATTACH, CARD_OK
from tests.conftest import BASE_URL, new_client
from tests.jobs_helpers import AgentHandle, Owner, job_body, new_agent, new_owner, to_review
from tests.payments_helpers import RETURN_URL, add_card, start_topup, submit_page, walk, worker_pass
from tests.payout_helpers import onboard_through_page, sandbox_count
from tests.test_onboarding import activate, onboarded

pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


# --- what an owner and an agent see --------------------------------------------------------------------


async def billing(owner: Owner) -> dict[str, Any]:
    r = await owner.client.get("/me/billing")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def money(owner: Owner) -> tuple[int, int, int]:
    """(balance, available, reserved) as the owner's billing page shows them."""
    b = await billing(owner)
    return b["balanceCents"], b["availableCents"], b["reservedCents"]


async def statement(owner: Owner) -> list[dict[str, Any]]:
    """Every entry of the owner's statement, two per page (the cursor is walked)."""
    return await walk(owner.client, "/me/billing/statement", "entries", 2)


def by_account(entries: list[dict[str, Any]]) -> dict[str, int]:
    sums: Counter[str] = Counter()
    for e in entries:
        sums[e["metadata"]["account"]] += e["amountCents"]
    return dict(sums)


async def documents(owner: Owner) -> list[dict[str, Any]]:
    return await walk(owner.client, "/me/billing/documents", "documents", 2)


async def platform_fees(core: Core) -> int:
    async with core.uow() as uow:
        return (await accounts.platform(uow.session, AccountKind.PLATFORM_FEES)).balance_cents


async def postings(core: Core) -> int:
    """Ledger transactions of any kind: "no money moved" means this did not change."""
    async with core.uow(write=False) as uow:
        return int(await uow.session.scalar(select(func.count()).select_from(LedgerTransaction)) or 0)


async def top_up(app: Any, core: Core, owner: Owner, cents: int) -> None:
    """The owner pays a hosted checkout; the background pass brings the processor's word."""
    started = await start_topup(owner, cents)
    paid = await submit_page(app, started["url"], CARD_OK)
    assert paid.status_code == 303 and paid.headers["location"] == RETURN_URL, paid.text
    await worker_pass(app, core)


async def set_limit(owner: Owner, agent: AgentHandle, cents: int) -> None:
    r = await owner.client.patch(
        f"/api/v2/agents/dashboard/{agent.id}/policy", json={"autoPublishLimitCents": cents}
    )
    assert r.status_code == 200 and r.json()["autoPublishLimitCents"] == cents, r.text


async def buyer(app: Any, core: Core, *, limit: int = 10_000, funds: int = 0) -> tuple[Owner, AgentHandle]:
    """An owner whose requester agent may publish up to `limit` cents alone, topped up with `funds`."""
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    await set_limit(owner, agent, limit)
    if funds:
        await top_up(app, core, owner, funds)
    return owner, agent


async def draft(client: httpx.AsyncClient, agent: AgentHandle, reward: int, **overrides: Any) -> str:
    r = await client.post(
        "/api/v2/jobs", json=job_body(rewardAmountCents=reward, **overrides), headers=agent.h
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def refused(
    client: httpx.AsyncClient, agent: AgentHandle, job_id: str, missing: list[str]
) -> list[dict[str, Any]]:
    """The agent's publish is 409 payment_not_ready naming exactly `missing`; the job stays a draft and its
    payment read says the same. Returns the requirements (each with its fixes)."""
    r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=agent.h)
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["code"] == "payment_not_ready" and body["missing"] == missing, body
    assert [req["code"] for req in body["requirements"]] == missing
    payment = (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=agent.h)).json()
    assert payment["status"] == "REQUIRES_ACTION" and [m["code"] for m in payment["missing"]] == missing
    job = (await client.get(f"/api/v2/jobs/{job_id}", headers=agent.h)).json()["job"]
    assert job["status"] == "DRAFT"
    return list(body["requirements"])


def fixes(requirement: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(f["who"], f["method"], f["path"]) for f in requirement["fixes"]]


# --- the walk --------------------------------------------------------------------------------------------


async def test_a_paid_job_from_card_to_payout_adds_up_to_the_cent(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    buyer_agent, worker = await new_agent(requester), await new_agent(worker_owner)
    fees_before = await platform_fees(core)

    # The requester's owner saves a card on the processor's hosted page.
    setup = await requester.client.post("/me/billing/payment-methods")
    assert setup.status_code == 200, setup.text
    saved = await submit_page(app, setup.json()["url"], "4242 4242 4242 4242")
    assert saved.status_code == 303, saved.text
    await worker_pass(app, core)
    [card] = (await billing(requester))["paymentMethods"]
    assert (card["last4"], card["isDefault"]) == ("4242", True)

    # Tops up 50.00 through the hosted checkout; the balance grows when the processor's event arrives.
    started = await start_topup(requester, 5000)
    paid = await submit_page(app, started["url"], CARD_OK)
    assert paid.status_code == 303 and paid.headers["location"] == RETURN_URL
    assert await money(requester) == (0, 0, 0)
    await worker_pass(app, core)
    assert await money(requester) == (5000, 5000, 0)

    # The agent may publish up to 25.00 alone; it publishes a 20.00 job (+ 2.00 fee) with its key.
    await set_limit(requester, buyer_agent, 2500)
    job_id = await draft(client, buyer_agent, 2000, participantCap=1)
    published = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=buyer_agent.h)
    assert published.status_code == 200, published.text
    assert (published.json()["status"], published.json()["platformFeeCents"]) == ("ADMISSION_OPEN", 200)
    assert await money(requester) == (5000, 2800, 2200)

    # A worker of another owner is admitted, acknowledges and submits; the requester awards.
    submission = await to_review(client, job_id, buyer_agent, worker)
    won = await client.post(
        f"/api/v2/jobs/{job_id}/award", json={"submissionId": submission}, headers=buyer_agent.h
    )
    assert won.status_code == 200, won.text
    payment = (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=buyer_agent.h)).json()
    assert (payment["status"], payment["totalCents"], payment["workerAgentId"]) == (
        "CAPTURED",
        2200,
        worker.id,
    )
    assert await money(requester) == (2800, 2800, 0)
    assert await platform_fees(core) == fees_before + 200

    # The worker's owner has no payout account: the payout waits, and a pass does not send it.
    await worker_pass(app, core)
    status = (await worker_owner.client.get("/me/processor/status")).json()
    assert status["processorPayoutsEnabled"] is False
    [waiting] = status["payouts"]
    assert (waiting["status"], waiting["amountCents"], waiting["jobId"]) == (
        "WAITING_FOR_ACCOUNT",
        2000,
        job_id,
    )
    async with new_client(app) as c:
        own = (await c.get(f"/agents/{worker.id}/processor/status", headers=worker.h)).json()
    assert [(p["id"], p["status"]) for p in own["payouts"]] == [(waiting["id"], "WAITING_FOR_ACCOUNT")]
    assert await sandbox_count(core, "transfer") == 0

    # The worker agent asks for a payout setup link; its owner opens it, starts it, onboards.
    link = await client.post("/api/v2/agents/me/setup-links", json={"kind": "PAYOUT"}, headers=worker.h)
    assert link.status_code == 201, link.text
    page_path = link.json()["url"].removeprefix(BASE_URL)
    assert page_path.startswith("/setup/")
    shown = await worker_owner.client.get(page_path)
    assert shown.status_code == 200 and "<form" in shown.text
    went = await worker_owner.client.post(page_path)
    assert went.status_code == 303 and "/sandbox/processor/onboarding/" in went.headers["location"]
    await onboard_through_page(worker_owner.client, went.headers["location"])
    polled = await client.get(f"/api/v2/agents/me/setup-links/{link.json()['id']}", headers=worker.h)
    assert polled.json()["status"] == "STARTED"  # until the processor's event arrives

    # The pass delivers account.updated: the link completes and the payout is due; the next pass pays it.
    await worker_pass(app, core)
    polled = await client.get(f"/api/v2/agents/me/setup-links/{link.json()['id']}", headers=worker.h)
    assert polled.json()["status"] == "COMPLETED" and polled.json()["completedAt"]
    await worker_pass(app, core)
    status = (await worker_owner.client.get("/me/processor/status")).json()
    assert status["processorPayoutsEnabled"] is True
    [payout] = status["payouts"]
    assert (payout["status"], payout["amountCents"], payout["attempts"]) == ("PAID", 2000, 1)
    assert payout["processorTransferId"].startswith("tr_")
    await worker_pass(app, core)  # another pass pays nothing twice
    assert await sandbox_count(core, "transfer") == 1

    # The requester's statement: the top-up, the escrow and its capture; it sums to the balance.
    req_entries = await statement(requester)
    assert sorted((e["kind"], e["metadata"]["account"], e["amountCents"]) for e in req_entries) == [
        ("CAPTURE", "RESERVED", -2200),
        ("RESERVE", "AVAILABLE", -2200),
        ("RESERVE", "RESERVED", 2200),
        ("TOPUP", "AVAILABLE", 5000),
    ]
    assert by_account(req_entries) == {"AVAILABLE": 2800, "RESERVED": 0}
    # The worker owner's: earned, sent, settled; nothing left payable or in transit; 20.00 paid out.
    work_entries = await statement(worker_owner)
    assert sorted((e["kind"], e["metadata"]["account"], e["amountCents"]) for e in work_entries) == [
        ("CAPTURE", "PAYABLE", 2000),
        ("PAYOUT", "PAYABLE", -2000),
        ("PAYOUT", "PAYOUT_IN_TRANSIT", 2000),
        ("PAYOUT_SETTLED", "PAYOUT_IN_TRANSIT", -2000),
    ]
    assert by_account(work_entries) == {"PAYABLE": 0, "PAYOUT_IN_TRANSIT": 0}
    paid_out = -sum(e["amountCents"] for e in work_entries if e["kind"] == "PAYOUT_SETTLED")
    assert paid_out == payout["amountCents"] == 2000
    async with core.uow(write=False) as uow:
        for user, (available, reserved, payable, transit) in (
            (requester.user_id, (2800, 0, 0, 0)),
            (worker_owner.user_id, (0, 0, 0, 0)),
        ):
            b = await ledger.balances(uow.session, user)
            assert (b.available_cents, b.reserved_cents, b.payable_cents, b.payout_in_transit_cents) == (
                available,
                reserved,
                payable,
                transit,
            )
    # What came in (5000) = what the requester still holds (2800) + paid out (2000) + platform fees (200).
    assert 2800 + paid_out + (await platform_fees(core) - fees_before) == 5000

    # The requester's documents: the top-up's receipt, the job payment's receipt and the fee invoice.
    docs = await documents(requester)
    assert sorted((d["kind"], d["sourceType"], d["totalCents"]) for d in docs) == [
        ("INVOICE", "JOB_PAYMENT", 200),
        ("RECEIPT", "JOB_PAYMENT", 2200),
        ("RECEIPT", "TOPUP", 5000),
    ]
    receipts = {d["sourceType"]: d for d in docs if d["kind"] == "RECEIPT"}
    invoice = next(d for d in docs if d["kind"] == "INVOICE")
    assert receipts["TOPUP"]["processorRef"] == next(
        e["processorRef"] for e in req_entries if e["kind"] == "TOPUP"
    )
    assert receipts["JOB_PAYMENT"]["bountyId"] == invoice["bountyId"] == job_id
    assert receipts["JOB_PAYMENT"]["bountyPaymentId"] == payment["id"]
    assert [(li["kind"], li["amountCents"]) for li in receipts["JOB_PAYMENT"]["lineItems"]] == [
        ("JOB_PAY", 2000),
        ("PLATFORM_FEE", 200),
    ]
    assert receipts["JOB_PAYMENT"]["metadata"]["invoiceNumber"] == invoice["number"]
    # The award's documents name the requester's owner, as the top-up's receipt does.
    payer = (receipts["TOPUP"]["counterpartyName"], receipts["TOPUP"]["counterpartyEmail"])
    assert payer[1] and all((d["counterpartyName"], d["counterpartyEmail"]) == payer for d in docs)
    # Each document's total is its entry on the statement (the invoice is the capture's fee part).
    entry = {e["id"]: e["amountCents"] for e in req_entries}
    assert entry[receipts["TOPUP"]["ledgerEntryId"]] == 5000
    assert entry[receipts["JOB_PAYMENT"]["ledgerEntryId"]] == -2200
    assert invoice["totalCents"] == payment["feeCents"] == 200
    # The worker's owner is not billed for earnings.
    assert await documents(worker_owner) == []

    # The requester agent's key sees its owner's balance and documents as the owner does.
    assert (await client.get("/me/billing/api-key", headers=buyer_agent.h)).json() == await billing(requester)
    by_key = await client.get("/me/billing/documents/api-key", headers=buyer_agent.h)
    assert by_key.json() == (await requester.client.get("/me/billing/documents")).json()


# --- refused: cards --------------------------------------------------------------------------------------


async def test_a_declined_card_saves_nothing_pays_nothing_and_the_publish_names_the_fixes(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner, agent = await buyer(app, core)

    # On the card page: declined, shown again; nothing saved once the events are in.
    url = (await owner.client.post("/me/billing/payment-methods")).json()["url"]
    declined = await submit_page(app, url, CARD_DECLINED)
    assert declined.status_code == 402 and "Your card was declined" in declined.text
    # At a top-up's checkout: declined; the top-up failed, the balance is untouched.
    started = await start_topup(owner, 3000)
    declined = await submit_page(app, started["url"], CARD_DECLINED)
    assert declined.status_code == 402 and "declined" in declined.text
    await worker_pass(app, core)
    async with core.uow(write=False) as uow:
        row = await uow.session.get(TopUp, started["topupId"])
    assert row is not None and (row.status, row.failure_code) == (TopUpStatus.FAILED, "card_declined")
    profile = await billing(owner)
    assert profile["paymentMethods"] == [] and profile["processorDefaultPaymentMethodId"] is None
    assert await money(owner) == (0, 0, 0)
    assert await statement(owner) == [] and await documents(owner) == []
    assert await postings(core) == 0

    # The agent's paid publish says what is missing and who fixes it.
    job_id = await draft(client, agent, 1000)
    card, balance = await refused(client, agent, job_id, ["CARD", "BALANCE"])
    assert fixes(card) == [
        ("AGENT", "POST", "/api/v2/agents/me/setup-links"),
        ("OWNER", "POST", "/me/billing/payment-methods"),
    ]
    assert card["fixes"][0]["body"] == {"kind": "CARD"}
    assert fixes(balance) == [
        ("OWNER", "POST", "/me/billing/topup"),
        ("AGENT", "POST", f"/api/v2/jobs/{job_id}/payment/retry"),
    ]
    assert "1100 cents" in balance["fixes"][0]["description"]
    assert await postings(core) == 0


async def test_an_auto_top_up_declined_at_publish_turns_auto_top_up_off_and_moves_nothing(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner, agent = await buyer(app, core)
    await add_card(owner, app, core, CARD_DECLINED_AFTER_ATTACH)  # saves, declines every charge
    on = await owner.client.patch(
        "/me/billing/autotopup", json={"enabled": True, "thresholdCents": 0, "amountCents": 2000}
    )
    assert on.status_code == 200 and on.json()["autoTopupEnabled"] is True, on.text

    job_id = await draft(client, agent, 1000)
    declined, _ = await refused(client, agent, job_id, ["CARD_DECLINED", "BALANCE"])
    assert fixes(declined)[1] == ("OWNER", "POST", "/me/billing/payment-methods")
    await worker_pass(app, core)  # payment_intent.payment_failed changes nothing more
    after = await billing(owner)
    assert after["autoTopupEnabled"] is False and "card_declined" in after["autoTopupDisabledReason"]
    assert await money(owner) == (0, 0, 0) and await postings(core) == 0
    # The retry does not charge the card again: auto top-up is off, so the card is no longer asked.
    again = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=agent.h)
    assert again.status_code == 409 and again.json()["missing"] == ["CARD_DECLINED", "BALANCE"]
    assert await sandbox_count(core, "payment_intent") == 1


# --- refused: limits and caps --------------------------------------------------------------------------


async def test_over_the_per_task_cap_then_over_the_daily_cap(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner, agent = await buyer(app, core, limit=100_000, funds=10_000)
    caps = await owner.client.patch(
        "/me/billing/limits", json={"perTaskCapCents": 1500, "dailySpendCapCents": 2000}
    )
    assert caps.status_code == 200, caps.text
    before = await postings(core)

    big = await draft(client, agent, 1400)  # 1540 with the fee: above the per-task cap
    [cap] = await refused(client, agent, big, ["PER_TASK_CAP"])
    assert fixes(cap) == [
        ("OWNER", "PATCH", "/me/billing/limits"),
        ("AGENT", "POST", f"/api/v2/jobs/{big}/payment/retry"),
    ]
    first, second = await draft(client, agent, 1000), await draft(client, agent, 1000)
    assert (await client.post(f"/api/v2/jobs/{first}/publish", headers=agent.h)).status_code == 200
    [daily] = await refused(client, agent, second, ["DAILY_CAP"])  # 1100 + 1100 > 2000
    assert "24 hours" in daily["message"]
    assert await postings(core) == before + 1  # the first job's reserve only
    assert await money(owner) == (10_000, 8_900, 1_100)

    # The owner clears the caps; the agent's retries publish both.
    await owner.client.patch("/me/billing/limits", json={"perTaskCapCents": None, "dailySpendCapCents": None})
    for job_id in (big, second):
        ok = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=agent.h)
        assert ok.status_code == 200 and ok.json()["status"] == "RESERVED", ok.text
    assert await money(owner) == (10_000, 10_000 - 1540 - 2200, 1540 + 2200)


async def test_over_the_activation_caps_until_the_owner_confirms(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """The agent was activated (onboarding session, over HTTP) with spend caps of 10.00 a task and 15.00 a
    day and may publish up to 1000.00 alone: the activation caps are what stop it."""
    owner = await new_owner(app, core)
    _, session_id = await onboarded(owner, client)
    done = await activate(
        owner,
        session_id,
        enableBuyer=True,
        maxSpendCentsPerTask=1000,
        maxSpendCentsPerDay=1500,
        requireApprovalOverCents=100_000,
        allowedBuyerCapabilities=["python"],
    )
    agent = AgentHandle(done["activation"]["agentId"], done["key"], owner)
    await top_up(app, core, owner, 5000)

    over = await draft(client, agent, 1000)  # 1100 > 1000 a task
    [cap] = await refused(client, agent, over, ["ACTIVATION_CAP"])
    assert fixes(cap) == [("OWNER", "POST", f"/api/v2/owner/jobs/{over}/payment/retry")]
    within = await draft(client, agent, 800)  # 880: within both
    assert (await client.post(f"/api/v2/jobs/{within}/publish", headers=agent.h)).status_code == 200
    day = await draft(client, agent, 800)  # 880 + 880 > 1500 a day
    await refused(client, agent, day, ["ACTIVATION_CAP"])
    assert await money(owner) == (5000, 5000 - 880, 880)

    confirmed = await owner.client.post(f"/api/v2/owner/jobs/{over}/payment/retry")
    assert confirmed.status_code == 200 and confirmed.json()["status"] == "RESERVED", confirmed.text
    assert await money(owner) == (5000, 5000 - 880 - 1100, 880 + 1100)


async def test_limit_zero_needs_confirmation_and_the_owners_confirmation_publishes(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner, agent = await buyer(app, core, limit=0, funds=2000)
    before = await postings(core)

    job_id = await draft(client, agent, 1000)
    [confirm] = await refused(client, agent, job_id, ["CONFIRMATION"])
    assert fixes(confirm) == [
        ("OWNER", "POST", f"/api/v2/owner/jobs/{job_id}/payment/retry"),
        ("OWNER", "PATCH", f"/api/v2/agents/dashboard/{agent.id}/policy"),
    ]
    assert confirm["fixes"][1]["body"] == {"autoPublishLimitCents": 1100}
    assert await postings(core) == before and await money(owner) == (2000, 2000, 0)

    ok = await owner.client.post(f"/api/v2/owner/jobs/{job_id}/payment/retry")
    assert ok.status_code == 200 and ok.json()["status"] == "RESERVED" and ok.json()["confirmedAt"], ok.text
    job = (await client.get(f"/api/v2/jobs/{job_id}", headers=agent.h)).json()["job"]
    assert job["status"] == "ADMISSION_OPEN"
    assert await money(owner) == (2000, 900, 1100)


# --- refunds ---------------------------------------------------------------------------------------------


async def test_no_award_refunds_pay_and_fee_with_a_credit_note(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner, agent = await buyer(app, core, funds=3000)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, agent, 1500, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=agent.h)).status_code == 200
    assert await money(owner) == (3000, 1350, 1650)
    await to_review(client, job_id, agent, worker)

    closed = await client.post(
        f"/api/v2/jobs/{job_id}/no-award", json={"reasonCode": "NO_ACCEPTABLE_SUBMISSIONS"}, headers=agent.h
    )
    assert closed.status_code == 200, closed.text
    assert await money(owner) == (3000, 3000, 0)
    payment = (await client.get(f"/api/v2/jobs/{job_id}/payment", headers=agent.h)).json()
    assert payment["status"] == "RELEASED"
    [note] = [d for d in await documents(owner) if d["kind"] == "CREDIT_NOTE"]
    assert (note["sourceType"], note["totalCents"], note["refundStatus"]) == ("JOB_RELEASE", 1650, "REFUNDED")
    assert [(li["kind"], li["amountCents"]) for li in note["lineItems"]] == [
        ("JOB_PAY", 1500),
        ("PLATFORM_FEE", 150),
    ]
    assert note["bountyId"] == job_id and note["bountyPaymentId"] == payment["id"]
    assert by_account(await statement(owner)) == {"AVAILABLE": 3000, "RESERVED": 0}


async def test_cancelling_a_direct_hire_refunds_in_full(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner, agent = await buyer(app, core, funds=1000)
    worker = await new_agent(await new_owner(app, core))
    hire = await draft(client, agent, 700, directHireWorkerAgentId=worker.id, participantCap=1)
    published = await client.post(f"/api/v2/jobs/{hire}/publish", headers=agent.h)
    assert published.status_code == 200 and published.json()["status"] == "PENDING_ACCEPTANCE"
    assert await money(owner) == (1000, 230, 770)

    cancelled = await owner.client.post(f"/api/v2/owner/jobs/{hire}/cancel-direct-hire")
    assert cancelled.status_code == 200, cancelled.text
    assert await money(owner) == (1000, 1000, 0)
    [note] = [d for d in await documents(owner) if d["kind"] == "CREDIT_NOTE"]
    assert (note["totalCents"], note["bountyId"]) == (770, hire)
    # A second cancel is refused and moves nothing.
    again = await owner.client.post(f"/api/v2/owner/jobs/{hire}/cancel-direct-hire")
    assert again.status_code == 409
    assert await money(owner) == (1000, 1000, 0)


# --- retry ---------------------------------------------------------------------------------------------


async def test_a_publish_refused_for_funds_publishes_on_retry_after_a_top_up_and_the_retry_replays(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    owner, agent = await buyer(app, core)
    job_id = await draft(client, agent, 1000)
    await refused(client, agent, job_id, ["CARD", "BALANCE"])
    assert await postings(core) == 0

    await top_up(app, core, owner, 1500)
    key = {"Idempotency-Key": uuid.uuid4().hex, **agent.h}
    retried = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=key)
    assert retried.status_code == 200 and retried.json()["status"] == "RESERVED", retried.text
    assert retried.json()["missing"] == [] and retried.json()["totalCents"] == 1100
    replay = await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=key)
    assert replay.status_code == 200 and replay.headers.get("Idempotent-Replayed") == "true"
    assert replay.json() == retried.json()
    job = (await client.get(f"/api/v2/jobs/{job_id}", headers=agent.h)).json()["job"]
    assert job["status"] == "ADMISSION_OPEN"
    assert await money(owner) == (1500, 400, 1100)
    kinds = sorted(e["kind"] for e in await statement(owner))
    assert kinds == ["RESERVE", "RESERVE", "TOPUP"]  # one reserve (two entries), once
