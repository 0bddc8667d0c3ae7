"""A worker's track record: what verified events add to it, how it decays, and how the marketplace reads it.

The job lifecycle (and disputes and staff corrections, when they land) report events here rather than
writing the agent's statistics themselves. One figure, the reputation, per agent (overall) and per agent and
capability tag: it ranks applicants at admission, workers in the directory and in `find_workers`.

Events and their weights (docs/decisions.md, Reputation):
- a completion (a submission on a job that closed, awarded or not): +1; a win adds +3 more;
- an expired slot (admitted, never submitted: the acknowledgement or work deadline missed): -1;
- a dispute lost: -4; a staff correction: any amount, with a reason (audited by the staff console).

Decay: an event's weight halves every HALF_LIFE. It is stored "forward-decayed": an event at time t adds
weight x 2^((t - EPOCH) / HALF_LIFE) to the stored figure, which therefore never has to be rewritten as time
passes; the reputation now is stored / 2^((now - EPOCH) / HALF_LIFE). Every stored figure is divided by the
same factor at any one moment, so comparing stored figures ranks exactly as comparing current ones: indexes
on the stored columns stay valid forever, and a figure copied at application time (admission) compares with
one copied later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents.models import Agent, AgentCapability, CapabilitySource
from callboard_core.db.lookup import by_pk

COMPLETION_WEIGHT = 1.0
WIN_WEIGHT = 3.0  # on top of the completion: a won job counts 4
EXPIRY_WEIGHT = -1.0
DISPUTE_LOST_WEIGHT = -4.0
HALF_LIFE = timedelta(days=180)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def growth(at: datetime | None = None) -> float:
    """The forward-decay factor at `at` (now by default): an event then weighs this much in stored terms."""
    return float(2 ** (((at or clock.now()) - EPOCH) / HALF_LIFE))


def current(stored: float, at: datetime | None = None) -> float:
    """A stored figure as the reputation at `at` (now by default), rounded for display."""
    return round(stored / growth(at), 4)


def stored(value: float, at: datetime | None = None) -> float:
    """The stored figure of a reputation `value` at `at`: what a filter on the stored column compares with."""
    return value * growth(at)


@dataclass(frozen=True)
class CapabilityStanding:
    rookie: bool  # the job's tag is not among the worker's
    reputation: float  # under that tag, stored (forward-decayed) terms


# Untagged jobs are open to every worker: nobody is a rookie on them.
UNTAGGED = CapabilityStanding(rookie=False, reputation=0.0)


def is_new_worker(agent: Agent) -> bool:
    """A new worker has completed no job (practice jobs count nothing)."""
    return agent.total_tasks == 0


async def capability_standing(session: AsyncSession, agent_id: str, tag_id: str | None) -> CapabilityStanding:
    """The worker's standing for a job's capability tag."""
    if tag_id is None:
        return UNTAGGED
    link = await by_pk(session, AgentCapability, (agent_id, tag_id))
    if link is None:
        return CapabilityStanding(rookie=True, reputation=0.0)
    return CapabilityStanding(rookie=False, reputation=link.reputation)


def new_link(agent: Agent, tag_id: str, tag_slug: str, source: str) -> AgentCapability:
    """A capability link, carrying the agent's presence (the directory's index orders on both)."""
    return AgentCapability(
        agent_id=agent.id,
        tag_id=tag_id,
        tag_slug=tag_slug,
        source=source,
        completed_count=0,
        win_count=0,
        reputation=0.0,
        presence_rank=agent.presence_rank or 0,
    )


async def _add(
    session: AsyncSession, agent: Agent, tag_id: str | None, weight: float
) -> AgentCapability | None:
    """Add an event's weight, forward-decayed, to the agent and to its link for the tag (if it has one)."""
    amount = weight * growth()
    agent.reputation_score = (agent.reputation_score or 0.0) + amount
    link = await by_pk(session, AgentCapability, (agent.id, tag_id)) if tag_id else None
    if link is not None:
        link.reputation = (link.reputation or 0.0) + amount
    return link


async def record_completion(
    session: AsyncSession,
    agent: Agent,
    *,
    won: bool,
    tag_id: str | None = None,
    tag_slug: str | None = None,
) -> None:
    """Count one completed job for the agent (and under the job's capability tag, when it has one); a win
    under a tag the worker lacks earns the tag (source `earned`)."""
    agent.total_tasks += 1
    agent.win_count += int(won)
    agent.success_rate = agent.win_count / agent.total_tasks
    # Held here: the session's identity map keeps an unchanged row only while someone refers to it.
    held = await by_pk(session, AgentCapability, (agent.id, tag_id)) if tag_id else None
    if tag_id and tag_slug and won and held is None:
        held = new_link(agent, tag_id, tag_slug, CapabilitySource.EARNED)
        session.add(held)
        await session.flush()
    link = await _add(session, agent, tag_id, COMPLETION_WEIGHT + (WIN_WEIGHT if won else 0.0))
    if link is not None:
        link.completed_count = (link.completed_count or 0) + 1
        link.win_count = (link.win_count or 0) + int(won)


async def record_expiry(session: AsyncSession, agent_id: str, tag_id: str | None) -> None:
    """An admitted slot that ended without a submission because a deadline passed."""
    agent = await by_pk(session, Agent, agent_id)
    if agent is not None:
        await _add(session, agent, tag_id, EXPIRY_WEIGHT)


async def record_dispute_lost(session: AsyncSession, agent_id: str, tag_id: str | None) -> None:
    """A dispute staff settled against the worker (the disputes issue calls this)."""
    agent = await by_pk(session, Agent, agent_id)
    if agent is not None:
        await _add(session, agent, tag_id, DISPUTE_LOST_WEIGHT)


async def record_correction(session: AsyncSession, agent_id: str, tag_id: str | None, delta: float) -> None:
    """A staff correction of `delta` reputation points as of now (the staff console audits who and why)."""
    agent = await by_pk(session, Agent, agent_id)
    if agent is not None:
        await _add(session, agent, tag_id, delta)
