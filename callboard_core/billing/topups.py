"""Top-ups: money in through the processor's hosted checkout, and the processor's reports of payments.

`POST /me/billing/topup` runs in two steps. Its prepare step (no write transaction held) finds or makes the
`topups` row in a short transaction of its own (a retry with the same Idempotency-Key finds the same row,
by `request_key`), then asks the processor for a checkout with the key `topup:<topup id>`, so a retry gets
the same checkout whatever happened before; the write step records the checkout on the row.

Money enters the ledger only from the processor's reports: `checkout.session.completed` (payment mode,
paid) and `payment_intent.succeeded` both report a top-up. The first report from the top-up owner's
customer moves the row to SUCCEEDED by compare-and-set and only that move's winner credits
(`ledger.top_up(key="topup:<topup id>")`), so the balance grows once per top-up however many reports, replays
or payments name it. `payment_intent.payment_failed` marks
the row FAILED (the checkout stays open: paying with another card still succeeds it). Auto top-ups
(`payment_intent` metadata `{"purpose": "autotopup", "userId": …}`, charged off-session by paid publish)
credit the same way; a declined one turns the owner's auto top-up off with the reason.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import states
from callboard_core.billing import service as billing
from callboard_core.billing.cards import ensure_customer
from callboard_core.billing.models import TOPUP_MOVES, BuyerProfile, TopUp, TopUpStatus
from callboard_core.billing.schemas import TopUpBody, TopUpStarted, TopUpView
from callboard_core.config import Settings
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Conflict
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import Currency
from callboard_core.principals import Actor
from callboard_core.processor.events import CheckoutCompleted, PaymentFailed, PaymentSucceeded
from callboard_core.processor.port import Checkout, PaymentProcessor
from callboard_core.security.site_urls import return_url_or_default

log = logging.getLogger("callboard.billing")

PURPOSE_TOPUP = "topup"
PURPOSE_AUTOTOPUP = "autotopup"


def _request_key(user_id: str, idempotency_key: str | None) -> str | None:
    if not idempotency_key:
        return None
    return hashlib.sha256(f"{user_id}\n{idempotency_key}".encode()).hexdigest()


async def _topup_row(uows: UnitsOfWork, user_id: str, amount_cents: int, request_key: str | None) -> TopUp:
    """The top-up row of this request: the one made by an earlier attempt with the same Idempotency-Key,
    else a new PENDING one (its own short transaction; race-safe on the unique request key)."""

    async def existing(session: AsyncSession) -> TopUp | None:
        if request_key is None:
            return None
        return await session.scalar(select(TopUp).where(TopUp.request_key == request_key))

    async with uows.uow() as write:
        session = write.session
        row = await existing(session)
        if row is None:
            row = TopUp(
                user_id=user_id,
                amount_cents=amount_cents,
                currency=Currency.USD,
                status=TopUpStatus.PENDING,
                request_key=request_key,
            )
            try:
                async with session.begin_nested():
                    session.add(row)
                    await session.flush()
            except IntegrityError:
                row = await existing(session)
                if row is None:
                    raise
    if row.amount_cents != amount_cents:
        raise Conflict(
            "This Idempotency-Key was used for a top-up of another amount; send a new key for a new top-up.",
            code="idempotency_key_reused",
        )
    return row


async def prepare_topup(
    processor: PaymentProcessor,
    uows: UnitsOfWork,
    settings: Settings,
    actor: Actor,
    body: TopUpBody,
    idempotency_key: str | None,
) -> tuple[TopUp, Checkout]:
    """The prepare step of a top-up: the row, then the processor's checkout (key `topup:<topup id>`)."""
    user_id = actor.require_user()
    return_url = return_url_or_default(settings, body.return_url)
    customer_id = await ensure_customer(processor, uows, user_id)
    row = await _topup_row(uows, user_id, body.amount_cents, _request_key(user_id, idempotency_key))
    checkout = await processor.create_checkout(
        customer_id,
        row.amount_cents,
        row.currency,
        return_url,
        {"purpose": PURPOSE_TOPUP, "topupId": row.id, "userId": user_id},
        idempotency_key=f"topup:{row.id}",
    )
    return row, checkout


async def record_checkout(session: AsyncSession, topup_id: str, checkout: Checkout) -> TopUpStarted:
    """The write step: the checkout is recorded on the top-up row."""
    row = await session.get(TopUp, topup_id)
    assert row is not None
    row.checkout_id = checkout.id
    await session.flush()
    return TopUpStarted(url=checkout.url, session_id=checkout.id, topup_id=row.id)


async def latest(session: AsyncSession, actor: Actor) -> TopUpView | None:
    """The owner's newest top-up, as a person back from the processor's page sees it (None: none yet)."""
    row = await session.scalar(
        select(TopUp)
        .where(TopUp.user_id == actor.require_user())
        .order_by(TopUp.created_at.desc(), TopUp.id.desc())
        .limit(1)
    )
    if row is None:
        return None
    return TopUpView(
        id=row.id,
        amount_cents=row.amount_cents,
        status=row.status,
        failure_code=row.failure_code,
        created_at=row.created_at,
    )


