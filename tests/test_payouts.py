"""Payout accounts and the payouts of awards, over HTTP with the sandbox processor and its webhook events
handed to the real handlers, on SQLite and PostgreSQL. After every test the books must verify clean."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from callboard_core import clock, metrics
from callboard_core.agent_notifications.models import AgentNotification
from callboard_core.bus import InTransaction
from callboard_core.container import Core
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerTransaction, TransactionKind
from callboard_core.payouts import service as payouts
from callboard_core.payouts.events import BankPayoutFailed, PayoutFailed
from callboard_core.payouts.models import PayoutAccount
from callboard_core.worker import run_once
from tests.conftest import listening, new_client
from tests.jobs_helpers import AgentHandle, new_agent, new_owner
from tests.mcp_helpers import call, http_client, serving
from tests.payments_helpers import buyer, draft, publish_and_award
from tests.payout_helpers import (
    RETURN,
    award,
    balances,
    count_kind,
    deliver,
    handle,
    onboard_owner,
    onboard_through_page,
    onboard_through_setup_link,
    payout_rows,
    sandbox,
    sandbox_count,
)

pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


async def onboard_agent(app: Any, agent: AgentHandle, core: Core) -> str:
    """The agent's own payout account (its key asks for the link; its owner completes the page)."""
    async with new_client(app) as c:
        link = await c.post(f"/agents/{agent.id}/processor/onboarding-link", headers=agent.h)
    assert link.status_code == 200, link.text
    await onboard_through_setup_link(agent.owner.client, link.json()["url"])
    await deliver(core)
    return str(link.json()["processorAccountId"])


# --- payout accounts ---------------------------------------------------------------------------------


