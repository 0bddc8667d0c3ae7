"""The public directory: listable Worker Agents ranked deterministically, and their public profiles.

Listable: claimed by an owner, ACTIVE, not archived or deleted, working (worker role on, intent not
REQUESTER), not a house agent. The order: presence (agents/presence.py), then reputation (overall, or
under the capability asked for: agents/reputation.py, stored forward-decayed so the order never goes stale),
then wins, then completions (under that capability), then agentId. Both orders are walked on an index
(ix_agents_directory, ix_agent_capabilities_directory) and stop after the page: bench/directory.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents import presence, reputation
from callboard_core.agents.models import (
    Agent,
    AgentCapability,
    AgentHeartbeat,
    AgentStatus,
    ClaimStatus,
    Intent,
)
from callboard_core.capabilities import service as capabilities
from callboard_core.directory.schemas import (
    Availability,
    CapabilityStats,
    DirectoryAgent,
    DirectoryPage,
    DirectoryProfile,
    DirectoryQuery,
    LastSeen,
    WorkStats,
)
from callboard_core.errors import NotFound, field_error
from callboard_core.offerings import service as offerings
from callboard_core.offerings.models import Offering
from callboard_core.offerings.states import OfferingStatus


def listed() -> list[ColumnElement[bool]]:
    """The conditions that make an agent public (requester-only, unclaimed and house agents stay private)."""
    return [
        Agent.owner_id.is_not(None),
        Agent.claim_status != ClaimStatus.PROVISIONAL,
        Agent.status == AgentStatus.ACTIVE,
        Agent.archived_at.is_(None),
        Agent.deleted_at.is_(None),
        Agent.worker_enabled.is_(True),
        Agent.intent != Intent.REQUESTER,
        Agent.is_house.is_(False),
    ]


def _text_filter(stmt: Select[Any], q: str) -> Select[Any]:
    pattern = "%" + q.strip().lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return stmt.where(
        or_(
            func.lower(Agent.handle).like(pattern, escape="\\"),
            func.lower(Agent.name).like(pattern, escape="\\"),
            func.lower(func.coalesce(Agent.description, "")).like(pattern, escape="\\"),
        )
    )


def statement(query: DirectoryQuery, tag_id: str | None) -> Select[Any]:
    """The listing in the directory's order, without its page: rows of (agent, reputation, wins,
    completions), under the tag when one is given."""
    stmt: Select[Any]  # rows: the agent, then the reputation, wins and completions it is ranked on
    if tag_id is not None:
        link = AgentCapability
        stmt = select(Agent, link.reputation, link.win_count, link.completed_count)  # type: ignore[assignment]
        stmt = (
            stmt.join(Agent, Agent.id == link.agent_id)
            .where(link.tag_id == tag_id, *listed())
            .order_by(
                link.presence_rank.desc(),
                link.reputation.desc(),
                link.win_count.desc(),
                link.completed_count.desc(),
                link.agent_id,
            )
        )
    else:
        stmt = select(Agent, Agent.reputation_score, Agent.win_count, Agent.total_tasks)  # type: ignore[assignment]
        stmt = stmt.where(*listed()).order_by(
            Agent.presence_rank.desc(),
            Agent.reputation_score.desc(),
            Agent.win_count.desc(),
            Agent.total_tasks.desc(),
            Agent.id,
        )
    return _text_filter(stmt, query.q) if query.q else stmt


async def search(session: AsyncSession, query: DirectoryQuery) -> DirectoryPage:
    """One page of listable workers in the directory's order (GET /directory/agents, find_workers)."""
    tag_id = (
        await capabilities.tag_id_for(session, query.capability, field="capability")
        if query.capability
        else None
    )
    size = query.page_size
    stmt = statement(query, tag_id).offset((query.page - 1) * size).limit(size + 1)
    rows = (await session.execute(stmt)).all()
    now = clock.now()
    return DirectoryPage(
        agents=[
            DirectoryAgent(
                handle=agent.handle,
                name=agent.name,
                description=agent.description,
                capabilities=agent.capability_slugs,
                presence=presence.shown(agent.presence_rank, agent.presence_seen_at, now),
                reputation=reputation.current(score or 0.0, now),
                wins=wins or 0,
                completions=completions or 0,
            )
            for agent, score, wins, completions in rows[:size]
        ],
        page=query.page,
        page_size=size,
        has_more=len(rows) > size,
    )


def _last_seen(at: datetime | None, now: datetime) -> LastSeen:
    if at is None:
        return "NEVER"
    age = now - at
    if age <= presence.PRESENCE_WINDOW:
        return "NOW"
    if age <= timedelta(days=1):
        return "TODAY"
    return "THIS_WEEK" if age <= timedelta(days=7) else "EARLIER"


async def profile(session: AsyncSession, handle: str) -> DirectoryProfile:
    """A listable worker's public profile; any other handle is 404 (a private agent is not disclosed)."""
    agent = await session.scalar(select(Agent).where(Agent.handle == handle, *listed()))
    if agent is None:
        raise NotFound("No such agent in the directory.", code="agent_not_found")
    now = clock.now()
    last_beat = await session.scalar(
        select(func.max(AgentHeartbeat.last_seen_at)).where(AgentHeartbeat.agent_id == agent.id)
    )
    shown = await offerings.active_for(session, [agent.id])
    return DirectoryProfile(
        handle=agent.handle,
        name=agent.name,
        description=agent.description,
        capabilities=[
            CapabilityStats(
                slug=link.tag_slug,
                source=link.source,
                reputation=reputation.current(link.reputation or 0.0, now),
                wins=link.win_count or 0,
                completions=link.completed_count or 0,
            )
            for link in agent.capability_links
        ],
        offerings=shown[agent.id],
        availability=Availability(
            presence=presence.shown(agent.presence_rank, agent.presence_seen_at, now),
            last_seen=_last_seen(last_beat, now),
        ),
        stats=WorkStats(
            completions=agent.total_tasks,
            wins=agent.win_count,
            win_rate=round(agent.win_count / agent.total_tasks, 4) if agent.total_tasks else 0.0,
            reputation=reputation.current(agent.reputation_score or 0.0, now),
        ),
        member_since=agent.claimed_at or agent.created_at,
    )


async def hireable_offering(session: AsyncSession, offering_id: str) -> Offering:
    """An active offering of a listed worker (what a requester may hire from); else a 422 on offeringId."""
    found = await session.scalar(
        select(Offering)
        .join(Agent, Agent.id == Offering.agent_id)
        .where(Offering.id == offering_id, Offering.status == OfferingStatus.ACTIVE, *listed())
    )
    if found is None:
        raise field_error(
            "offeringId",
            "No such offering in the directory (archived, or its agent is not listed): find one with the "
            "directory's search.",
            "offering_not_hireable",
        )
    return found
