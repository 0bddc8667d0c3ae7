"""Payouts: queued for every award's capture, sent by the worker, failed and retried with back-off.

Queue: the ledger's CAPTURE hook (`queue_for_capture`, in the capture's transaction) adds one payout per
capture transaction (UNIQUE), PENDING when the worker's owner has a ready payout account, else
WAITING_FOR_ACCOUNT (released by `accounts.release_waiting` when one becomes ready).

Send (`send_due`, from the worker; `send_one` per payout), in three steps so that the processor is never
called inside a write transaction:
  (a) write: claim the payout for a lease (`next_attempt_at` = now + SEND_LEASE, compare-and-set on its
      due time, so two workers never send the same payout at once); a PENDING or FAILED payout gets a
      new attempt on the ready account (the worker agent's own, else the owner's: see `accounts`) and
      `ledger.payout_started` (payable → in transit, key `payout:<attempt id>`), and moves to SENDING;
      a SENDING one (a send that crashed) keeps its attempt;
  (b) no transaction: `processor.transfer(..., idempotency_key="payout:<attempt id>")`: a repeat of the
      same attempt returns the same transfer;
  (c) write: paid → `ledger.payout_settled` and PAID; refused → `ledger.payout_failed` (money back to
      payable) and FAILED with the back-off's next time. The processor being unreachable leaves the
      payout SENDING: the lease runs out and (b) is repeated with the same key.
A crash between (a) and (c) is the SENDING case: exactly one transfer and one settlement.

A transfer reversed later (`transfer.reversed`): an attempt not settled yet fails as above; a settled one
is REVERSED (`ledger.payout_reversed`: the money is payable again) and the payout FAILED for a retry.
Every failure publishes `PayoutFailed` and notifies the worker agent
(BOUNTY_PAYOUT_FAILED).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy import exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock, states
from callboard_core.agent_notifications import service as agent_notifications
from callboard_core.db.rows import insert_at_commit
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Conflict, NotFound
from callboard_core.jobs.models import Job
from callboard_core.ledger import service as ledger
from callboard_core.ledger.events import LedgerPosted
from callboard_core.ledger.models import LedgerTransaction, TransactionKind
from callboard_core.payouts import accounts
from callboard_core.payouts.events import PAYOUT_FAILED, PayoutFailed
from callboard_core.payouts.models import Payout, PayoutAttempt
from callboard_core.payouts.states import ATTEMPT_MOVES, DUE, PAYOUT_MOVES, AttemptStatus, PayoutStatus
from callboard_core.processor import PaymentProcessor, ProcessorUnavailable, Transfer
from callboard_core.processor.events import TransferReversed

log = logging.getLogger("callboard.payouts")

SEND_LEASE = timedelta(minutes=2)  # a claimed send: after this, another pass may repeat it (same key)
BACKOFF_BASE = timedelta(minutes=5)  # after the n-th failed attempt: 5 min × 2^(n-1)
MAX_ATTEMPTS = 8  # then no automatic retry (nextAttemptAt null): staff look at lastError
BATCH = 50


def backoff(attempts: int) -> timedelta | None:
    """The wait after the `attempts`-th failed attempt; None when the retries are spent."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return BACKOFF_BASE * 2 ** max(attempts - 1, 0)


# --- queue -----------------------------------------------------------------------------------------


async def on_posted(session: AsyncSession, event: LedgerPosted) -> None:
    """`LedgerPosted`: a new CAPTURE queues one payout for the award's pay."""
    if event.kind is TransactionKind.CAPTURE:
        await queue_for_capture(session, event.transaction)


async def queue_for_capture(session: AsyncSession, txn: LedgerTransaction) -> None:
    """One payout for the award's pay (once per new capture, in its transaction)."""
    meta: dict[str, Any] = txn.meta or {}
    user_id, pay = meta.get("workerOwnerId"), meta.get("payCents")
    if not user_id or not isinstance(pay, int) or pay <= 0:
        return
    agent_id = meta.get("workerAgentId")
    ready = await accounts.is_ready(session, str(user_id), agent_id)
    # Sent after the commit (the worker, or `send_due`): nothing reads it in its transaction.
    await insert_at_commit(
        session,
        [
            Payout(
                user_id=str(user_id),
                worker_agent_id=agent_id,
                job_id=txn.job_id,
                job_payment_id=meta.get("jobPaymentId"),
                capture_transaction_id=txn.id,
                amount_cents=pay,
                status=PayoutStatus.PENDING if ready else PayoutStatus.WAITING_FOR_ACCOUNT,
                attempts=0,
                next_attempt_at=clock.now() if ready else None,
            )
        ],
    )


