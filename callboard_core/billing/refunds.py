"""Staff refund an owner's unspent balance to the cards that paid it (ADMIN, SUPERADMIN).

Three steps, as a payout's (the processor is never called inside a database transaction):
(a) in one unit of work: the request is split over the owner's card payments (top-ups, newest first, each up
    to what is left unrefunded of it); each piece's amount is held from the available balance (a guarded
    debit: 409 `insufficient_funds` when the balance is short); audited;
(b) each piece is refunded at the processor under the piece's id as idempotency key;
(c) in one unit of work per piece: the processor's answer is recorded: on success the hold becomes the
    REFUND posting (available -> processor clearing; a credit note), on a refusal the hold goes back.
A processor that did not answer leaves the piece PENDING with its money held: the same request again (the
same idempotencyKey) repeats (b) and (c) for it, and never refunds twice (the processor's key).
"""

from __future__ import annotations

import logging
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import states
from callboard_core.audit import service as audit
from callboard_core.billing import schemas as billing_schemas
from callboard_core.billing.models import BALANCE_REFUND_MOVES, BalanceRefund, BalanceRefundStatus
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Conflict, NotFound
from callboard_core.ids import new_id
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerEntry, LedgerTransaction, TransactionKind
from callboard_core.principals import Actor
from callboard_core.processor import PaymentProcessor, ProcessorUnavailable
from callboard_core.security.permissions import Permission

log = logging.getLogger("callboard.billing.refunds")


class RefundPorts(UnitsOfWork, Protocol):
    processor: PaymentProcessor


def request_key(user_id: str, idempotency_key: str | None) -> str:
    return f"balance_refund:{user_id}:{idempotency_key or new_id('brq')}"


async def _refundable(session: AsyncSession, user_id: str) -> list[tuple[LedgerTransaction, int]]:
    """The owner's card payments with something left to refund, newest first: (top-up, cents left)."""
    topups = list(
        await session.scalars(
            select(LedgerTransaction)
            .where(
                LedgerTransaction.user_id == user_id,
                LedgerTransaction.kind == TransactionKind.TOPUP,
                LedgerTransaction.processor_ref.is_not(None),
            )
            .order_by(LedgerTransaction.created_at.desc(), LedgerTransaction.id.desc())
        )
    )
    taken = dict(
        (
            await session.execute(
                select(BalanceRefund.source_transaction_id, func.sum(BalanceRefund.amount_cents))
                .where(BalanceRefund.user_id == user_id, BalanceRefund.status != BalanceRefundStatus.FAILED)
                .group_by(BalanceRefund.source_transaction_id)
            )
        ).all()
    )
    # Each top-up's amount is its credit leg, read for all of them in one statement.
    amounts = dict(
        (
            await session.execute(
                select(LedgerEntry.transaction_id, func.max(LedgerEntry.amount_cents))
                .where(LedgerEntry.transaction_id.in_([t.id for t in topups]))
                .group_by(LedgerEntry.transaction_id)
            )
        ).all()
    )
    found = []
    for txn in topups:
        left = int(amounts.get(txn.id) or 0) - int(taken.get(txn.id) or 0)
        if left > 0:
            found.append((txn, left))
    return found


async def start(
    session: AsyncSession, actor: Actor, user_id: str, body: billing_schemas.BalanceRefundBody, key: str
) -> None:
    """Step (a): split the request over the card payments and hold each piece (a retry of the same key
    finds its pieces and adds none)."""
    actor.require(Permission.ADJUST_BALANCE)
    if await session.scalar(select(BalanceRefund.id).where(BalanceRefund.request_key == key).limit(1)):
        return
    refundable = await _refundable(session, user_id)
    total = sum(left for _, left in refundable)
    if total < body.amount_cents:
        raise Conflict(
            f"Only {total} cents of this owner's balance came from card payments that can still be refunded.",
            code="refund_exceeds_card_payments",
            refundable_cents=total,
        )
    wanted = body.amount_cents
    for txn, left in refundable:
        if wanted == 0:
            break
        piece = BalanceRefund(
            id=new_id("brf"),
            user_id=user_id,
            request_key=key,
            source_transaction_id=txn.id,
            processor_payment_ref=txn.processor_ref,
            amount_cents=min(left, wanted),
            status=BalanceRefundStatus.PENDING,
            reason=body.reason,
            staff_user_id=actor.user_id,
        )
        wanted -= piece.amount_cents
        session.add(piece)
        await session.flush()
        await ledger.flow(
            session,
            TransactionKind.RESERVE,
            user_id=user_id,
            amount_cents=piece.amount_cents,
            key=f"refund_hold:{piece.id}",
            metadata={"hold": True, "balanceRefundId": piece.id},
            savepoint=False,
        )
    audit.by(
        session,
        actor,
        "buyer_profile.refund_requested",
        "user",
        user_id,
        amountCents=body.amount_cents,
        reason=body.reason,
        requestKey=key,
    )


