"""The owner's dashboard for agents: create (claimed, with a runtime key), view, edit, list."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents import keys as agent_keys
from callboard_core.agents import reputation
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.agents.models import Agent, AgentCapability, AgentHeartbeat, AgentStatus, ClaimStatus
from callboard_core.api_keys import service as api_keys
from callboard_core.principals import Actor

# Body field -> model column, where they differ.
_COLUMN = {"metadata": "metadata_json"}
_OPTIONAL_ON_CREATE = (
    "description",
    "pricing_model",
    "price_per_unit",
    "sla_response_ms",
    "sla_uptime_pct",
    "auth_method",
    "metadata",
    "sample_input",
    "sample_output",
)


async def create(
    session: AsyncSession, actor: Actor, body: agent_schemas.AgentCreate
) -> agent_schemas.AgentCreated:
    """A new agent owned by the session user, claimed at once, with a read+write runtime key (shown once).
    `ownerId` in the body is ignored."""
    owner_id = actor.require_user()
    now = clock.now()
    agent = Agent(
        name=body.name,
        handle=await agents.choose_handle(session, body.handle, body.name),
        endpoint_url=body.endpoint_url,
        owner_id=owner_id,
        status=AgentStatus.ACTIVE,
        claim_status=ClaimStatus.CLAIMED,
        claimed_at=now,
        capability_links=[],
    )
    for field in _OPTIONAL_ON_CREATE:
        value = getattr(body, field)
        if value is not None:
            setattr(agent, _COLUMN.get(field, field), value)
    if body.currency is not None:
        agent.currency = body.currency.lower()
    session.add(agent)
    await agents.set_capabilities(session, agent, body.capabilities)
    await agents.flush_agent(session)
    plaintext, key = await api_keys.issue(
        session, agent_id=agent.id, owner_id=owner_id, scopes=api_keys.READ_WRITE, label="runtime"
    )
    return agent_schemas.AgentCreated(
        agent=await agents.to_dashboard(session, agent),
        api_key=plaintext,
        key_info=await agent_keys.info_one(session, key),
    )


async def get(session: AsyncSession, actor: Actor, agent_id: str) -> agent_schemas.AgentDashboardResponse:
    return await agents.to_dashboard(session, await agents.get_owned(session, agent_id, actor.require_user()))


async def update(
    session: AsyncSession, actor: Actor, agent_id: str, body: agent_schemas.AgentUpdate
) -> agent_schemas.AgentDashboardResponse:
    """Change the fields sent; a handle change must stay unique (409 handle_taken)."""
    agent = await agents.get_owned(session, agent_id, actor.require_user())
    data = body.model_dump(exclude_unset=True)  # the Omittable fields, when sent, are not null
    if "capabilities" in data:
        await agents.set_capabilities(session, agent, data.pop("capabilities") or [])
    handle = data.pop("handle", None)
    if handle is not None and handle != agent.handle:
        await agents.check_handle_free(session, handle)
        agent.handle = handle
    for field, value in data.items():
        setattr(agent, _COLUMN.get(field, field), value)
    agent.updated_at = clock.now()
    await agents.flush_agent(session)  # a concurrent taker of the same handle: 409, not 500
    return await agents.to_dashboard(session, agent)


async def list_mine(
    session: AsyncSession, actor: Actor, query: agent_schemas.AgentListQuery
) -> agent_schemas.AgentList:
    """The owner's agents, newest first. Deleted agents never show; archived ones only when asked."""
    conditions = [Agent.owner_id == actor.require_user(), Agent.deleted_at.is_(None)]
    if not query.include_archived:
        conditions.append(Agent.archived_at.is_(None))
    if query.status is not None:
        conditions.append(Agent.status == query.status)
    if query.min_price is not None:
        conditions.append(Agent.price_per_unit >= query.min_price)
    if query.max_price is not None:
        conditions.append(Agent.price_per_unit <= query.max_price)
    if query.min_reputation is not None:
        conditions.append(Agent.reputation_score >= reputation.stored(query.min_reputation))
    if query.capability is not None:
        conditions.append(
            exists().where(
                AgentCapability.agent_id == Agent.id,
                AgentCapability.tag_slug == query.capability.strip().lower(),
            )
        )
    total = (await session.execute(select(func.count()).select_from(Agent).where(*conditions))).scalar_one()
    rows = list(
        (
            await session.execute(
                select(Agent)
                .where(*conditions)
                .order_by(Agent.created_at.desc(), Agent.id.desc())
                .limit(query.limit)
                .offset(query.offset)
            )
        ).scalars()
    )
    return agent_schemas.AgentList(
        agents=await dashboard_many(session, rows), total=int(total), limit=query.limit, offset=query.offset
    )


async def dashboard_many(
    session: AsyncSession, rows: Sequence[Agent]
) -> list[agent_schemas.AgentDashboardResponse]:
    """agents.service.to_dashboard for many agents, in two queries rather than two per agent."""
    ids = [a.id for a in rows]
    if not ids:
        return []
    beats = dict(
        (
            await session.execute(
                select(AgentHeartbeat.agent_id, func.max(AgentHeartbeat.last_seen_at))
                .where(AgentHeartbeat.agent_id.in_(ids))
                .group_by(AgentHeartbeat.agent_id)
            )
        ).all()
    )
    keys = await api_keys.count_active(session, ids)
    return [
        agent_schemas.AgentDashboardResponse(
            **agents.to_response(a).model_dump(),
            intent=a.intent,
            archived=a.archived_at is not None,
            archived_at=a.archived_at,
            is_house=a.is_house,
            last_heartbeat_at=beats.get(a.id),
            active_key_count=keys.get(a.id, 0),
        )
        for a in rows
    ]
