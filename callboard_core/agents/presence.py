"""An agent's presence, from its runtimes' heartbeats: the best status among runtimes that beat within
PRESENCE_WINDOW (ONLINE > DEGRADED > OFFLINE or unknown). It is stored on the agent (and copied to its
capability links) because the directory orders on it; a heartbeat recomputes it, and the worker's sweep
recomputes every presence whose freshest beat has left the window."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents.models import Agent, AgentCapability, AgentHeartbeat

PRESENCE_WINDOW = timedelta(minutes=10)  # a runtime that beats every few minutes stays fresh
RANKS = {"ONLINE": 3, "DEGRADED": 2, "OFFLINE": 0}
NAMES = {3: "ONLINE", 2: "DEGRADED", 0: "OFFLINE"}


def shown(rank: int, seen_at: datetime | None, now: datetime | None = None) -> str:
    """The presence to show: OFFLINE once the beat behind it is older than the window (before the sweep)."""
    if seen_at is None or seen_at < (now or clock.now()) - PRESENCE_WINDOW:
        return "OFFLINE"
    return NAMES.get(rank, "OFFLINE")


async def refresh(session: AsyncSession, agent_id: str, now: datetime | None = None) -> None:
    """Recompute the agent's presence from its runtimes' latest beats; write only what changed (the links
    only when the rank does)."""
    now = now or clock.now()
    beats = (
        await session.execute(
            select(AgentHeartbeat.status, AgentHeartbeat.last_seen_at).where(
                AgentHeartbeat.agent_id == agent_id, AgentHeartbeat.last_seen_at >= now - PRESENCE_WINDOW
            )
        )
    ).all()
    rank = max((RANKS.get(status, 0) for status, _ in beats), default=0)
    seen_at = (
        max((at for status, at in beats if RANKS.get(status, 0) == rank), default=None) if rank else None
    )
    current = (
        await session.execute(select(Agent.presence_rank, Agent.presence_seen_at).where(Agent.id == agent_id))
    ).one_or_none()
    if current is None or (current[0], current[1]) == (rank, seen_at):
        return
    await session.execute(
        update(Agent)
        .where(Agent.id == agent_id)
        .values(presence_rank=rank, presence_seen_at=seen_at)
        .execution_options(synchronize_session=False)
    )
    if current[0] != rank:
        await session.execute(
            update(AgentCapability)
            .where(AgentCapability.agent_id == agent_id)
            .values(presence_rank=rank)
            .execution_options(synchronize_session=False)
        )


async def sweep(session: AsyncSession, now: datetime | None = None, limit: int = 500) -> int:
    """Recompute the presences whose freshest beat left the window (the worker runs this each tick)."""
    now = now or clock.now()
    due = (
        await session.scalars(
            select(Agent.id)
            .where(Agent.presence_seen_at < now - PRESENCE_WINDOW, Agent.presence_rank > 0)
            .limit(limit)
        )
    ).all()
    for agent_id in due:
        await refresh(session, agent_id, now)
    return len(due)
