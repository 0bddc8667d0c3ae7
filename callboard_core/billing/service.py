"""The owner's buyer balance and billing settings.

Whose profile: always the acting owner's own. A signed-in owner acts for themselves; an API key acts for
its owner (an agent's key: the agent's owner; an owner-level key: that owner). A provisional agent has no
owner yet, so it has no balance to show: 403 `agent_not_claimed`. No function takes another user's id.

The profile row is created on first write (race-safe: the insert runs in a savepoint and the loser of the
unique user_id index reads the winner's row). A read never writes: an owner with no row yet reads the
defaults, under the id the row will get (`profile_id`, derived from the user's), so the id a client saw
before the first write is the one it keeps.

Limits and auto top-up are the owner's own settings: no audit row (as for the owner's other settings).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.billing.models import BuyerProfile, SavedCard
from callboard_core.billing.schemas import (
    AutoTopupUpdate,
    BillingStatement,
    BuyerBalance,
    LimitsUpdate,
    PaymentMethod,
)
from callboard_core.errors import Conflict, Forbidden, ValidationFailed
from callboard_core.guidance import Act, step
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import Currency
from callboard_core.principals import Actor


def owner_of(actor: Actor) -> str:
    """The user whose billing the actor sees: the signed-in person, else the API key's owner."""
    if actor.user_id is not None:
        return actor.user_id
    key = actor.require_key()
    if key.owner_id is None:
        raise Forbidden(
            "This agent has no owner yet, so it has no balance: its owner must claim it first (with the "
            "claim link from registration), then its paid jobs draw on the owner's balance.",
            code="agent_not_claimed",
        )
    return key.owner_id


# --- the profile row -------------------------------------------------------------------------------------


async def find(session: AsyncSession, user_id: str) -> BuyerProfile | None:
    return await session.scalar(select(BuyerProfile).where(BuyerProfile.user_id == user_id))


async def ensure(session: AsyncSession, user_id: str) -> BuyerProfile:
    """The user's profile in a write session, created with the defaults if missing (race-safe)."""
    existing = await find(session, user_id)
    if existing is not None:
        return existing
    profile = _defaults(user_id)
    await session.flush()  # the caller's pending rows must not ride in (and roll back with) our savepoint
    try:
        async with session.begin_nested():
            session.add(profile)
            await session.flush()
    except IntegrityError:
        existing = await find(session, user_id)
        if existing is None:
            raise
        return existing
    return profile


def profile_id(user_id: str) -> str:
    """The id of the user's profile row: derived from the user's id, so a read before the row exists shows
    the id the first write gives it."""
    return "bpf_" + (user_id.partition("_")[2] or user_id)


def _defaults(user_id: str) -> BuyerProfile:
    return BuyerProfile(
        id=profile_id(user_id), user_id=user_id, currency=Currency.USD, autotopup_enabled=False
    )


async def load(session: AsyncSession, user_id: str) -> BuyerProfile:
    """The user's profile for a read: the row, else the defaults it will be created with (never added to
    the session: a read writes nothing)."""
    return await find(session, user_id) or _defaults(user_id)


def card_view(card: SavedCard, default_id: str | None) -> PaymentMethod:
    return PaymentMethod(
        id=card.id,
        processor_payment_method_id=card.processor_payment_method_id,
        type=card.type,
        brand=card.brand,
        last4=card.last4,
        exp_month=card.exp_month,
        exp_year=card.exp_year,
        is_default=card.processor_payment_method_id == default_id,
    )


async def saved_cards(session: AsyncSession, user_id: str) -> list[SavedCard]:
    """The owner's saved cards, oldest first."""
    rows = await session.scalars(
        select(SavedCard).where(SavedCard.user_id == user_id).order_by(SavedCard.created_at, SavedCard.id)
    )
    return list(rows)


async def render(session: AsyncSession, profile: BuyerProfile) -> BuyerBalance:
    """The profile as the BuyerBalance: money from the ledger, the saved cards from their mirror."""
    money = await ledger.balances(session, profile.user_id)
    default_id = profile.processor_default_payment_method_id
    return BuyerBalance(
        id=profile.id,
        user_id=profile.user_id,
        balance_cents=money.balance_cents,
        reserved_cents=money.reserved_cents,
        available_cents=money.available_cents,
        currency=profile.currency,
        auto_topup_enabled=profile.autotopup_enabled,
        processor_customer_id=profile.processor_customer_id,
        processor_default_payment_method_id=profile.processor_default_payment_method_id,
        auto_topup_threshold_cents=profile.autotopup_threshold_cents,
        auto_topup_amount_cents=profile.autotopup_amount_cents,
        daily_spend_cap_cents=profile.daily_spend_cap_cents,
        per_task_cap_cents=profile.per_task_cap_cents,
        auto_topup_disabled_reason=profile.autotopup_disabled_reason,
        payment_methods=[card_view(c, default_id) for c in await saved_cards(session, profile.user_id)],
    )