async def cancel_unsent(session: AsyncSession, job_id: str) -> Payout | None:
    """A dispute refunds the job's award: its payout, if not sent, is CANCELLED (None: the job has none).
    One on its way or paid is 409 `payout_already_sent` (staff settle that with an adjustment)."""
    payout = await session.scalar(select(Payout).where(Payout.job_id == job_id))
    if payout is None:
        return None
    moved = await states.compare_and_set(
        session, Payout, payout.id, PAYOUT_MOVES, PayoutStatus.CANCELLED, next_attempt_at=None
    )
    if moved is None:
        raise Conflict(
            "This award's payout has been sent (or is being sent), so the award cannot be refunded: settle "
            "the dispute with ADMIN_ADJUSTMENT instead.",
            code="payout_already_sent",
            current_state=await states.current_state(session, Payout, payout.id),
            payout_id=payout.id,
        )
    return moved


# --- send ------------------------------------------------------------------------------------------


def _not_frozen() -> Any:
    """The payout's job has no open dispute (callboard_core/disputes): a disputed job's payout waits."""
    return ~exists().where(Job.id == Payout.job_id, Job.open_dispute_id.is_not(None))


async def due_ids(session: AsyncSession, limit: int = BATCH) -> list[str]:
    rows = await session.scalars(
        select(Payout.id)
        .where(Payout.status.in_(DUE), Payout.next_attempt_at <= clock.now(), _not_frozen())
        .order_by(Payout.next_attempt_at, Payout.id)
        .limit(limit)
    )
    return list(rows)


class PayoutPorts(UnitsOfWork, Protocol):
    """What the worker's payout sends need of the running core (`Core` is one)."""

    processor: PaymentProcessor


async def send_due(core: PayoutPorts, *, limit: int = BATCH) -> dict[str, int]:
    """One worker pass over the due payouts; counts by outcome (paid, failed, waiting, unavailable, skipped)."""
    async with core.uow(write=False) as uow:
        ids = await due_ids(uow.session, limit)
    outcomes: Counter[str] = Counter()
    for payout_id in ids:
        try:
            outcomes[await send_one(core, payout_id)] += 1
        except Exception:  # one payout's trouble must not hold up the others
            log.exception("payout %s: send failed", payout_id)
            outcomes["error"] += 1
    return dict(outcomes)


async def start_attempt(session: AsyncSession, payout_id: str) -> PayoutAttempt | str:
    """Step (a): claim the payout and give it the attempt to send, or the outcome when there is none to
    send ("skipped": not due or claimed by another pass; "waiting": no ready account)."""
    now = clock.now()
    claimed = (
        await session.execute(
            update(Payout)
            .where(
                Payout.id == payout_id, Payout.status.in_(DUE), Payout.next_attempt_at <= now, _not_frozen()
            )
            .values(next_attempt_at=now + SEND_LEASE, updated_at=now)
            .returning(Payout.status)
            .execution_options(synchronize_session=False)
        )
    ).scalar()
    if claimed is None:
        return "skipped"
    payout = await _payout(session, payout_id)
    if payout.status == PayoutStatus.SENDING and payout.current_attempt_id:
        return await _attempt(session, payout.current_attempt_id)
    account = await accounts.ready_account(session, payout.user_id, payout.worker_agent_id)
    if account is None or account.processor_account_id is None:
        await states.compare_and_set(
            session, Payout, payout.id, PAYOUT_MOVES, PayoutStatus.WAITING_FOR_ACCOUNT, next_attempt_at=None
        )
        return "waiting"
    attempt = PayoutAttempt(
        payout_id=payout.id,
        number=payout.attempts + 1,
        status=AttemptStatus.SENDING,
        payout_account_id=account.id,
        processor_account_id=account.processor_account_id,
    )
    session.add(attempt)
    await session.flush()
    await ledger.payout_started(
        session, user_id=payout.user_id, amount_cents=payout.amount_cents, payout_id=attempt.id
    )
    await states.compare_and_set(
        session,
        Payout,
        payout.id,
        PAYOUT_MOVES,
        PayoutStatus.SENDING,
        attempts=attempt.number,
        current_attempt_id=attempt.id,
        payout_account_id=account.id,
        processor_account_id=account.processor_account_id,
    )
    return attempt


