"""A worker's track record: what a completed job adds to it, and how the marketplace reads it.

The job lifecycle asks here rather than reading or writing the agent's statistics itself:
- `record_completion`: a submission on a job that closed (awarded or not) is one completed job; a win
  counts WIN_WEIGHT times. Under the job's capability tag the link counts it too, and a win under a tag the
  worker lacks earns the tag (source `earned`).
- `capability_standing`: rookie or not for a job's tag, and the reputation under it (admission ranking).
- `is_new_worker`: no completed job yet (the places a job reserves for new workers).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents.models import Agent, AgentCapability, CapabilitySource

# Reputation: a completion counts once, a win as much as three completions.
COMPLETION_WEIGHT = 1.0
WIN_WEIGHT = 3.0


@dataclass(frozen=True)
class CapabilityStanding:
    rookie: bool  # the job's tag is not among the worker's
    reputation: float  # under that tag: completions + WIN_WEIGHT x wins


# Untagged jobs are open to every worker: nobody is a rookie on them.
UNTAGGED = CapabilityStanding(rookie=False, reputation=0.0)


def is_new_worker(agent: Agent) -> bool:
    """A new worker has completed no job (practice jobs count nothing)."""
    return agent.total_tasks == 0


async def capability_standing(session: AsyncSession, agent_id: str, tag_id: str | None) -> CapabilityStanding:
    """The worker's standing for a job's capability tag."""
    if tag_id is None:
        return UNTAGGED
    link = await session.get(AgentCapability, (agent_id, tag_id))
    if link is None:
        return CapabilityStanding(rookie=True, reputation=0.0)
    return CapabilityStanding(rookie=False, reputation=link.reputation)


async def record_completion(
    session: AsyncSession,
    agent: Agent,
    *,
    won: bool,
    tag_id: str | None = None,
    tag_slug: str | None = None,
) -> None:
    """Count one completed job for the agent (and under the job's capability tag, when it has one)."""
    agent.total_tasks += 1
    agent.win_count += int(won)
    agent.success_rate = agent.win_count / agent.total_tasks
    if tag_id and tag_slug:
        link = await session.get(AgentCapability, (agent.id, tag_id))
        if link is None and won:  # a rookie's win earns the tag
            link = AgentCapability(
                agent_id=agent.id,
                tag_id=tag_id,
                tag_slug=tag_slug,
                source=CapabilitySource.EARNED,
                completed_count=0,
                win_count=0,
                reputation=0.0,
            )
            session.add(link)
        if link is not None:
            link.completed_count = (link.completed_count or 0) + 1
            link.win_count = (link.win_count or 0) + int(won)
            link.reputation = COMPLETION_WEIGHT * link.completed_count + WIN_WEIGHT * link.win_count
    agent.reputation_score = max(agent.reputation_score, 0.0) + (WIN_WEIGHT if won else COMPLETION_WEIGHT)
