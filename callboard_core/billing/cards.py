"""Saved cards: the owner's processor customer, card setups, and the `payment_methods` mirror.

Other packages call two functions, both from an action's `prepare` step or after commit (never while a
write transaction is held: the processor, the sandbox included, writes in its own transaction):
- `ensure_customer(processor, uows, user_id) -> str`: the owner's processor customer, created once with the
  idempotency key `customer:<user id>` (anyone creating it with that key gets the same customer) and stored
  on `BuyerProfile.processor_customer_id` in a short write transaction of its own.
- `begin_card_setup(processor, uows, settings, user_id, *, return_url=None) -> CardSetup`: a hosted card form
  for the owner (url, client secret).

The mirror follows the processor: `payment_method.attached` and `setup_intent.succeeded` add the card (the
first saved card becomes the default), `payment_method.detached` removes it, and the confirm route mirrors
at once what `payment_method.attached` will say. Every path upserts on the processor's unique card id, so
they converge whatever their order. A removed card's row is deleted (the processor keeps its history).
"""

from __future__ import annotations

import logging

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.billing import service as billing
from callboard_core.billing.models import BuyerProfile, SavedCard
from callboard_core.billing.schemas import (
    CardSetupStarted,
    DefaultPaymentMethodUpdated,
    PaymentMethodConfirmed,
    PaymentMethodDeleted,
    RequesterPaymentMethod,
)
from callboard_core.config import Settings
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import CallboardError, NotFound
from callboard_core.guidance import hint
from callboard_core.ids import new_id
from callboard_core.principals import Actor
from callboard_core.processor.events import CardAttached, CardDetached, CardSetupSucceeded
from callboard_core.processor.port import CardSetup, PaymentMethodInfo, PaymentProcessor
from callboard_core.security.site_urls import return_url_or_default
from callboard_core.users.models import User

log = logging.getLogger("callboard.billing")


def customer_key(user_id: str) -> str:
    return f"customer:{user_id}"


def card_not_found(pm_id: str) -> NotFound:
    return NotFound(
        "You have no saved card with this id: your saved cards are listed with your balance.",
        code="payment_method_not_found",
        payment_method_id=pm_id,
    )


# --- the processor customer and card setups (no write transaction held) ---------------------------------


async def ensure_customer(processor: PaymentProcessor, uows: UnitsOfWork, user_id: str) -> str:
    """The owner's processor customer id, created (key `customer:<user id>`) and stored if missing (in a
    unit of work of its own: a prepare step holds no write transaction across the processor call)."""
    async with uows.uow(write=False) as read:
        session = read.session
        profile = await billing.find(session, user_id)
        if profile is not None and profile.processor_customer_id:
            return profile.processor_customer_id
        email = await session.scalar(select(User.email).where(User.id == user_id))
    if email is None:
        raise NotFound("No such user.", code="user_not_found")
    customer_id = await processor.create_customer(user_id, email, idempotency_key=customer_key(user_id))
    async with uows.uow() as write:
        session = write.session
        profile = await billing.ensure(session, user_id)
        await session.execute(
            update(BuyerProfile)
            .where(BuyerProfile.id == profile.id, BuyerProfile.processor_customer_id.is_(None))
            .values(processor_customer_id=customer_id)
        )
    return customer_id


async def begin_card_setup(
    processor: PaymentProcessor,
    uows: UnitsOfWork,
    settings: Settings,
    user_id: str,
    *,
    return_url: str | None = None,
) -> CardSetup:
    """A new hosted card form for the owner (each call a new one: a completed form cannot be reused; the
    idempotency key is a fresh id of ours, and a retried request replays its stored answer)."""
    customer_id = await ensure_customer(processor, uows, user_id)
    return await _card_setup(processor, settings, customer_id, return_url)


async def _card_setup(
    processor: PaymentProcessor, settings: Settings, customer_id: str, return_url: str | None
) -> CardSetup:
    target = return_url_or_default(settings, return_url)
    return await processor.create_card_setup(
        customer_id, target, idempotency_key=f"card_setup:{new_id('cst')}"
    )


