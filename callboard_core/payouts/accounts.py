"""Payout accounts: whose account a request names, the onboarding link, the status refresh and the
`account.updated` handler.

Whose account: `/me/processor/...` is the signed-in owner's own account; `/agents/{agentId}/processor/...`
is that agent's own account, named by the agent itself (its key may name only its own id: any other is
404) or by its owner (`/agents/dashboard/...`: another owner's agent is 404).

Processor calls never run inside a write transaction: the onboarding link's account and link are made in
the action's `prepare` step (the account's row, when missing, is created first in a short write
transaction of its own so its id can key the processor call `connect:<row id>`); the write step records
the account id. A status read asks the processor outside any write and persists what changed in a unit of
work of its own (the spec's status route "refreshes persisted state"; the `account.updated` webhook would
bring the same flags later).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, exists, literal, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock, states
from callboard_core.agents import service as agents
from callboard_core.agents.models import Agent
from callboard_core.config import Settings
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Forbidden, NotFound
from callboard_core.payouts.events import BankPayoutFailed
from callboard_core.payouts.models import AGENT_HOLDER, USER_HOLDER, Payout, PayoutAccount, holder_key
from callboard_core.payouts.schemas import (
    OnboardingLink,
    OnboardingLinkBody,
    PayoutAccountStatus,
    PayoutView,
)
from callboard_core.payouts.states import PAYOUT_MOVES, PayoutStatus
from callboard_core.principals import Actor
from callboard_core.processor import AccountStatus, PaymentProcessor
from callboard_core.processor.events import AccountPayoutFailed, AccountPayoutPaid, AccountUpdated
from callboard_core.security.site_urls import return_url_or_default
from callboard_core.users import service as users

RECENT_PAYOUTS = 20


@dataclass(frozen=True)
class Holder:
    """Whose payout account: the owner's own (agent_id None) or one agent's."""

    user_id: str
    agent_id: str | None = None

    @property
    def key(self) -> str:
        return holder_key(self.user_id, self.agent_id)


async def holder_for(session: AsyncSession, actor: Actor, agent_id: str | None = None) -> Holder:
    """The account the actor names (see the module docstring); 404 for another's agent."""
    if agent_id is None:
        return Holder(actor.require_user())
    if actor.user_id is not None:
        agent = await agents.get_owned(session, agent_id, actor.user_id)
    else:
        if actor.require_agent() != agent_id:
            raise NotFound("No such agent.", code="agent_not_found")
        agent = await agents.get_live(session, agent_id)
    if agent.owner_id is None:
        raise Forbidden(
            "This agent has no owner yet, so it cannot be paid: its owner must claim it first (with the "
            "claim link from registration), then set up payouts.",
            code="agent_not_claimed",
        )
    return Holder(agent.owner_id, agent.id)


async def find(session: AsyncSession, holder: Holder) -> PayoutAccount | None:
    return await session.scalar(select(PayoutAccount).where(PayoutAccount.holder == holder.key))


async def ensure(session: AsyncSession, holder: Holder) -> PayoutAccount:
    """The holder's account row in a write session, created if missing (race-safe on `holder`)."""
    existing = await find(session, holder)
    if existing is not None:
        return existing
    row = PayoutAccount(holder=holder.key, user_id=holder.user_id, agent_id=holder.agent_id)
    await session.flush()
    try:
        async with session.begin_nested():
            session.add(row)
            await session.flush()
    except IntegrityError:
        existing = await find(session, holder)
        if existing is None:
            raise
        return existing
    return row


async def find_by_processor_id(session: AsyncSession, processor_account_id: str) -> PayoutAccount | None:
    return await session.scalar(
        select(PayoutAccount).where(PayoutAccount.processor_account_id == processor_account_id)
    )


# What makes an account ready to be paid.
_CAN_PAY = (PayoutAccount.payouts_enabled.is_(True), PayoutAccount.processor_account_id.is_not(None))
# Built once, both holders bound (an agent-less award binds the owner's twice).
_READY = select(PayoutAccount).where(
    or_(PayoutAccount.holder == bindparam("p_first"), PayoutAccount.holder == bindparam("p_second")),
    *_CAN_PAY,
)
# An award's payout readiness as its read found it (`note_ready`), per (owner, agent).
_READ_READY = "payouts.ready_read"