# --- processor events ---------------------------------------------------------------------------------------


async def _credit_topup(
    session: AsyncSession,
    topup_id: str | None,
    payment_intent_id: str,
    paid_cents: int,
    customer_id: str | None,
) -> None:
    """Credit a top-up once: the row moves to SUCCEEDED by compare-and-set first, and only the move's winner
    posts the credit, keyed on the top-up (`topup:<topup id>`). A payment from another customer than the
    top-up owner's, or a second payment naming a credited top-up, credits nothing."""
    row = await session.get(TopUp, topup_id) if topup_id else None
    if row is None:
        log.warning("payment %s names an unknown top-up %r; ignored", payment_intent_id, topup_id)
        return
    profile = await billing.find(session, row.user_id)
    if profile is None or not customer_id or profile.processor_customer_id != customer_id:
        log.error(
            "payment %s (customer %r) names top-up %s of another customer; not credited",
            payment_intent_id,
            customer_id,
            row.id,
        )
        return
    if paid_cents != row.amount_cents:
        log.error(
            "payment %s paid %s cents for top-up %s of %s",
            payment_intent_id,
            paid_cents,
            row.id,
            row.amount_cents,
        )
    moved = await states.compare_and_set(
        session,
        TopUp,
        row.id,
        TOPUP_MOVES,
        TopUpStatus.SUCCEEDED,
        payment_intent_id=payment_intent_id,
        failure_code=None,
    )
    if moved is None:
        if row.payment_intent_id != payment_intent_id:
            log.error(
                "top-up %s was credited by payment %s; payment %s for it is not credited (refund it)",
                row.id,
                row.payment_intent_id,
                payment_intent_id,
            )
        return
    txn = await ledger.top_up(
        session,
        user_id=row.user_id,
        amount_cents=row.amount_cents,
        processor_ref=payment_intent_id,
        key=f"topup:{row.id}",
    )
    moved.ledger_transaction_id = txn.id
    await session.flush()


async def _credit_autotopup(session: AsyncSession, event: PaymentSucceeded) -> None:
    profile = await _autotopup_profile(session, event.payment_intent_id, event.customer_id, event.metadata)
    if profile is None:
        return
    await ledger.top_up(
        session,
        user_id=profile.user_id,
        amount_cents=event.amount_cents,
        processor_ref=event.payment_intent_id,
        key=f"topup:{event.payment_intent_id}",
    )


async def _autotopup_profile(
    session: AsyncSession, payment_intent_id: str, customer_id: str | None, metadata: Mapping[str, str]
) -> BuyerProfile | None:
    """The owner an auto top-up payment is for: metadata `userId`, whose customer must be the payment's."""
    user_id = metadata.get("userId")
    profile = await billing.find(session, user_id) if user_id else None
    if profile is None or profile.processor_customer_id != customer_id:
        log.warning("auto top-up payment %s does not match an owner; ignored", payment_intent_id)
        return None
    return profile


async def on_checkout_completed(session: AsyncSession, event: CheckoutCompleted) -> None:
    """A paid top-up checkout credits the balance. (Setup mode: the card itself is mirrored from
    `CardAttached` / `CardSetupSucceeded`, which carry it; the checkout names only its setup, so there is
    nothing more to record.)"""
    if event.mode != "payment" or event.metadata.get("purpose") != PURPOSE_TOPUP:
        return
    if not event.paid or not event.payment_intent_id:
        return
    await _credit_topup(
        session, event.metadata.get("topupId"), event.payment_intent_id, event.amount_cents, event.customer_id
    )


async def on_payment_succeeded(session: AsyncSession, event: PaymentSucceeded) -> None:
    purpose = event.metadata.get("purpose")
    if purpose == PURPOSE_TOPUP:
        await _credit_topup(
            session,
            event.metadata.get("topupId"),
            event.payment_intent_id,
            event.amount_cents,
            event.customer_id,
        )
    elif purpose == PURPOSE_AUTOTOPUP:
        await _credit_autotopup(session, event)


async def on_payment_failed(session: AsyncSession, event: PaymentFailed) -> None:
    metadata = event.metadata
    failure = event.failure_code
    if metadata.get("purpose") == PURPOSE_TOPUP and metadata.get("topupId"):
        await states.compare_and_set(
            session,
            TopUp,
            metadata["topupId"],
            TOPUP_MOVES,
            TopUpStatus.FAILED,
            failure_code=failure[:80],
        )
    elif metadata.get("purpose") == PURPOSE_AUTOTOPUP:
        profile = await _autotopup_profile(session, event.payment_intent_id, event.customer_id, metadata)
        if profile is not None:
            await billing.turn_off_autotopup(
                session,
                profile,
                f"Auto top-up was turned off because the charge to your default card failed ({failure}): "
                "save a working card, make it the default and enable "
                "auto top-up again.",
            )