# --- reads -----------------------------------------------------------------------------------------------


async def balance(session: AsyncSession, actor: Actor) -> BuyerBalance:
    """The acting owner's balance and settings (see the module docstring for whose)."""
    user_id = owner_of(actor)
    return await render(session, await load(session, user_id))


async def statement(
    session: AsyncSession, actor: Actor, *, cursor: str | None = None, limit: int = 50
) -> BillingStatement:
    """The acting owner's profile and one page of their ledger entries, newest first."""
    user_id = owner_of(actor)
    profile = await render(session, await load(session, user_id))
    page = await ledger.statement(session, user_id, cursor=cursor, limit=limit)
    return BillingStatement(profile=profile, entries=page.entries, next_cursor=page.next_cursor)


# --- the owner's settings --------------------------------------------------------------------------------


def _fields_error(message: str, code: str, *fields: str) -> ValidationFailed:
    return ValidationFailed(
        message, errors=[{"field": field, "code": code, "message": message} for field in fields]
    )


async def set_limits(session: AsyncSession, actor: Actor, body: LimitsUpdate) -> BuyerBalance:
    """Set or clear the spend caps (null clears; an omitted field is unchanged). The per-task cap may not
    exceed the daily cap when both are set (422 naming both)."""
    profile = await ensure(session, actor.require_user())
    given = body.model_fields_set
    per_task = body.per_task_cap_cents if "per_task_cap_cents" in given else profile.per_task_cap_cents
    daily = body.daily_spend_cap_cents if "daily_spend_cap_cents" in given else profile.daily_spend_cap_cents
    if per_task is not None and daily is not None and per_task > daily:
        raise _fields_error(
            f"The per-task cap ({per_task} cents) is above the daily spend cap ({daily} cents): lower "
            "perTaskCapCents or raise dailySpendCapCents (null clears a cap).",
            "per_task_cap_above_daily_cap",
            "perTaskCapCents",
            "dailySpendCapCents",
        )
    profile.per_task_cap_cents = per_task
    profile.daily_spend_cap_cents = daily
    await session.flush()
    return await render(session, profile)


async def set_autotopup(session: AsyncSession, actor: Actor, body: AutoTopupUpdate) -> BuyerBalance:
    """Turn auto top-up on or off, with its threshold and amount (null clears, omitted keeps).

    Disabling always works and clears `autoTopupDisabledReason`. Enabling needs a threshold and an amount
    (422 naming the missing ones) and a default saved card (409 `default_payment_method_required`)."""
    profile = await ensure(session, actor.require_user())
    given = body.model_fields_set
    threshold = body.threshold_cents if "threshold_cents" in given else profile.autotopup_threshold_cents
    amount = body.amount_cents if "amount_cents" in given else profile.autotopup_amount_cents
    if body.enabled:
        missing = [
            name for name, value in (("thresholdCents", threshold), ("amountCents", amount)) if value is None
        ]
        if missing:
            raise _fields_error(
                "Enabling auto top-up needs a threshold (top up when the available balance falls below it) "
                "and an amount (how much to add, at least 100 cents): send " + " and ".join(missing) + ".",
                "required_to_enable",
                *missing,
            )
        if profile.processor_default_payment_method_id is None:
            raise Conflict(
                "Auto top-up charges your default saved card, and you have none: save a card (it becomes "
                "the default), then enable auto top-up again.",
                code="default_payment_method_required",
                next_action=step(
                    Act.OWNER_SAVE_CARD, "Save a card; the first one saved becomes the default."
                ),
            )
    profile.autotopup_threshold_cents = threshold
    profile.autotopup_amount_cents = amount
    profile.autotopup_enabled = body.enabled
    profile.autotopup_disabled_reason = None
    await session.flush()
    return await render(session, profile)


async def turn_off_autotopup(session: AsyncSession, profile: BuyerProfile, reason: str) -> None:
    """The platform turns auto top-up off (its card declined or removed) and says why in
    `autoTopupDisabledReason`; the owner clears it by enabling auto top-up again. Already off: unchanged."""
    if profile.autotopup_enabled:
        profile.autotopup_enabled = False
        profile.autotopup_disabled_reason = reason
        await session.flush()
