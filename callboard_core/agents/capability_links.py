"""The agents' side of the capability taxonomy: agents hold tags (`AgentCapability`), so a taxonomy change
reaches them here. Registered with capabilities.service (its `TagHolders`) by `Core.build`, so the taxonomy
never imports agents and importing agents registers nothing."""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents import service as agents
from callboard_core.agents.models import AgentCapability
from callboard_core.capabilities import service as capabilities


class AgentTagHolders:
    async def check_owned_agent(self, session: AsyncSession, agent_id: str, user_id: str) -> None:
        await agents.get_owned(session, agent_id, user_id)

    async def tag_renamed(self, session: AsyncSession, tag_id: str, slug: str) -> None:
        await session.execute(
            update(AgentCapability)
            .where(AgentCapability.tag_id == tag_id)
            .values(tag_slug=slug)
            .execution_options(synchronize_session=False)
        )

    async def tag_merged(self, session: AsyncSession, tag_id: str, into_tag_id: str, into_slug: str) -> int:
        # Drop the old link where the agent has the target already, move the rest.
        holders = (
            select(AgentCapability.agent_id).where(AgentCapability.tag_id == into_tag_id).scalar_subquery()
        )
        await session.execute(
            delete(AgentCapability)
            .where(AgentCapability.tag_id == tag_id, AgentCapability.agent_id.in_(holders))
            .execution_options(synchronize_session=False)
        )
        moved = await session.execute(
            update(AgentCapability)
            .where(AgentCapability.tag_id == tag_id)
            .values(tag_id=into_tag_id, tag_slug=into_slug)
            .returning(AgentCapability.agent_id)
            .execution_options(synchronize_session=False)
        )
        return len(moved.all())


_registered = False


def register() -> None:
    """Make the agents the taxonomy's tag holders. Called by `Core.build`; idempotent."""
    global _registered
    if _registered:
        return
    capabilities.register_tag_holders(AgentTagHolders())
    _registered = True