def ready_in_sql(agent_id: Any, owner_id: Any) -> Any:
    """`ready_account`'s question as a column of a caller's read: whether the award of the agent in column
    `agent_id`, owned by the user in column `owner_id`, has a ready account (its own or its owner's)."""
    return exists().where(
        or_(
            PayoutAccount.holder == literal(AGENT_HOLDER) + agent_id,
            PayoutAccount.holder == literal(USER_HOLDER) + owner_id,
        ),
        *_CAN_PAY,
    )


def note_ready(session: AsyncSession, user_id: str, agent_id: str, ready: bool) -> None:
    """What the caller's read found (`ready_in_sql`) for an award it is making in this transaction: the
    payout it queues asks no further (`is_ready`)."""
    session.info.setdefault(_READ_READY, {})[(user_id, agent_id)] = ready


async def is_ready(session: AsyncSession, user_id: str, agent_id: str | None) -> bool:
    """Whether an award of `agent_id` (of owner `user_id`) has a ready account: as its caller's read found it
    (`note_ready`), else read now."""
    noted = session.info.get(_READ_READY, {}).pop((user_id, agent_id), None)
    if noted is not None:
        return bool(noted)
    return await ready_account(session, user_id, agent_id) is not None


async def ready_account(session: AsyncSession, user_id: str, agent_id: str | None) -> PayoutAccount | None:
    """The account an award of `agent_id` pays: the agent's own when its payouts are enabled, else the
    owner's own when its payouts are enabled, else none (the payout waits)."""
    holders = [holder_key(user_id, agent_id)] if agent_id else []
    holders.append(holder_key(user_id, None))
    rows = (await session.scalars(_READY, {"p_first": holders[0], "p_second": holders[-1]})).all()
    by_holder = {row.holder: row for row in rows}
    return next((by_holder[h] for h in holders if h in by_holder), None)


# --- the processor's facts about an account ----------------------------------------------------------


async def release_waiting(session: AsyncSession, user_id: str) -> list[str]:
    """An account of the owner became ready: their waiting payouts are due now (the send step picks the
    account for each, and sends back to waiting a payout that still has none)."""
    return await states.compare_and_set_where(
        session,
        Payout,
        PAYOUT_MOVES,
        PayoutStatus.PENDING,
        Payout.user_id == user_id,
        next_attempt_at=clock.now(),
    )


async def apply_status(
    session: AsyncSession,
    row_id: str,
    processor_account_id: str,
    status: AccountStatus,
    at: datetime,
) -> bool:
    """Persist the processor's flags unless a newer fact is already applied (events may come out of order:
    `at` is the fact's time, to the second). Mirrors an agent's account onto the agent's record and releases
    the owner's waiting payouts when payouts are enabled. Returns whether the row was updated."""
    at = at.replace(microsecond=0)
    moved = (
        await session.execute(
            update(PayoutAccount)
            .where(
                PayoutAccount.id == row_id,
                or_(PayoutAccount.status_at.is_(None), PayoutAccount.status_at <= at),
                or_(
                    PayoutAccount.processor_account_id.is_(None),
                    PayoutAccount.processor_account_id == processor_account_id,
                ),
            )
            .values(
                processor_account_id=processor_account_id,
                details_submitted=status.details_submitted,
                charges_enabled=status.charges_enabled,
                payouts_enabled=status.payouts_enabled,
                status_at=at,
                updated_at=clock.now(),
            )
            .returning(PayoutAccount.user_id, PayoutAccount.agent_id)
            .execution_options(synchronize_session=False)
        )
    ).first()
    if moved is None:
        return False
    user_id, agent_id = moved
    if agent_id is not None:
        await _mirror_on_agent(session, agent_id, processor_account_id, status)
    if status.payouts_enabled:
        await release_waiting(session, user_id)
    return True