async def test_owner_onboarding_status_refresh_and_repeated_events(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    before = await owner.client.get("/me/processor/status")
    assert before.status_code == 200, before.text
    assert before.json() == {
        "agentId": None,
        "processorAccountId": None,
        "processorOnboardingComplete": False,
        "processorChargesEnabled": False,
        "processorPayoutsEnabled": False,
        "bankPayoutError": None,
        "bankPayoutFailedAt": None,
        "payouts": [],
    }
    first = await owner.client.post("/me/processor/onboarding-link", json={"returnUrl": RETURN})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["processorAccountId"].startswith("acct_") and body["url"].startswith("http")
    assert body["expiresAt"] and body.get("agentId") is None
    # No body at all works too, and asking again keeps the one account.
    again = await owner.client.post("/me/processor/onboarding-link")
    assert again.status_code == 200, again.text
    assert again.json()["processorAccountId"] == body["processorAccountId"]
    assert await sandbox_count(core, "account") == 1

    pending = (await owner.client.get("/me/processor/status")).json()
    assert pending["processorAccountId"] == body["processorAccountId"]
    assert not pending["processorOnboardingComplete"] and not pending["processorPayoutsEnabled"]

    back = await onboard_through_page(owner.client, body["url"])
    assert back.headers["location"] == RETURN
    # Before any webhook: the status read asks the processor and persists what it says.
    refreshed = (await owner.client.get("/me/processor/status")).json()
    assert refreshed["processorOnboardingComplete"] and refreshed["processorPayoutsEnabled"]
    async with core.uow(write=False) as uow:
        row = await uow.session.scalar(select(PayoutAccount).where(PayoutAccount.user_id == owner.user_id))
        assert row is not None and row.payouts_enabled and row.details_submitted

    # The account.updated event, delivered twice, changes nothing more; an older "not enabled" event
    # arriving late does not undo the newer fact.
    (updated,) = [e for e in await deliver(core) if e.type == "account.updated"]
    await handle(core, updated)
    stale = type(updated)(
        id="evt_stale",
        type="account.updated",
        data={**updated.data, "payouts_enabled": False, "details_submitted": False},
        created=updated.created - timedelta(minutes=5),
        account=updated.account,
    )
    await handle(core, stale)
    async with core.uow(write=False) as uow:
        row = await uow.session.scalar(select(PayoutAccount).where(PayoutAccount.user_id == owner.user_id))
        assert row is not None and row.payouts_enabled


async def test_the_account_updated_event_alone_enables_payouts(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    link = (await owner.client.post("/me/processor/onboarding-link")).json()
    await sandbox(core).complete_onboarding(link["processorAccountId"])
    types = [e.type for e in await deliver(core)]
    assert "account.updated" in types
    async with core.uow(write=False) as uow:
        row = await uow.session.scalar(select(PayoutAccount).where(PayoutAccount.user_id == owner.user_id))
        assert row is not None and row.payouts_enabled and row.charges_enabled and row.details_submitted


async def test_per_agent_accounts_and_who_may_name_them(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    sibling = await new_agent(owner)
    stranger = await new_agent(await new_owner(app, core))
    async with new_client(app) as c:
        own = await c.post(f"/agents/{agent.id}/processor/onboarding-link", json={}, headers=agent.h)
        assert own.status_code == 200, own.text
        assert own.json()["agentId"] == agent.id
        # An agent's key names only its own id: its sibling's and a stranger's are 404.
        for other in (sibling.id, stranger.id, "agt_doesnotexist"):
            r = await c.post(f"/agents/{other}/processor/onboarding-link", headers=agent.h)
            assert r.status_code == 404, r.text
            r = await c.get(f"/agents/{other}/processor/status", headers=agent.h)
            assert r.status_code == 404, r.text
    # The owner's dashboard mirror reaches the same account; another owner's agent is 404.
    mirror = await owner.client.post(f"/agents/dashboard/{agent.id}/processor/onboarding-link")
    assert mirror.status_code == 200, mirror.text
    assert mirror.json()["processorAccountId"] == own.json()["processorAccountId"]
    assert (await owner.client.get(f"/agents/dashboard/{stranger.id}/processor/status")).status_code == 404
    assert (
        await owner.client.post(f"/agents/dashboard/{stranger.id}/processor/onboarding-link")
    ).status_code == 404
    # The agent's account is not the owner's.
    mine = (await owner.client.get("/me/processor/status")).json()
    assert mine["processorAccountId"] is None

    await onboard_through_setup_link(owner.client, own.json()["url"])
    await deliver(core)
    async with new_client(app) as c:
        status = await c.get(f"/agents/{agent.id}/processor/status", headers=agent.h)
        assert status.status_code == 200, status.text
        assert status.json()["agentId"] == agent.id and status.json()["processorPayoutsEnabled"] is True
        me = (await c.get("/api/v2/agents/me", headers=agent.h)).json()
    # The agent's record carries its account's flags (the spec's Agent fields).
    assert me["processorAccountId"] == own.json()["processorAccountId"]
    assert me["processorPayoutsEnabled"] is True and me["processorOnboardingComplete"] is True
    dash = await owner.client.get(f"/agents/dashboard/{agent.id}/processor/status")
    assert dash.json()["processorPayoutsEnabled"] is True


# --- payouts -----------------------------------------------------------------------------------------


async def test_a_payout_waits_for_an_account_then_pays(app: Any, core: Core) -> None:
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    worker = await new_agent(worker_owner)
    job_id = await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=1_000, fee=100)

    (payout,) = await payout_rows(core, worker_owner.user_id)
    assert payout.status == "WAITING_FOR_ACCOUNT" and payout.amount_cents == 1_000
    assert (
        payout.job_id == job_id
        and payout.worker_agent_id == worker.id
        and payout.job_payment_id == "jpy_test"
    )
    await run_once(core, housekeeping=False)
    assert (await payout_rows(core, worker_owner.user_id))[0].status == "WAITING_FOR_ACCOUNT"
    shown = (await worker_owner.client.get("/me/processor/status")).json()["payouts"]
    assert [(p["id"], p["status"], p["amountCents"]) for p in shown] == [
        (payout.id, "WAITING_FOR_ACCOUNT", 1_000)
    ]
    assert (await balances(core, worker_owner.user_id))["payable_cents"] == 1_000

    account_id = await onboard_owner(worker_owner, core)
    assert (await payout_rows(core, worker_owner.user_id))[0].status == "PENDING"
    await run_once(core, housekeeping=False)

    (paid,) = await payout_rows(core, worker_owner.user_id)
    assert paid.status == "PAID" and paid.attempts == 1 and paid.processor_account_id == account_id
    assert paid.processor_transfer_id and paid.processor_transfer_id.startswith("tr_") and paid.paid_at
    money = await balances(core, worker_owner.user_id)
    assert (money["payable_cents"], money["payout_in_transit_cents"]) == (0, 0)
    assert await sandbox_count(core, "transfer") == 1
    # Another pass pays nothing twice.
    await run_once(core, housekeeping=False)
    assert await sandbox_count(core, "transfer") == 1
    shown = (await worker_owner.client.get("/me/processor/status")).json()["payouts"]
    assert shown[0]["status"] == "PAID" and shown[0]["processorTransferId"] == paid.processor_transfer_id


async def test_the_agents_own_ready_account_is_paid_before_the_owners(app: Any, core: Core) -> None:
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    with_account, without = await new_agent(worker_owner), await new_agent(worker_owner)
    owner_account = await onboard_owner(worker_owner, core)
    agent_account = await onboard_agent(app, with_account, core)
    await award(core, requester.user_id, worker_owner.user_id, with_account.id, pay=700)
    await award(core, requester.user_id, worker_owner.user_id, without.id, pay=300)
    await run_once(core, housekeeping=False)
    paid = {p.worker_agent_id: p for p in await payout_rows(core, worker_owner.user_id)}
    assert paid[with_account.id].status == paid[without.id].status == "PAID"
    assert paid[with_account.id].processor_account_id == agent_account
    assert paid[without.id].processor_account_id == owner_account
    async with new_client(app) as c:
        own = (await c.get(f"/agents/{with_account.id}/processor/status", headers=with_account.h)).json()
    assert [p["amountCents"] for p in own["payouts"]] == [700]


async def test_an_award_through_the_api_queues_its_payout_as_the_winners_accounts_stand(
    app: Any, core: Core
) -> None:
    """The award's own read decides whether the payout waits: the winning agent's ready account or its
    owner's makes it PENDING; none (another owner's ready account does not count) makes it wait."""
    b = await buyer(app, core, funds=20_000)
    await onboard_owner(b.owner, core)  # the requester's own account pays no one else's award
    none_owner, owner_ready, agent_ready = [await new_owner(app, core) for _ in range(3)]
    await onboard_owner(owner_ready, core)
    winners = {
        none_owner.user_id: await new_agent(none_owner),
        owner_ready.user_id: await new_agent(owner_ready),
        agent_ready.user_id: await new_agent(agent_ready),
    }
    await onboard_agent(app, winners[agent_ready.user_id], core)
    async with new_client(app) as client:
        for worker in winners.values():
            await publish_and_award(client, b, await draft(client, b, 1_000, participantCap=1), worker)
    statuses = {}
    for user_id in winners:
        (payout,) = await payout_rows(core, user_id)
        statuses[user_id] = (payout.status, payout.amount_cents, payout.next_attempt_at is not None)
    assert statuses == {
        none_owner.user_id: ("WAITING_FOR_ACCOUNT", 1_000, False),
        owner_ready.user_id: ("PENDING", 1_000, True),
        agent_ready.user_id: ("PENDING", 1_000, True),
    }


async def test_a_reversed_transfer_fails_the_payout_and_the_retry_pays(
    app: Any, core: Core, frozen_clock: clock.FrozenClock
) -> None:
    heard: list[tuple[str, str]] = []

    async def listener(_session: Any, event: PayoutFailed) -> None:
        heard.append((event.payout.id, event.reason))

    with listening(core, {PayoutFailed: [InTransaction(listener)]}):
        requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
        worker = await new_agent(worker_owner)
        await onboard_owner(worker_owner, core)
        await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=1_000)
        await run_once(core, housekeeping=False)
        (paid,) = await payout_rows(core, worker_owner.user_id)
        assert paid.status == "PAID" and paid.processor_transfer_id
        first_transfer = paid.processor_transfer_id

        reversals_before = metrics.MONEY_OPERATIONS.labels(kind="PAYOUT_REVERSED")._value.get()
        failures_before = metrics.PAYOUT_FAILURES._value.get()
        await sandbox(core).reverse_transfer(first_transfer)
        (reversal,) = [e for e in await deliver(core) if e.type == "transfer.reversed"]
        # On /metrics a reversal counts as one, not as a payout failure; the statement shows it as one.
        assert metrics.MONEY_OPERATIONS.labels(kind="PAYOUT_REVERSED")._value.get() == reversals_before + 1
        assert metrics.PAYOUT_FAILURES._value.get() == failures_before
        statement = (await worker_owner.client.get("/me/billing/statement")).json()["entries"]
        assert [e["amountCents"] for e in statement if e["kind"] == "PAYOUT_REVERSED"] == [1_000]
        (failed,) = await payout_rows(core, worker_owner.user_id)
        assert failed.status == "FAILED" and failed.attempts == 1
        assert failed.last_error and first_transfer in failed.last_error
        assert failed.next_attempt_at == clock.now() + payouts.BACKOFF_BASE
        assert (await balances(core, worker_owner.user_id))["payable_cents"] == 1_000
        assert heard == [(failed.id, failed.last_error)]
        async with core.uow(write=False) as uow:
            notes = (
                await uow.session.scalars(
                    select(AgentNotification).where(AgentNotification.agent_id == worker.id)
                )
            ).all()
        assert [n.type for n in notes] == ["BOUNTY_PAYOUT_FAILED"]
        shown = (await worker_owner.client.get("/me/processor/status")).json()["payouts"][0]
        assert shown["status"] == "FAILED" and shown["lastError"] and shown["nextAttemptAt"]

        # The same reversal delivered again changes nothing.
        await handle(core, reversal)
        assert heard == [(failed.id, failed.last_error)]
        # A reversal is its own kind (issue 24), linked to the settlement it undoes; nothing failed.
        assert await count_kind(core, TransactionKind.PAYOUT_REVERSED) == 1
        assert await count_kind(core, TransactionKind.PAYOUT_FAILED) == 0
        async with core.uow(write=False) as uow:
            reversed_txn = await uow.session.scalar(
                select(LedgerTransaction).where(LedgerTransaction.kind == TransactionKind.PAYOUT_REVERSED)
            )
            settled = await uow.session.get(
                LedgerTransaction, reversed_txn.reverses_id if reversed_txn else ""
            )
        assert settled is not None and settled.kind == TransactionKind.PAYOUT_SETTLED
        # Not due before the back-off ends.
        await run_once(core, housekeeping=False)
        assert (await payout_rows(core, worker_owner.user_id))[0].status == "FAILED"

        frozen_clock.advance(seconds=payouts.BACKOFF_BASE.total_seconds())
        await run_once(core, housekeeping=False)
        (retried,) = await payout_rows(core, worker_owner.user_id)
        assert retried.status == "PAID" and retried.attempts == 2
        assert retried.processor_transfer_id not in (None, first_transfer)
        money = await balances(core, worker_owner.user_id)
        assert (money["payable_cents"], money["payout_in_transit_cents"]) == (0, 0)
        assert await sandbox_count(core, "transfer") == 2


async def test_a_refused_transfer_returns_the_money_and_backs_off(
    app: Any, core: Core, frozen_clock: clock.FrozenClock
) -> None:
    """Our flags say ready but the processor refuses (the account was never onboarded there)."""
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    worker = await new_agent(worker_owner)
    await worker_owner.client.post("/me/processor/onboarding-link")
    async with core.uow() as uow:
        await uow.session.execute(
            update(PayoutAccount)
            .where(PayoutAccount.user_id == worker_owner.user_id)
            .values(payouts_enabled=True)
        )
    await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=500)
    await run_once(core, housekeeping=False)
    (failed,) = await payout_rows(core, worker_owner.user_id)
    assert failed.status == "FAILED" and failed.attempts == 1 and "onboarding" in (failed.last_error or "")
    assert (await balances(core, worker_owner.user_id))["payable_cents"] == 500
    assert await sandbox_count(core, "transfer") == 0
    for n in range(2, 5):  # each retry waits twice as long
        frozen_clock.advance(seconds=payouts.BACKOFF_BASE.total_seconds() * 2 ** (n - 2))
        await run_once(core, housekeeping=False)
        (again,) = await payout_rows(core, worker_owner.user_id)
        assert again.status == "FAILED" and again.attempts == n
        assert again.next_attempt_at == clock.now() + payouts.BACKOFF_BASE * 2 ** (n - 1)
    assert (await balances(core, worker_owner.user_id))["payable_cents"] == 500
    assert payouts.backoff(payouts.MAX_ATTEMPTS) is None