async def send_one(core: PayoutPorts, payout_id: str) -> str:
    """Steps (a), (b), (c) for one payout (see the module docstring); the outcome's name."""
    async with core.uow() as uow:
        started = await start_attempt(uow.session, payout_id)
        if isinstance(started, str):
            return started
        attempt_id, account_id, number = started.id, started.processor_account_id, started.number
        amount = (await _payout(uow.session, payout_id)).amount_cents
    try:
        transfer: Transfer | None = await transfer_attempt(
            core.processor, payout_id, attempt_id, number, account_id, amount
        )
        error = None
    except (ProcessorUnavailable, Conflict) as exc:
        if isinstance(exc, Conflict) and exc.code != "processor_request_refused":
            raise  # the key was used with other parameters: a bug, never a refusal to book
        if isinstance(exc, ProcessorUnavailable):
            async with core.uow() as uow:  # the outcome is unknown: the lease runs out, (b) is repeated
                await _note_error(uow.session, payout_id, exc.message)
            return "unavailable"
        transfer, error = None, exc.message
    except NotFound as exc:  # the account is gone at the processor
        transfer, error = None, exc.message
    async with core.uow() as uow:
        if transfer is not None and transfer.status == "paid":
            await settle(uow.session, attempt_id, transfer.id)
            return "paid"
        reason = error or f"the transfer was {transfer.status if transfer else 'refused'}"
        await fail(uow.session, attempt_id, reason, transfer.id if transfer else None)
        return "failed"


async def transfer_attempt(
    processor: PaymentProcessor, payout_id: str, attempt_id: str, number: int, account_id: str, amount: int
) -> Transfer:
    """Step (b): the attempt's transfer, always the same call for the same attempt (same key, same
    parameters), so a repeat returns the first transfer."""
    return await processor.transfer(
        account_id,
        amount,
        "usd",
        {"payoutId": payout_id, "attemptId": attempt_id, "attempt": str(number)},
        idempotency_key=f"payout:{attempt_id}",
    )


async def settle(session: AsyncSession, attempt_id: str, transfer_id: str) -> None:
    """Step (c), paid: the attempt PAID, the money settled (in transit → clearing), the payout PAID."""
    attempt = await states.compare_and_set(
        session,
        PayoutAttempt,
        attempt_id,
        ATTEMPT_MOVES,
        AttemptStatus.PAID,
        processor_transfer_id=transfer_id,
        finished_at=clock.now(),
    )
    if attempt is None:  # recorded already (a repeated pass, or a reversal got here first)
        return
    payout = await _payout(session, attempt.payout_id)
    await ledger.payout_settled(
        session,
        user_id=payout.user_id,
        amount_cents=payout.amount_cents,
        payout_id=attempt_id,
        processor_ref=transfer_id,
    )
    await states.compare_and_set(
        session,
        Payout,
        payout.id,
        PAYOUT_MOVES,
        PayoutStatus.PAID,
        Payout.current_attempt_id == attempt_id,
        processor_transfer_id=transfer_id,
        paid_at=clock.now(),
        next_attempt_at=None,
        last_error=None,
    )