async def _mirror_on_agent(
    session: AsyncSession, agent_id: str, processor_account_id: str, status: AccountStatus | None
) -> None:
    """The agent record's processor fields (the spec's Agent shape) follow its own payout account."""
    values: dict[str, Any] = {"processor_account_id": processor_account_id}
    if status is not None:
        values.update(
            processor_onboarding_complete=status.details_submitted,
            processor_charges_enabled=status.charges_enabled,
            processor_payouts_enabled=status.payouts_enabled,
        )
    await session.execute(
        update(Agent)
        .where(Agent.id == agent_id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )


async def account_of_event(session: AsyncSession, event: AccountUpdated) -> PayoutAccount | None:
    """Our row for an account event: by the processor account id, else by the row id we gave the
    processor as `owner_ref` (an account whose creation the write step never recorded)."""
    row = await find_by_processor_id(session, event.account_id)
    if row is None:
        owner_ref = event.metadata.get("owner_ref")
        if owner_ref:
            row = await session.get(PayoutAccount, owner_ref)
    return row


async def on_account_updated(session: AsyncSession, event: AccountUpdated) -> None:
    """`AccountUpdated`: persist the flags (a repeat or an older event changes nothing)."""
    row = await account_of_event(session, event)
    if row is None:
        return
    await apply_status(session, row.id, event.account_id, event.status, event.created)


async def _bank_payout_row(session: AsyncSession, account_id: str, created: datetime) -> PayoutAccount | None:
    """The account a bank payout event concerns, unless the event is older than the failure on record."""
    row = await find_by_processor_id(session, account_id)
    if row is None or (row.bank_payout_failed_at is not None and created < row.bank_payout_failed_at):
        return None
    return row


async def on_bank_payout_paid(session: AsyncSession, event: AccountPayoutPaid) -> None:
    """A later bank payout landed: the failure on record is cleared."""
    row = await _bank_payout_row(session, event.account_id, event.created)
    if row is not None:
        row.bank_payout_error, row.bank_payout_failed_at = None, None
        await session.flush()


async def on_bank_payout_failed(session: AsyncSession, event: AccountPayoutFailed) -> None:
    """A connected account's bank payout failed. The money left the platform with the transfer, so no
    ledger movement: the account remembers the failure for its holder to see in the status, and
    `BankPayoutFailed` is published."""
    row = await _bank_payout_row(session, event.account_id, event.created)
    if row is None:
        return
    reason = event.reason
    row.bank_payout_error, row.bank_payout_failed_at = reason, event.created
    await session.flush()
    await bus.publish(session, BankPayoutFailed(row, reason))


# --- onboarding links ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedLink:
    """What the prepare step got from the processor, for the write step to record. No `url` for an agent's
    key: the processor's onboarding URL goes to the owner's session only (see `prepare_link`)."""

    account_row_id: str
    processor_account_id: str
    url: str | None
    expires_at: datetime | None


async def processor_account(
    session: AsyncSession, uows: UnitsOfWork, processor: PaymentProcessor, holder: Holder
) -> tuple[str, str]:
    """(row id, processor account id) of the holder's account, creating the row (in a short write
    transaction of its own) and the Connect account (`connect:<row id>`) when missing. Runs outside any
    write transaction: call it from a prepare step."""
    row = await find(session, holder)
    if row is None:
        async with uows.uow() as write:
            row = await ensure(write.session, holder)
    if row.processor_account_id:
        return row.id, row.processor_account_id
    email = (await users.get(session, holder.user_id)).email
    account_id = await processor.create_connect_account(row.id, email, idempotency_key=f"connect:{row.id}")
    return row.id, account_id


async def prepare_link(
    session: AsyncSession,
    uows: UnitsOfWork,
    processor: PaymentProcessor,
    settings: Settings,
    actor: Actor,
    agent_id: str | None,
    body: OnboardingLinkBody | None,
) -> PreparedLink:
    """The prepare step of an onboarding link: the account, and for the owner's session a fresh hosted
    onboarding link returning to this site. Whoever opens the processor's link chooses the bank account the
    owner's earnings go to, so an agent's key never gets one: its write step hands out a setup link that
    only the signed-in owner can complete (`setup_links.service.agent_payout_link`)."""
    holder = await holder_for(session, actor, agent_id)
    return_url = return_url_or_default(settings, body.return_url if body else None, "returnUrl")
    refresh_url = return_url_or_default(settings, body.refresh_url if body else None, "refreshUrl")
    row_id, account_id = await processor_account(session, uows, processor, holder)
    if actor.user_id is None:
        return PreparedLink(row_id, account_id, None, None)
    link = await processor.create_account_link(account_id, return_url, refresh_url)
    return PreparedLink(row_id, account_id, link.url, link.expires_at)


async def record_account(session: AsyncSession, row_id: str, processor_account_id: str) -> None:
    """The write step's half: the row keeps the account the processor made (once; a repeat is a no-op)."""
    row = (
        await session.execute(
            update(PayoutAccount)
            .where(PayoutAccount.id == row_id, PayoutAccount.processor_account_id.is_(None))
            .values(processor_account_id=processor_account_id, updated_at=clock.now())
            .returning(PayoutAccount.agent_id)
            .execution_options(synchronize_session=False)
        )
    ).first()
    if row is not None and row.agent_id is not None:
        await _mirror_on_agent(session, row.agent_id, processor_account_id, None)


async def onboarding_link(
    session: AsyncSession, actor: Actor, agent_id: str | None, prepared: PreparedLink
) -> OnboardingLink:
    """Record the account the prepare step made and answer with its onboarding link."""
    holder = await holder_for(session, actor, agent_id)  # still the actor's (nothing moved in between)
    await record_account(session, prepared.account_row_id, prepared.processor_account_id)
    assert prepared.url is not None and prepared.expires_at is not None, "the owner's session only"
    return OnboardingLink(
        agent_id=holder.agent_id,
        processor_account_id=prepared.processor_account_id,
        url=prepared.url,
        expires_at=prepared.expires_at,
    )


# --- status ----------------------------------------------------------------------------------------


def payout_view(p: Payout) -> PayoutView:
    return PayoutView(
        id=p.id,
        status=p.status,
        amount_cents=p.amount_cents,
        currency=p.currency,
        job_id=p.job_id,
        worker_agent_id=p.worker_agent_id,
        attempts=p.attempts,
        next_attempt_at=p.next_attempt_at,
        last_error=p.last_error,
        processor_account_id=p.processor_account_id,
        processor_transfer_id=p.processor_transfer_id,
        paid_at=p.paid_at,
        created_at=p.created_at,
    )


async def recent_payouts(session: AsyncSession, holder: Holder) -> list[PayoutView]:
    query = select(Payout).where(Payout.user_id == holder.user_id)
    if holder.agent_id is not None:
        query = query.where(Payout.worker_agent_id == holder.agent_id)
    rows = await session.scalars(
        query.order_by(Payout.created_at.desc(), Payout.id.desc())
        .limit(RECENT_PAYOUTS)
        .execution_options(populate_existing=True)
    )
    return [payout_view(p) for p in rows]


async def status(
    session: AsyncSession,
    uows: UnitsOfWork,
    processor: PaymentProcessor,
    actor: Actor,
    agent_id: str | None = None,
) -> PayoutAccountStatus:
    """The account's flags, refreshed from the processor and persisted when they changed (in a unit of work
    of its own: the read's session never writes); no account yet: nulls and false."""
    holder = await holder_for(session, actor, agent_id)
    row = await find(session, holder)
    flags = AccountStatus(False, False, False)
    account_id = row.processor_account_id if row is not None else None
    if row is not None and account_id is not None:
        flags = await processor.account_status(account_id)
        current = AccountStatus(row.details_submitted, row.charges_enabled, row.payouts_enabled)
        if flags != current:
            async with uows.uow() as write:
                await apply_status(write.session, row.id, account_id, flags, clock.now())
    return PayoutAccountStatus(
        agent_id=holder.agent_id,
        processor_account_id=account_id,
        processor_onboarding_complete=flags.details_submitted,
        processor_charges_enabled=flags.charges_enabled,
        processor_payouts_enabled=flags.payouts_enabled,
        bank_payout_error=row.bank_payout_error if row is not None else None,
        bank_payout_failed_at=row.bank_payout_failed_at if row is not None else None,
        payouts=await recent_payouts(session, holder),
    )