async def test_a_crash_between_started_and_the_transfer_pays_exactly_once(
    app: Any, core: Core, frozen_clock: clock.FrozenClock
) -> None:
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    worker = await new_agent(worker_owner)
    await onboard_owner(worker_owner, core)
    await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=1_000)
    (payout,) = await payout_rows(core, worker_owner.user_id)

    # Step (a) commits, then the process dies: no transfer, no outcome.
    async with core.uow() as uow:
        attempt = await payouts.start_attempt(uow.session, payout.id)
    assert not isinstance(attempt, str)
    assert (await balances(core, worker_owner.user_id))["payout_in_transit_cents"] == 1_000
    # The lease keeps another pass off it for a while...
    await run_once(core, housekeeping=False)
    assert (await payout_rows(core, worker_owner.user_id))[0].status == "SENDING"
    # ...then the next pass repeats the send with the same attempt and key.
    frozen_clock.advance(seconds=payouts.SEND_LEASE.total_seconds())
    await run_once(core, housekeeping=False)
    (paid,) = await payout_rows(core, worker_owner.user_id)
    assert paid.status == "PAID" and paid.attempts == 1 and paid.current_attempt_id == attempt.id
    assert await sandbox_count(core, "transfer") == 1
    assert await count_kind(core, TransactionKind.PAYOUT) == 1
    assert await count_kind(core, TransactionKind.PAYOUT_SETTLED) == 1