async def start_setup(
    processor: PaymentProcessor, uows: UnitsOfWork, settings: Settings, actor: Actor, return_url: str | None
) -> CardSetupStarted:
    """The add-a-card answer (run in a route's prepare step)."""
    customer_id = await ensure_customer(processor, uows, actor.require_user())
    setup = await _card_setup(processor, settings, customer_id, return_url)
    return CardSetupStarted(
        client_secret=setup.client_secret, customer_id=customer_id, url=setup.url, setup_id=setup.id
    )


# --- the mirror ---------------------------------------------------------------------------------------------


async def _find(session: AsyncSession, user_id: str, pm_id: str) -> SavedCard | None:
    """The owner's card by our id or the processor's."""
    return await session.scalar(
        select(SavedCard).where(
            SavedCard.user_id == user_id,
            or_(SavedCard.id == pm_id, SavedCard.processor_payment_method_id == pm_id),
        )
    )


async def mirror(session: AsyncSession, user_id: str, info: PaymentMethodInfo) -> SavedCard | None:
    """Upsert the owner's card (details known are kept when a later report lacks them) and make it the
    default if the owner has none. None when the card is mirrored for another owner (never moved)."""
    pm_id = info.id
    details = {
        "type": info.type,
        "brand": info.brand,
        "last4": info.last4,
        "exp_month": info.exp_month,
        "exp_year": info.exp_year,
    }
    card = await session.scalar(select(SavedCard).where(SavedCard.processor_payment_method_id == pm_id))
    if card is None:
        card = SavedCard(user_id=user_id, processor_payment_method_id=pm_id, **details)
        await session.flush()
        try:
            async with session.begin_nested():
                session.add(card)
                await session.flush()
        except IntegrityError:  # a concurrent report of the same card won
            card = await session.scalar(
                select(SavedCard).where(SavedCard.processor_payment_method_id == pm_id)
            )
            if card is None:
                raise
    if card.user_id != user_id:
        log.warning("card %s is mirrored for another owner; not moved", pm_id)
        return None
    for name, value in details.items():
        if value is not None:
            setattr(card, name, value)
    profile = await billing.ensure(session, user_id)
    await session.execute(
        update(BuyerProfile)
        .where(BuyerProfile.id == profile.id, BuyerProfile.processor_default_payment_method_id.is_(None))
        .values(processor_default_payment_method_id=pm_id)
        .execution_options(synchronize_session="fetch")
    )
    await session.flush()
    return card


async def forget(session: AsyncSession, user_id: str, pm_id: str) -> None:
    """Remove the owner's card from the mirror. If it was the default, the default is cleared and auto
    top-up (which charges it) is turned off with the reason."""
    card = await _find(session, user_id, pm_id)
    if card is None:
        return
    processor_id = card.processor_payment_method_id
    label = " ".join(
        x for x in ((card.brand or "card").capitalize(), f"ending {card.last4}" if card.last4 else "") if x
    )
    await session.delete(card)
    profile = await billing.find(session, user_id)
    if profile is not None and profile.processor_default_payment_method_id == processor_id:
        profile.processor_default_payment_method_id = None
        await billing.turn_off_autotopup(
            session,
            profile,
            f"Auto top-up was turned off because its card ({label}) was removed: save a card, make it "
            "the default, then enable auto top-up again.",
        )
    await session.flush()


async def profile_by_customer(session: AsyncSession, customer_id: str | None) -> BuyerProfile | None:
    if not customer_id:
        return None
    return await session.scalar(select(BuyerProfile).where(BuyerProfile.processor_customer_id == customer_id))


# --- the owner's routes -------------------------------------------------------------------------------------


