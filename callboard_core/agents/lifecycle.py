"""An owner's agent lifecycle: deactivate, reactivate, archive, unarchive, delete.

Every move is compare-and-set on the agent row, driven by its table in agents/states.py
(`UPDATE ... WHERE status IN <sources> RETURNING`); a lost race or a wrong state is a 409
`invalid_agent_state` carrying the current state (`currentState`) and whether the agent is archived.

What blocks archive and delete (work or money in flight) and what counts as marketplace history (which
makes a delete SOFT rather than HARD) belong to other modules (jobs, money). They answer two questions on
the core's bus (`BlockersOf`, `HasHistory`; their handlers are in callboard_core/handlers.py).

Archive and delete take the row first (the compare-and-set) and ask afterwards, in the same transaction; a
blocker raises and rolls the move back. So a module that starts work for an agent with a
compare-and-set on the agent's state cannot slip in between the check and the move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock, states
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.agents.states import AGENT_MOVES, ARCHIVED_BEFORE
from callboard_core.api_keys import service as api_keys
from callboard_core.audit import service as audit
from callboard_core.errors import Conflict, NotFound, ValidationFailed
from callboard_core.principals import Actor


@dataclass(frozen=True)
class BlockersOf(bus.Question[list[agent_schemas.LifecycleBlocker]]):
    """What blocks archiving or deleting the agent: work or money in flight (an empty list: nothing)."""

    agent_id: str


@dataclass(frozen=True)
class HasHistory(bus.Question[bool]):
    """Whether the agent has marketplace history (any True makes a delete SOFT)."""

    agent_id: str


async def find_blockers(session: AsyncSession, agent_id: str) -> list[agent_schemas.LifecycleBlocker]:
    return [blocker for answer in await bus.ask(session, BlockersOf(agent_id)) for blocker in answer]


async def has_history(session: AsyncSession, agent_id: str) -> bool:
    if await _recorded_history(session, agent_id):
        return True
    answers: list[bool] = await bus.ask(session, HasHistory(agent_id))
    return any(answers)


async def _recorded_history(session: AsyncSession, agent_id: str) -> bool:
    """What the agent row itself records: completed tasks, or a staff suspension (kept for moderation)."""
    row = (
        await session.execute(select(Agent.total_tasks, Agent.status).where(Agent.id == agent_id))
    ).one_or_none()
    return row is not None and (row.total_tasks > 0 or row.status == AgentStatus.SUSPENDED)


# --- helpers -------------------------------------------------------------------------------------


async def _reload(session: AsyncSession, agent_id: str, owner_id: str) -> Agent:
    agent = (
        await session.execute(
            select(Agent).where(Agent.id == agent_id).execution_options(populate_existing=True)
        )
    ).scalar_one_or_none()
    if agent is None or agent.owner_id != owner_id or agent.deleted_at is not None:
        raise NotFound("No such agent.", code="agent_not_found")
    return agent


async def _move(
    session: AsyncSession, agent_id: str, owner_id: str, move: str, **values: Any
) -> Agent | None:
    """One owner move on a live agent of this owner, by compare-and-set driven by its table; None: lost."""
    where = [Agent.owner_id == owner_id, Agent.deleted_at.is_(None)]
    archived = ARCHIVED_BEFORE[move]
    if archived is not None:
        where.append(Agent.archived_at.is_not(None) if archived else Agent.archived_at.is_(None))
    return await states.compare_and_set(
        session, Agent, agent_id, AGENT_MOVES[move], None, *where, **values, updated_at=clock.now()
    )


async def _conflict(session: AsyncSession, agent_id: str, owner_id: str, action: str, why: str) -> Conflict:
    agent = await _reload(session, agent_id, owner_id)
    # "status" is taken by the problem document itself, hence currentState.
    return states.conflict(
        f"Cannot {action} this agent: {why}",
        code="invalid_agent_state",
        current=agent.status,
        archived=agent.archived_at is not None,
    )


def _blocked(action: str, blockers: list[agent_schemas.LifecycleBlocker]) -> Conflict:
    return Conflict(
        f"Cannot {action} this agent while work or money is in flight; see blockers.",
        code="agent_lifecycle_blocked",
        blockers=[b.model_dump(mode="json", by_alias=True) for b in blockers],
    )


def _audit(session: AsyncSession, actor: Actor, action: str, agent_id: str, **data: Any) -> None:
    audit.by(session, actor, action, "agent", agent_id, **data)


# --- the moves -----------------------------------------------------------------------------------


async def lifecycle_blockers(
    session: AsyncSession, actor: Actor, agent_id: str
) -> agent_schemas.LifecycleBlockers:
    owner_id = actor.require_user()
    await agents.get_owned(session, agent_id, owner_id)
    return agent_schemas.LifecycleBlockers(agent_id=agent_id, blockers=await find_blockers(session, agent_id))


async def deactivate(
    session: AsyncSession, actor: Actor, agent_id: str, reason: str | None = None
) -> agent_schemas.AgentDashboardResponse:
    """ACTIVE -> INACTIVE: hidden from discovery, no new work; in-flight work may finish; keys stay valid."""
    owner_id = actor.require_user()
    await agents.get_owned(session, agent_id, owner_id)
    if await _move(session, agent_id, owner_id, "deactivate") is None:
        raise await _conflict(
            session, agent_id, owner_id, "deactivate", "only an ACTIVE agent can be deactivated."
        )
    _audit(session, actor, "agent.deactivated", agent_id, reason=reason)
    return await agents.to_dashboard(session, await _reload(session, agent_id, owner_id))


async def reactivate(
    session: AsyncSession, actor: Actor, agent_id: str
) -> agent_schemas.AgentDashboardResponse:
    """INACTIVE (not archived) -> ACTIVE. A SUSPENDED agent stays suspended until staff lift it."""
    owner_id = actor.require_user()
    await agents.get_owned(session, agent_id, owner_id)
    if await _move(session, agent_id, owner_id, "reactivate") is None:
        raise await _conflict(
            session,
            agent_id,
            owner_id,
            "reactivate",
            "only an INACTIVE, unarchived agent can be reactivated (unarchive first; a suspension is lifted by staff).",
        )
    _audit(session, actor, "agent.reactivated", agent_id)
    return await agents.to_dashboard(session, await _reload(session, agent_id, owner_id))


async def archive(
    session: AsyncSession, actor: Actor, agent_id: str, reason: str | None = None
) -> agent_schemas.AgentDashboardResponse:
    """Set aside: INACTIVE (a suspension stays), every key of the agent revoked. Refused (409 with
    `blockers`) while work or money is in flight."""
    owner_id = actor.require_user()
    await agents.get_owned(session, agent_id, owner_id)
    if await _move(session, agent_id, owner_id, "archive", archived_at=clock.now()) is None:
        raise await _conflict(session, agent_id, owner_id, "archive", "it is archived already.")
    blockers = await find_blockers(session, agent_id)
    if blockers:
        raise _blocked("archive", blockers)  # the unit of work rolls the move back
    revoked = await api_keys.revoke_for_agent(session, agent_id, reason="agent_archived")
    _audit(session, actor, "agent.archived", agent_id, reason=reason, revoked_keys=revoked)
    return await agents.to_dashboard(session, await _reload(session, agent_id, owner_id))


async def unarchive(
    session: AsyncSession, actor: Actor, agent_id: str
) -> agent_schemas.AgentDashboardResponse:
    """Archived -> INACTIVE (a suspension stays). The revoked keys stay revoked: mint a new one."""
    owner_id = actor.require_user()
    await agents.get_owned(session, agent_id, owner_id)
    if await _move(session, agent_id, owner_id, "unarchive", archived_at=None) is None:
        raise await _conflict(session, agent_id, owner_id, "unarchive", "it is not archived.")
    _audit(session, actor, "agent.unarchived", agent_id)
    return await agents.to_dashboard(session, await _reload(session, agent_id, owner_id))


async def delete_agent(
    session: AsyncSession, actor: Actor, agent_id: str, body: agent_schemas.AgentDeleteBody
) -> agent_schemas.AgentDeleted:
    """Delete for good. With marketplace history: SOFT (a tombstone; the handle stays reserved, keys revoked).
    Without: HARD (the row and everything hanging off it go). Refused (409) while work or money is in flight."""
    owner_id = actor.require_user()
    agent = await agents.get_owned(session, agent_id, owner_id)
    if body.confirm_handle != agent.handle:
        raise ValidationFailed(
            "confirmHandle must equal the agent's handle.",
            code="confirm_handle_mismatch",
            errors=[
                {
                    "field": "confirmHandle",
                    "code": "confirm_handle_mismatch",
                    "message": "does not match the agent's handle",
                }
            ],
        )
    now = clock.now()
    # Take the row first (one winner among concurrent deletes), then ask the providers.
    archived_at = agent.archived_at or now
    if await _move(session, agent_id, owner_id, "delete", deleted_at=now, archived_at=archived_at) is None:
        raise NotFound("No such agent.", code="agent_not_found")
    blockers = await find_blockers(session, agent_id)
    if blockers:
        raise _blocked("delete", blockers)
    if await has_history(session, agent_id):
        mode = "SOFT"
        revoked = await api_keys.revoke_for_agent(session, agent_id, reason="agent_deleted")
    else:
        mode = "HARD"
        revoked = 0
        session.expunge(agent)
        await session.execute(
            delete(Agent).where(Agent.id == agent_id).execution_options(synchronize_session=False)
        )
    _audit(session, actor, "agent.deleted", agent_id, mode=mode, handle=agent.handle, revoked_keys=revoked)
    return agent_schemas.AgentDeleted(agent_id=agent_id, mode=mode)