async def test_a_crash_after_the_transfer_settles_the_same_transfer(
    app: Any, core: Core, frozen_clock: clock.FrozenClock
) -> None:
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    worker = await new_agent(worker_owner)
    account = await onboard_owner(worker_owner, core)
    await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=900)
    (payout,) = await payout_rows(core, worker_owner.user_id)
    async with core.uow() as uow:
        attempt = await payouts.start_attempt(uow.session, payout.id)
    assert not isinstance(attempt, str)
    sent = await payouts.transfer_attempt(core.processor, payout.id, attempt.id, 1, account, 900)
    # Died before step (c): the next pass repeats the same call and settles the transfer made.
    frozen_clock.advance(seconds=payouts.SEND_LEASE.total_seconds())
    await run_once(core, housekeeping=False)
    (after,) = await payout_rows(core, worker_owner.user_id)
    assert after.status == "PAID" and after.processor_transfer_id == sent.id
    assert await sandbox_count(core, "transfer") == 1
    assert await count_kind(core, TransactionKind.PAYOUT_SETTLED) == 1
    assert await count_kind(core, TransactionKind.PAYOUT) == 1


async def test_one_payout_per_capture(app: Any, core: Core) -> None:
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    worker = await new_agent(worker_owner)
    job_id = await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=400, fee=0)
    async with core.uow() as uow:  # the same capture again (a retried award) posts nothing new
        await ledger.capture(
            uow.session,
            requester_user_id=requester.user_id,
            worker_owner_user_id=worker_owner.user_id,
            pay_cents=400,
            fee_cents=0,
            job_id=job_id,
            metadata={"workerAgentId": worker.id, "jobPaymentId": "jpy_test"},
        )
    assert len(await payout_rows(core, worker_owner.user_id)) == 1