async def check_confirmable(
    processor: PaymentProcessor, uows: UnitsOfWork, actor: Actor, pm_id: str
) -> PaymentMethodInfo:
    """The card at the processor, if it is attached to the owner's customer (else 404). Prepare step."""
    user_id = actor.require_user()
    async with uows.uow(write=False) as read:
        profile = await billing.find(read.session, user_id)
    customer_id = profile.processor_customer_id if profile else None
    try:
        info = await processor.payment_method(pm_id)
    except NotFound:
        raise card_not_found(pm_id) from None
    if customer_id is None or info.customer_id != customer_id:
        raise card_not_found(pm_id)
    return info


async def confirm(session: AsyncSession, actor: Actor, info: PaymentMethodInfo) -> PaymentMethodConfirmed:
    """Mirror the checked card now (idempotent: the webhook that follows changes nothing)."""
    user_id = actor.require_user()
    card = await mirror(session, user_id, info)
    if card is None:
        raise card_not_found(info.id)
    profile = await billing.ensure(session, user_id)
    return PaymentMethodConfirmed(
        payment_method=billing.card_view(card, profile.processor_default_payment_method_id),
        profile=await billing.render(session, profile),
    )


async def set_default(session: AsyncSession, actor: Actor, pm_id: str) -> DefaultPaymentMethodUpdated:
    user_id = actor.require_user()
    card = await _find(session, user_id, pm_id)
    if card is None:
        raise card_not_found(pm_id)
    profile = await billing.ensure(session, user_id)
    profile.processor_default_payment_method_id = card.processor_payment_method_id
    await session.flush()
    return DefaultPaymentMethodUpdated(profile=await billing.render(session, profile))


async def detach(processor: PaymentProcessor, uows: UnitsOfWork, actor: Actor, pm_id: str) -> str:
    """Detach the owner's card at the processor (prepare step of the delete; a card already detached there
    is fine). Returns the processor's id of the card; 404 if it is not the owner's."""
    user_id = actor.require_user()
    async with uows.uow(write=False) as read:
        card = await _find(read.session, user_id, pm_id)
        processor_id = card.processor_payment_method_id if card else None
    if processor_id is None:
        raise card_not_found(pm_id)
    try:
        await processor.detach_payment_method(processor_id)
    except CallboardError as exc:
        if exc.code not in ("processor_request_refused", "processor_object_not_found"):
            raise
        log.info("card %s was already detached at the processor (%s)", processor_id, exc.code)
    return processor_id


async def delete(session: AsyncSession, actor: Actor, processor_id: str) -> PaymentMethodDeleted:
    await forget(session, actor.require_user(), processor_id)
    return PaymentMethodDeleted()


async def requester_status(session: AsyncSession, actor: Actor) -> RequesterPaymentMethod:
    """The owner's card readiness for paid jobs: the default saved card, if any."""
    profile = await billing.load(session, actor.require_user())
    balance = await billing.render(session, profile)
    default = next((card for card in balance.payment_methods if card.is_default), None)
    return RequesterPaymentMethod(
        ready=default is not None,
        payment_method=default,
        processor_customer_id=profile.processor_customer_id,
        auto_topup_enabled=profile.autotopup_enabled,
        setup_route=hint("{OWNER_CARD_SETUP}"),
    )


# --- processor events ---------------------------------------------------------------------------------------


async def on_card_attached(session: AsyncSession, event: CardAttached) -> None:
    profile = await profile_by_customer(session, event.customer_id)
    if profile is not None:
        await mirror(session, profile.user_id, event.card)


async def on_card_setup_succeeded(session: AsyncSession, event: CardSetupSucceeded) -> None:
    profile = await profile_by_customer(session, event.customer_id)
    if profile is None or event.payment_method_id is None:
        return
    # The id only: the card's details come with CardAttached (the upsert keeps them).
    info = event.card or PaymentMethodInfo(
        id=event.payment_method_id, type="card", brand=None, last4=None, exp_month=None, exp_year=None
    )
    await mirror(session, profile.user_id, info)


async def on_card_detached(session: AsyncSession, event: CardDetached) -> None:
    profile = await profile_by_customer(session, event.customer_id)
    if profile is not None:
        await forget(session, profile.user_id, event.payment_method_id)