async def fail(session: AsyncSession, attempt_id: str, reason: str, transfer_id: str | None = None) -> None:
    """An attempt that did not pay: FAILED, its money back to payable (`payout_outcome:<attempt>`), the
    payout FAILED with the back-off's next time."""
    values: dict[str, Any] = {"error": reason[:2000], "finished_at": clock.now()}
    if transfer_id:
        values["processor_transfer_id"] = transfer_id
    attempt = await states.compare_and_set(
        session, PayoutAttempt, attempt_id, ATTEMPT_MOVES, AttemptStatus.FAILED, **values
    )
    if attempt is None:
        return
    payout = await _payout(session, attempt.payout_id)
    await ledger.payout_failed(
        session,
        user_id=payout.user_id,
        amount_cents=payout.amount_cents,
        payout_id=attempt_id,
        processor_ref=transfer_id,
        reason=reason[:500],
    )
    await _retry_later(session, payout, attempt_id, reason)


async def reverse(session: AsyncSession, attempt_id: str, transfer_id: str) -> None:
    """A settled attempt's transfer came back: REVERSED, the money payable again, the payout FAILED."""
    reason = f"the processor reversed transfer {transfer_id}"
    attempt = await states.compare_and_set(
        session, PayoutAttempt, attempt_id, ATTEMPT_MOVES, AttemptStatus.REVERSED, error=reason
    )
    if attempt is None:
        return
    payout = await _payout(session, attempt.payout_id)
    await ledger.payout_reversed(
        session,
        user_id=payout.user_id,
        amount_cents=payout.amount_cents,
        payout_id=attempt_id,
        processor_ref=transfer_id,
        reason=reason,
    )
    await _retry_later(session, payout, attempt_id, reason)


async def _retry_later(session: AsyncSession, payout: Payout, attempt_id: str, reason: str) -> None:
    wait = backoff(payout.attempts)
    moved = await states.compare_and_set(
        session,
        Payout,
        payout.id,
        PAYOUT_MOVES,
        PayoutStatus.FAILED,
        Payout.current_attempt_id == attempt_id,
        last_error=reason[:2000],
        next_attempt_at=clock.now() + wait if wait is not None else None,
    )
    if moved is None:
        return
    payout = moved
    await bus.publish(session, PayoutFailed(payout, reason))
    if payout.worker_agent_id:
        retry = (
            f" It is retried at {payout.next_attempt_at:%Y-%m-%d %H:%M} UTC."
            if payout.next_attempt_at
            else " No more automatic retries: your owner should check the payout account."
        )
        await agent_notifications.notify(
            session,
            [payout.worker_agent_id],
            PAYOUT_FAILED,
            "A payout of your earnings failed",
            body=f"{reason}.{retry}",
            # The job by reference only: payouts outlive (and never depend on) the job's row.
            data={"payoutId": payout.id, "jobId": payout.job_id, "amountCents": payout.amount_cents},
        )


async def _note_error(session: AsyncSession, payout_id: str, error: str) -> None:
    await session.execute(
        update(Payout)
        .where(Payout.id == payout_id)
        .values(last_error=error[:2000], updated_at=clock.now())
        .execution_options(synchronize_session=False)
    )


async def _payout(session: AsyncSession, payout_id: str) -> Payout:
    payout = await session.get(Payout, payout_id, populate_existing=True)
    assert payout is not None, payout_id
    return payout


async def _attempt(session: AsyncSession, attempt_id: str) -> PayoutAttempt:
    attempt = await session.get(PayoutAttempt, attempt_id, populate_existing=True)
    assert attempt is not None, attempt_id
    return attempt


# --- processor events ------------------------------------------------------------------------------


async def on_transfer_reversed(session: AsyncSession, event: TransferReversed) -> None:
    """`TransferReversed`: the attempt it paid fails (not settled yet) or is reversed (settled)."""
    transfer_id = event.transfer_id
    attempt_id = event.metadata.get("attemptId")
    attempt = await session.get(PayoutAttempt, attempt_id) if attempt_id else None
    if attempt is None:
        attempt = await session.scalar(
            select(PayoutAttempt).where(PayoutAttempt.processor_transfer_id == transfer_id)
        )
    if attempt is None:
        return
    if attempt.status == AttemptStatus.SENDING:
        await fail(session, attempt.id, f"the processor reversed transfer {transfer_id}", transfer_id)
    elif attempt.status == AttemptStatus.PAID:
        await reverse(session, attempt.id, transfer_id)
