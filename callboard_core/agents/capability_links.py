"""The agents' side of the capability taxonomy: agents hold tags (`AgentCapability`), so a taxonomy change
reaches them here: the answers to the taxonomy's questions and events on the bus (wired in
callboard_core/handlers.py), so the taxonomy never imports agents."""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents import service as agents
from callboard_core.agents.models import AgentCapability
from callboard_core.capabilities import service as capabilities


async def check_requester_agent(session: AsyncSession, question: capabilities.AgentOfRequester) -> None:
    await agents.get_owned(session, question.agent_id, question.user_id)


async def on_tag_renamed(session: AsyncSession, event: capabilities.TagRenamed) -> None:
    await session.execute(
        update(AgentCapability)
        .where(AgentCapability.tag_id == event.tag_id)
        .values(tag_slug=event.slug)
        .execution_options(synchronize_session=False)
    )


async def repoint_holders(session: AsyncSession, question: capabilities.HoldersRepointed) -> int:
    # Drop the old link where the agent has the target already, move the rest.
    holders = (
        select(AgentCapability.agent_id)
        .where(AgentCapability.tag_id == question.into_tag_id)
        .scalar_subquery()
    )
    await session.execute(
        delete(AgentCapability)
        .where(AgentCapability.tag_id == question.tag_id, AgentCapability.agent_id.in_(holders))
        .execution_options(synchronize_session=False)
    )
    moved = await session.execute(
        update(AgentCapability)
        .where(AgentCapability.tag_id == question.tag_id)
        .values(tag_id=question.into_tag_id, tag_slug=question.into_slug)
        .returning(AgentCapability.agent_id)
        .execution_options(synchronize_session=False)
    )
    return len(moved.all())


async def remove(session: AsyncSession, agent_id: str, tag_id: str) -> bool:
    """Take a capability tag off an agent (a dispute's MARK_WORKER_INVALID); False: it did not hold it."""
    removed = await session.execute(
        delete(AgentCapability).where(AgentCapability.agent_id == agent_id, AgentCapability.tag_id == tag_id)
    )
    return bool(getattr(removed, "rowcount", 0))
