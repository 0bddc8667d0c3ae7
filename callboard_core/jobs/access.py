"""Object-level authorization for the job lifecycle: which agent an Actor (callboard_core.principals) acts as,
an agent through its API key or a signed-in owner acting for one of its agents (the owner mirrors). Anything
not the actor's is a 404."""

from __future__ import annotations

import functools
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import and_, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import raiseload

from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.agents.service import ask_owner_for_work
from callboard_core.db.lookup import by_pk, held
from callboard_core.db.readcache import ReadCache
from callboard_core.db.scopes import AGENT_STANDING
from callboard_core.errors import Conflict, Forbidden, NotFound
from callboard_core.guidance import Act, step
from callboard_core.principals import Actor

Row = TypeVar("Row")
# The lifecycle reads an acting agent's status, owner and roles, never its capability links: not loading them
# saves a statement on every action; a use that needs them fails loudly instead of reading an empty list.
WITHOUT_CAPABILITIES = (raiseload(Agent.capability_links),)


@dataclass(frozen=True)
class AgentStanding:
    """The columns of an agent that decide whether it may act, and for whom: the read cache's
    `agent_standing` scope watches exactly these (db/scopes.py)."""

    id: str
    owner_id: str | None
    status: str
    archived_at: datetime | None
    deleted_at: datetime | None
    requester_enabled: bool
    worker_enabled: bool
    is_house: bool


_STANDING = select(*(getattr(Agent, name) for name in AgentStanding.__dataclass_fields__)).where(
    Agent.id == bindparam("p_id")
)


def may_act_for(actor: Actor, agent: Agent | AgentStanding) -> bool:
    if actor.staff:
        return True
    if actor.agent_id is not None:
        return agent.id == actor.agent_id
    return actor.user_id is not None and agent.owner_id == actor.user_id and agent.deleted_at is None


# `may_act_for` as a condition on the `agents` row, per kind of actor (staff: none, any agent), for a
# statement that must touch only the actor's rows (a row lock taken by the reading statement itself). Its
# parameter is `p_actor`, which `actor_kind` gives (`jobs.service.REQUESTED_BY` is the same for a job's
# requester).
ACTS_FOR: dict[str, Any] = {
    "staff": None,
    "agent": Agent.id == bindparam("p_actor"),
    "owner": and_(Agent.owner_id == bindparam("p_actor"), Agent.deleted_at.is_(None)),
}


def actor_kind(actor: Actor) -> tuple[str, dict[str, str]] | None:
    """The actor's kind (staff, agent, owner) and its `p_actor` parameter, for conditions written per kind
    (`ACTS_FOR`, `jobs.service.REQUESTED_BY`); None for an actor that is none of them."""
    if actor.staff:
        return "staff", {}
    if actor.agent_id is not None:
        return "agent", {"p_actor": actor.agent_id}
    if actor.user_id is not None:
        return "owner", {"p_actor": actor.user_id}
    return None


async def owned_agent(
    session: AsyncSession, actor: Actor, agent_id: str, *, what: str = "agent", capabilities: bool = False
) -> Agent:
    """The agent the actor acts as: the calling agent itself, or one of the signed-in owner's agents; with its
    capability links only when asked (`capabilities`: home and discovery read them, actions do not)."""
    agent = await by_pk(session, Agent, agent_id, options=() if capabilities else WITHOUT_CAPABILITIES)
    if agent is None or agent.deleted_at is not None or not may_act_for(actor, agent):
        raise NotFound(f"No such {what}.", code="agent_not_found")
    return agent


async def acting_standing(
    session: AsyncSession, actor: Actor, agent_id: str | None, cache: ReadCache | None
) -> AgentStanding:
    """`acting_agent`'s answer as an AgentStanding, through the read cache when given, for a write that reads
    nothing else of the agent and moves no money (a draft). A cached standing is as fresh as a cached
    credential (db/readcache.py); call it before the transaction writes anything (its load reads in it)."""
    target = _target(actor, agent_id)

    async def load() -> AgentStanding | None:
        row = (await session.execute(_STANDING, {"p_id": target})).one_or_none()
        return None if row is None else AgentStanding(*row)

    standing = await (
        load() if cache is None else cache.get_or_load(("standing", target), load, AGENT_STANDING)
    )
    if standing is None or standing.deleted_at is not None or not may_act_for(actor, standing):
        raise NotFound("No such agent.", code="agent_not_found")
    return standing


async def worker_row(
    session: AsyncSession, actor: Actor, model: type[Row], row_id: str, *, what: str, code: str
) -> tuple[Row, Agent]:
    """A row that belongs to a worker (its `worker_agent_id`), with that worker, if the actor is the worker
    or its owner; otherwise the row does not exist for this actor (404 with `code`)."""
    row: Any = held(session, model, row_id)
    if row is not None:
        agent = await by_pk(session, Agent, row.worker_agent_id, options=WITHOUT_CAPABILITIES)
    else:  # the row and its worker in one read
        statement = _with_worker(cast(Hashable, model))
        row, agent = (await session.execute(statement, {"p_id": row_id})).first() or (None, None)
    if row is None or agent is None or not may_act_for(actor, agent):
        raise NotFound(f"No such {what}.", code=code)
    return row, agent


@functools.cache
def _with_worker(model: Any) -> Any:
    """A worker's row (slot, application, submission, invitation) with its agent (no capabilities), built once
    per class."""
    return (
        select(model, Agent)
        .join(Agent, Agent.id == model.worker_agent_id)
        .where(model.id == bindparam("p_id"))
        .options(*WITHOUT_CAPABILITIES)
    )


async def acting_agent(
    session: AsyncSession, actor: Actor, agent_id: str | None = None, *, capabilities: bool = False
) -> Agent:
    """For agent callers the agent is the caller; owner callers name it (workerAgentId, requesterAgentId)."""
    return await owned_agent(session, actor, _target(actor, agent_id), capabilities=capabilities)


def _target(actor: Actor, agent_id: str | None) -> str:
    """The agent an actor acts as: an agent key's own agent, else the one the owner names."""
    target = actor.agent_id if actor.agent_id else agent_id
    if target is None:
        raise NotFound("No such agent.", code="agent_not_found")
    return target


def require_can_work(agent: Agent | AgentStanding, *, role: str) -> None:
    """New work (apply, publish, invite, accept) needs an active, claimed agent with the role enabled."""
    require_active_claimed(agent)
    if role == "worker" and not agent.worker_enabled:
        raise Conflict(
            "This agent has its worker role turned off; its owner turns it on (it lists the agent in the "
            "public directory).",
            code="worker_disabled",
            next_action=ask_owner_for_work(agent.id),
        )
    if role != "worker" and not agent.requester_enabled:
        raise Conflict(
            f"This agent has its {role} role turned off.",
            code=f"{role}_disabled",
            next_action=step(Act.UPDATE_PROFILE, f"Turn the {role} role on.", body={f"{role}Enabled": True}),
        )


def require_active_claimed(agent: Agent | AgentStanding) -> None:
    """Any work, practice included (the starter job), needs an active agent an owner has claimed."""
    if agent.status != AgentStatus.ACTIVE or agent.archived_at is not None:
        raise Conflict(
            "This agent is not active; reactivate it to take on new work.",
            code="agent_not_active",
            current_state=agent.status,
        )
    if agent.owner_id is None:
        raise Forbidden(
            "An owner must claim this agent first.",
            code="agent_not_claimed",
            next_action=step(Act.CLAIM_LINK, "Give your owner your claim URL (this mints a fresh one)."),
        )
