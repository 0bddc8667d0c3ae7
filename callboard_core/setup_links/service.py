"""Setup links: create (the agent), read (the agent, its own only), the public preview, the owner's start
and the processor events that complete a link.

The URL's code is an unguessable secret (`tokens.new_token`, only its hash stored), shown once in the
answer that creates the link, like a claim link. Starting a link calls the processor, so it runs as a
`prepare` step (no write transaction held) followed by a write step that records the start.

Whose payout account a PAYOUT link onboards: the owner's own (it pays every agent of the owner that has no
payout account of its own; see docs/decisions.md). A CARD link saves a card to the owner's processor
customer (`billing.cards.begin_card_setup`, as the owner's own add-a-card route does).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.agents import service as agents
from callboard_core.agents.models import Agent
from callboard_core.billing import cards
from callboard_core.config import Settings
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Forbidden, Gone, NotFound
from callboard_core.payouts import accounts as payout_accounts
from callboard_core.payouts.schemas import OnboardingLink
from callboard_core.principals import Actor
from callboard_core.processor import PaymentProcessor
from callboard_core.processor.events import AccountUpdated, CardSetupSucceeded, CheckoutCompleted
from callboard_core.security import tokens
from callboard_core.setup_links.models import SetupLink, SetupLinkStart
from callboard_core.setup_links.schemas import (
    SetupLinkAgent,
    SetupLinkCreate,
    SetupLinkPreview,
    SetupLinkStarted,
    SetupLinkView,
)
from callboard_core.setup_links.states import (
    SETUP_LINK_MOVES,
    SETUP_LINK_TTL,
    SetupLinkKind,
    SetupLinkStatus,
)

PAGE_PATH = "/setup"  # the page an owner opens: {base_url}/setup/{code}


def _not_found() -> NotFound:
    return NotFound("No such setup link.", code="setup_link_not_found")


def shown_status(link: SetupLink) -> str:
    if link.status != SetupLinkStatus.COMPLETED and link.expires_at <= clock.now():
        return SetupLinkStatus.EXPIRED
    return link.status


def _view(link: SetupLink, url: str | None = None) -> SetupLinkView:
    return SetupLinkView(
        id=link.id,
        kind=link.kind,
        status=shown_status(link),
        url=url,
        expires_at=link.expires_at,
        completed_at=link.completed_at,
    )


# --- the agent's side ------------------------------------------------------------------------------


async def create(
    session: AsyncSession,
    settings: Settings,
    actor: Actor,
    body: SetupLinkCreate,
    *,
    processor_account_id: str | None = None,
) -> SetupLinkView:
    """A new link for the calling agent's owner; its URL is in this answer only. A PAYOUT link onboards the
    owner's own payout account, or the account `processor_account_id` names (the agent's own)."""
    agent = await agents.get_live(session, actor.require_agent())
    if agent.owner_id is None:
        raise Forbidden(
            "This agent has no owner yet: hand your owner the claim link from registration first; once they "
            "have claimed you, ask for a setup link again.",
            code="agent_not_claimed",
        )
    code = tokens.new_token(24)
    link = SetupLink(
        agent_id=agent.id,
        user_id=agent.owner_id,
        kind=body.kind,
        status=SetupLinkStatus.PENDING,
        code_hash=tokens.hash_token(code),
        expires_at=clock.now() + SETUP_LINK_TTL,
        start_count=0,
        processor_account_id=processor_account_id,
    )
    session.add(link)
    await session.flush()
    return _view(link, f"{settings.base_url.rstrip('/')}{PAGE_PATH}/{code}")


async def read(session: AsyncSession, actor: Actor, link_id: str) -> SetupLinkView:
    """The calling agent's own link (another agent's is 404)."""
    link = await session.get(SetupLink, link_id, populate_existing=True)
    if link is None or link.agent_id != actor.require_agent():
        raise _not_found()
    return _view(link)


# --- the owner's side ------------------------------------------------------------------------------


async def _by_code(session: AsyncSession, code: str) -> SetupLink:
    link = await session.scalar(
        select(SetupLink)
        .where(SetupLink.code_hash == tokens.hash_token(code))
        .execution_options(populate_existing=True)
    )
    if link is None:
        raise _not_found()
    return link


async def preview(session: AsyncSession, code: str) -> SetupLinkPreview:
    """The public preview: the kind, the status, which agent asks, until when (nothing private)."""
    link = await _by_code(session, code)
    agent = await session.get(Agent, link.agent_id)
    if agent is None or agent.deleted_at is not None:
        raise _not_found()
    return SetupLinkPreview(
        kind=link.kind,
        status=shown_status(link),
        agent=SetupLinkAgent(handle=agent.handle, name=agent.name),
        expires_at=link.expires_at,
    )


async def _startable(session: AsyncSession, actor: Actor, code: str) -> SetupLink:
    link = await _by_code(session, code)
    if link.user_id != actor.require_user():
        raise _not_found()  # another owner's link is indistinguishable from a missing one
    status = shown_status(link)
    if status == SetupLinkStatus.EXPIRED:
        raise Gone(
            "This setup link has expired: ask your agent for a new one.",
            code="setup_link_expired",
            current_state=status,
        )
    if status == SetupLinkStatus.COMPLETED:
        raise states.conflict(
            "This setup is already complete: nothing more to do.",
            code="setup_link_completed",
            current=status,
        )
    return link


@dataclass(frozen=True)
class PreparedStart:
    link_id: str
    number: int
    url: str
    processor_ref: str
    setup_intent_id: str | None = None
    payout_account_row_id: str | None = None


async def prepare_start(
    session: AsyncSession,
    uows: UnitsOfWork,
    processor: PaymentProcessor,
    settings: Settings,
    actor: Actor,
    code: str,
) -> PreparedStart:
    """The prepare step of a start: a fresh hosted flow at the processor (no write transaction held)."""
    link = await _startable(session, actor, code)
    number = link.start_count + 1
    home = settings.base_url.rstrip("/") + "/"
    if link.kind == SetupLinkKind.PAYOUT:
        # The account the link names (an agent's own, or the owner's after a first start), if it is still
        # this owner's; else the owner's own.
        named = link.processor_account_id and await payout_accounts.find_by_processor_id(
            session, link.processor_account_id
        )
        if named and named.user_id == link.user_id:
            row_id, account_id = named.id, str(link.processor_account_id)
        else:
            holder = payout_accounts.Holder(link.user_id)
            row_id, account_id = await payout_accounts.processor_account(session, uows, processor, holder)
        account_link = await processor.create_account_link(account_id, home, home)
        return PreparedStart(link.id, number, account_link.url, account_id, payout_account_row_id=row_id)
    setup = await cards.begin_card_setup(processor, uows, settings, link.user_id, return_url=home)
    intent = setup.client_secret.split("_secret_")[0] if setup.client_secret else None
    return PreparedStart(link.id, number, setup.url, setup.id, setup_intent_id=intent)


async def start(session: AsyncSession, actor: Actor, code: str, prepared: PreparedStart) -> SetupLinkStarted:
    """The write step of a start: the link is STARTED and keeps the flow, so the processor's word on it
    completes the link."""
    link = await _startable(session, actor, code)
    await states.compare_and_set(session, SetupLink, link.id, SETUP_LINK_MOVES, SetupLinkStatus.STARTED)
    values: dict[str, object] = {"start_count": max(link.start_count, prepared.number)}
    if prepared.payout_account_row_id is not None:
        values["processor_account_id"] = prepared.processor_ref
        await payout_accounts.record_account(session, prepared.payout_account_row_id, prepared.processor_ref)
    await session.execute(
        update(SetupLink)
        .where(SetupLink.id == link.id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    session.add(
        SetupLinkStart(
            setup_link_id=link.id,
            number=prepared.number,
            processor_ref=prepared.processor_ref,
            setup_intent_id=prepared.setup_intent_id,
        )
    )
    await session.flush()
    return SetupLinkStarted(url=prepared.url)


# --- the processor's word ------------------------------------------------------------------------


async def _complete(session: AsyncSession, link_ids: list[str]) -> None:
    for link_id in dict.fromkeys(link_ids):
        await states.compare_and_set(
            session,
            SetupLink,
            link_id,
            SETUP_LINK_MOVES,
            SetupLinkStatus.COMPLETED,
            completed_at=clock.now(),
        )


async def on_account_updated(session: AsyncSession, event: AccountUpdated) -> None:
    """A PAYOUT link is complete once its account has its details submitted and payouts enabled."""
    if not (event.status.details_submitted and event.status.payouts_enabled):
        return
    ids = await session.scalars(
        select(SetupLink.id).where(
            SetupLink.processor_account_id == event.account_id, SetupLink.kind == SetupLinkKind.PAYOUT
        )
    )
    await _complete(session, list(ids))


async def on_card_setup_succeeded(session: AsyncSession, event: CardSetupSucceeded) -> None:
    """A CARD link is complete when a card setup it started succeeded."""
    match = SetupLinkStart.setup_intent_id == event.setup_intent_id
    await _complete(session, list(await session.scalars(select(SetupLinkStart.setup_link_id).where(match))))


async def on_checkout_completed(session: AsyncSession, event: CheckoutCompleted) -> None:
    """A CARD link is complete when the hosted checkout it started (in setup mode) completed."""
    if event.mode != "setup":
        return
    match = SetupLinkStart.processor_ref == event.checkout_id
    await _complete(session, list(await session.scalars(select(SetupLinkStart.setup_link_id).where(match))))


# --- an agent's payout onboarding ------------------------------------------------------------------


async def agent_payout_link(
    session: AsyncSession,
    settings: Settings,
    actor: Actor,
    agent_id: str,
    prepared: payout_accounts.PreparedLink,
) -> OnboardingLink:
    """`POST /agents/{agentId}/processor/onboarding-link` by the agent's key: the agent's payout account
    (made by the prepare step) and a PAYOUT setup link for it, which only the signed-in owner can start.
    The processor's own onboarding URL is never handed to a key (whoever opens it decides where the owner's
    earnings are paid)."""
    holder = await payout_accounts.holder_for(session, actor, agent_id)
    await payout_accounts.record_account(session, prepared.account_row_id, prepared.processor_account_id)
    link = await create(
        session,
        settings,
        actor,
        SetupLinkCreate(kind=SetupLinkKind.PAYOUT),
        processor_account_id=prepared.processor_account_id,
    )
    assert link.url is not None
    return OnboardingLink(
        agent_id=holder.agent_id,
        processor_account_id=prepared.processor_account_id,
        url=link.url,
        expires_at=link.expires_at,
    )
