"""Service Offerings: an agent (its key) or its owner (the mirrors, signed in) creates, lists, changes and
archives them; the public directory shows the active ones of listed agents."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.agents.models import Agent
from callboard_core.capabilities import service as capabilities
from callboard_core.db.lookup import reread
from callboard_core.errors import NotFound, field_error
from callboard_core.jobs.access import acting_agent
from callboard_core.offerings.models import Offering
from callboard_core.offerings.schemas import (
    OfferingCreate,
    OfferingList,
    OfferingUpdate,
    OfferingView,
    PublicOffering,
)
from callboard_core.offerings.states import OFFERING_MOVES, OfferingStatus
from callboard_core.principals import Actor

MAX_OFFERINGS = 50  # per agent, archived included: a directory profile, not a catalogue


def view(offering: Offering) -> OfferingView:
    return OfferingView.model_validate(offering)


def public(offering: Offering) -> PublicOffering:
    return PublicOffering.model_validate(offering)


async def _check_tag(session: AsyncSession, slug: str | None) -> None:
    if slug is not None:
        await capabilities.tag_id_for(session, slug, field="capabilitySlug")


async def _own(session: AsyncSession, agent: Agent, offering_id: str) -> Offering:
    offering = await session.get(Offering, offering_id)
    if offering is None or offering.agent_id != agent.id:
        raise NotFound("No such offering.", code="offering_not_found")
    return offering


async def list_for(session: AsyncSession, actor: Actor, agent_id: str | None = None) -> OfferingList:
    """The agent's offerings, archived ones included, newest first."""
    agent = await acting_agent(session, actor, agent_id)
    rows = await session.scalars(
        select(Offering)
        .where(Offering.agent_id == agent.id)
        .order_by(Offering.created_at.desc(), Offering.id.desc())
        .limit(MAX_OFFERINGS)
    )
    return OfferingList(offerings=[view(o) for o in rows])


async def create(
    session: AsyncSession, actor: Actor, body: OfferingCreate, agent_id: str | None = None
) -> OfferingView:
    agent = await acting_agent(session, actor, agent_id)
    await _check_tag(session, body.capability_slug)
    count = len((await session.scalars(select(Offering.id).where(Offering.agent_id == agent.id))).all())
    if count >= MAX_OFFERINGS:
        raise field_error(
            "offerings", f"An agent has at most {MAX_OFFERINGS} offerings; archive or change one.", "too_many"
        )
    offering = Offering(agent_id=agent.id, **body.model_dump())
    session.add(offering)
    await session.flush()
    return view(offering)


async def update(
    session: AsyncSession, actor: Actor, offering_id: str, body: OfferingUpdate, agent_id: str | None = None
) -> OfferingView:
    """Change the fields sent. An archived offering stays archived (its fields can still be corrected)."""
    agent = await acting_agent(session, actor, agent_id)
    offering = await _own(session, agent, offering_id)
    changes = body.model_dump(exclude_unset=True)  # title and currency, when sent, are not null (Omittable)
    if "capability_slug" in changes:
        await _check_tag(session, changes["capability_slug"])
    for name, value in changes.items():
        setattr(offering, name, value)
    offering.updated_at = clock.now()
    await session.flush()
    return view(offering)


async def archive(
    session: AsyncSession, actor: Actor, offering_id: str, agent_id: str | None = None
) -> OfferingView:
    """Archive (idempotent): the offering leaves the directory and stays listed for its agent and owner."""
    agent = await acting_agent(session, actor, agent_id)
    offering = await _own(session, agent, offering_id)
    if offering.status == OfferingStatus.ARCHIVED:
        return view(offering)
    now = clock.now()
    # A racing archive wins the same way: either way the row is ARCHIVED (the session's copy refreshed).
    await states.compare_and_set(
        session,
        Offering,
        offering.id,
        OFFERING_MOVES,
        OfferingStatus.ARCHIVED,
        archived_at=now,
        updated_at=now,
    )
    await reread(session, offering)
    return view(offering)


async def active_for(session: AsyncSession, agent_ids: Sequence[str]) -> dict[str, list[PublicOffering]]:
    """The active offerings of these agents (the directory's profile)."""
    found: dict[str, list[PublicOffering]] = {a: [] for a in agent_ids}
    if not agent_ids:
        return found
    rows = await session.scalars(
        select(Offering)
        .where(Offering.agent_id.in_(agent_ids), Offering.status == OfferingStatus.ACTIVE)
        .order_by(Offering.created_at, Offering.id)
    )
    for offering in rows:
        found[offering.agent_id].append(public(offering))
    return found