async def test_mcp_payout_status(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    async with serving(core) as url, http_client(url, agent.key) as mcp:
        status = await call(mcp, "payout_status")
    assert status["agentId"] == agent.id and status["processorAccountId"] is None
    assert status["processorPayoutsEnabled"] is False and status["payouts"] == []


async def test_a_failed_bank_payout_is_shown_on_the_account_and_heard_until_a_later_one_lands(
    app: Any, core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`payout.failed` on a connected account (Stripe sends it when the bank refuses the account's payout):
    no money moves (it left with the transfer); the status shows it; the hooks hear it once; an older event
    changes nothing; `payout.paid` clears it."""
    import orjson

    from callboard_core.processor import webhooks
    from tests.payments_helpers import post_event

    owner = await new_owner(app, core)
    account = await onboard_owner(owner, core)
    heard: list[str] = []

    async def hook(session: Any, event: BankPayoutFailed) -> None:
        heard.append(event.reason)

    monkeypatch.setattr(core, "bus", core.bus.extended({BankPayoutFailed: [InTransaction(hook)]}))
    secret = sandbox(core).webhook_secret
    now = int(clock.now().timestamp())

    async def send(event_id: str, kind: str, created: int, **fields: Any) -> None:
        obj = {"id": f"po_{event_id}", "object": "payout", "amount": 1200, "currency": "usd", **fields}
        body = orjson.dumps(webhooks.event_body(event_id, kind, obj, created, account=account))
        async with new_client(app) as client:
            r = await post_event(client, body, secret)
        assert r.status_code == 200, r.text

    before = await balances(core, owner.user_id)
    await send(
        "evt_fail", "payout.failed", now, failure_code="account_closed", failure_message="Account closed"
    )
    await send("evt_fail", "payout.failed", now, failure_code="account_closed")  # a redelivery
    status = (await owner.client.get("/me/processor/status")).json()
    assert status["bankPayoutError"] == "Account closed" and status["bankPayoutFailedAt"]
    assert heard == ["Account closed"]
    assert await balances(core, owner.user_id) == before
    await send("evt_old", "payout.paid", now - 60)  # older than the failure: ignored
    assert (await owner.client.get("/me/processor/status")).json()["bankPayoutError"] == "Account closed"
    await send("evt_paid", "payout.paid", now + 60)
    status = (await owner.client.get("/me/processor/status")).json()
    assert status["bankPayoutError"] is None and status["bankPayoutFailedAt"] is None