async def _pieces(session: AsyncSession, key: str) -> list[BalanceRefund]:
    return list(
        await session.scalars(
            select(BalanceRefund)
            .where(BalanceRefund.request_key == key)
            .order_by(BalanceRefund.created_at, BalanceRefund.id)
        )
    )


async def finish(session: AsyncSession, piece_id: str, refund_id: str | None, error: str | None) -> None:
    """Step (c) for one piece: the hold becomes the refund (a credit note), or goes back on a refusal."""
    piece = await session.get(BalanceRefund, piece_id)
    assert piece is not None
    target = BalanceRefundStatus.SUCCEEDED if refund_id else BalanceRefundStatus.FAILED
    moved = await states.compare_and_set(
        session,
        BalanceRefund,
        piece_id,
        BALANCE_REFUND_MOVES,
        target,
        processor_refund_id=refund_id,
        error=error,
    )
    if moved is None:
        return  # another pass recorded it
    await ledger.flow(
        session,
        TransactionKind.RELEASE,
        user_id=piece.user_id,
        amount_cents=piece.amount_cents,
        key=f"refund_hold_back:{piece.id}",
        metadata={"hold": True, "balanceRefundId": piece.id},
    )
    if refund_id:
        await ledger.refund(
            session,
            user_id=piece.user_id,
            amount_cents=piece.amount_cents,
            processor_ref=refund_id,
            key=f"refund:{piece.id}",
        )


async def run(core: RefundPorts, actor: Actor, user_id: str, body: billing_schemas.BalanceRefundBody) -> str:
    """Steps (a) to (c); the request's key (its pieces' status tells how it went)."""
    key = request_key(user_id, body.idempotency_key)
    async with core.uow() as uow:
        await start(uow.session, actor, user_id, body, key)
    async with core.uow(write=False) as uow:
        pending = [
            (p.id, p.processor_payment_ref, p.amount_cents)
            for p in await _pieces(uow.session, key)
            if p.status == BalanceRefundStatus.PENDING
        ]
    for piece_id, ref, amount in pending:
        try:
            refund = await core.processor.refund(ref, amount, idempotency_key=f"balance_refund:{piece_id}")
        except ProcessorUnavailable as exc:
            log.warning(
                "balance refund %s: the processor did not answer (%s); a retry finishes it",
                piece_id,
                exc.message,
            )
            continue
        except (Conflict, NotFound) as exc:
            async with core.uow() as uow:
                await finish(uow.session, piece_id, None, exc.message)
            continue
        async with core.uow() as uow:
            if refund.status in ("succeeded", "pending"):
                await finish(uow.session, piece_id, refund.id, None)
            else:
                await finish(uow.session, piece_id, None, f"the refund was {refund.status}")
    return key


async def result(session: AsyncSession, user_id: str, key: str) -> billing_schemas.BalanceRefundResult:
    pieces = await _pieces(session, key)
    statuses = {p.status for p in pieces}
    overall = (
        "PENDING"
        if BalanceRefundStatus.PENDING in statuses
        else "SUCCEEDED"
        if statuses == {BalanceRefundStatus.SUCCEEDED}
        else "FAILED"
        if statuses == {BalanceRefundStatus.FAILED}
        else "PARTIAL"
    )
    return billing_schemas.BalanceRefundResult(
        status=overall,
        refunds=[
            billing_schemas.BalanceRefundPiece(
                id=p.id,
                amount_cents=p.amount_cents,
                status=p.status,
                processor_refund_id=p.processor_refund_id,
                error=p.error,
                created_at=p.created_at,
            )
            for p in pieces
        ],
        balance=await ledger.balances(session, user_id),
    )
