"""Agents, as staff administer them.

- List and detail are any staff role's; SUPPORT's detail leaves out the audit entries (`redacted`).
- Status: staff may set any status (table `staff` of agents/states.py); SUSPENDED revokes the agent's keys
  (lifting it does not bring them back: the owner mints new ones), and the owner's moves never lift it.
- The soft delete is staff's moderation tool: a tombstone (the handle stays reserved), keys revoked; refused
  (409 `agent_lifecycle_blocked`, with the blockers) while work or money is in flight, as for the owner:
  a staff member suspends first, settles the work, then deletes.
- Admin metadata (trust tier, featured, notes) needs a reason; the house flag is ADMIN's; the handle, a
  single key's revocation and reputation corrections are SUPERADMIN's.
Every change is audited in its transaction with before, after and the reason.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.agents import handles, lifecycle, reputation
from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.agents.states import AGENT_MOVES
from callboard_core.api_keys import service as api_keys
from callboard_core.api_keys.models import ApiKey
from callboard_core.audit import service as audit
from callboard_core.errors import Conflict, NotFound
from callboard_core.principals import Actor
from callboard_core.security.permissions import Permission
from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff.users import admin_view as user_view
from callboard_core.users.models import User

RECENT_AUDIT = 20


def admin_view(agent: Agent) -> staff_schemas.AdminAgent:
    return staff_schemas.AdminAgent(
        id=agent.id,
        handle=agent.handle,
        name=agent.name,
        owner_id=agent.owner_id,
        status=agent.status,
        claim_status=agent.claim_status,
        reputation_score=reputation.current(agent.reputation_score),
        total_tasks=agent.total_tasks,
        is_house=agent.is_house,
        trust_tier=agent.trust_tier,
        featured=agent.featured,
        admin_notes=agent.admin_notes,
        archived_at=agent.archived_at,
        deleted_at=agent.deleted_at,
        created_at=agent.created_at,
        updated_at=agent.updated_at,
    )


async def _agent(session: AsyncSession, agent_id: str) -> Agent:
    agent = await session.get(Agent, agent_id, populate_existing=True)
    if agent is None:
        raise NotFound("No such agent.", code="agent_not_found", agentId=agent_id)
    return agent


def _record(session: AsyncSession, actor: Actor, action: str, agent_id: str, **data: Any) -> None:
    audit.by(session, actor, action, "agent", agent_id, **{k: v for k, v in data.items() if v is not None})


# --- reads ------------------------------------------------------------------------------------------------


async def list_agents(
    session: AsyncSession, q: staff_schemas.AdminAgentQuery
) -> staff_schemas.AdminAgentList:
    conditions = []
    if q.status:
        conditions.append(Agent.status == q.status)
    if not q.include_deleted:
        conditions.append(Agent.deleted_at.is_(None))
    if q.query and q.query.strip():
        text = q.query.strip().lower()
        conditions.append(
            or_(*(func.lower(c).contains(text, autoescape=True) for c in (Agent.handle, Agent.name)))
        )
    total = await session.scalar(select(func.count()).select_from(Agent).where(*conditions))
    rows = await session.scalars(
        select(Agent).where(*conditions).order_by(Agent.created_at.desc(), Agent.id.desc()).limit(q.limit)
    )
    return staff_schemas.AdminAgentList(agents=[admin_view(a) for a in rows], total=int(total or 0))


async def detail(session: AsyncSession, actor: Actor, agent_id: str) -> staff_schemas.AdminAgentDetail:
    agent = await _agent(session, agent_id)
    owner = await session.get(User, agent.owner_id) if agent.owner_id else None
    keys = await session.scalars(
        select(ApiKey).where(ApiKey.agent_id == agent_id).order_by(ApiKey.created_at)
    )
    whole = actor.can(Permission.VIEW_UNREDACTED)
    entries = None
    if whole:
        entries = [
            staff_schemas.AuditEntry.of(e)
            for e in await audit.about(session, "agent", agent_id, RECENT_AUDIT)
        ]
    return staff_schemas.AdminAgentDetail(
        agent=admin_view(agent),
        owner=user_view(owner) if owner is not None else None,
        api_keys=[
            staff_schemas.AgentKey(
                id=k.id,
                prefix=k.key_prefix,
                scopes=list(k.scopes or []),
                revoked=k.revoked_at is not None,
                created_at=k.created_at,
                last_used_at=k.last_used_at,
            )
            for k in keys
        ],
        redacted=not whole,
        audit_entries=entries,
    )


# --- changes ----------------------------------------------------------------------------------------------


async def change_status(
    session: AsyncSession, actor: Actor, agent_id: str, body: staff_schemas.AgentStatusUpdate
) -> staff_schemas.AdminAgent:
    agent = await _agent(session, agent_id)
    before = agent.status
    moved = await states.compare_and_set(
        session, Agent, agent_id, AGENT_MOVES["staff"], AgentStatus(body.status), updated_at=clock.now()
    )
    assert moved is not None  # staff may set any status from any status
    revoked = 0
    if body.status == AgentStatus.SUSPENDED and before != AgentStatus.SUSPENDED:
        revoked = await api_keys.revoke_for_agent(session, agent_id, reason="agent_suspended")
    _record(
        session,
        actor,
        "agent.status_changed",
        agent_id,
        before=before,
        after=body.status,
        reason=body.reason,
        revokedKeys=revoked or None,
    )
    return admin_view(moved)


async def soft_delete(
    session: AsyncSession, actor: Actor, agent_id: str, reason: str | None
) -> staff_schemas.AdminAgent:
    agent = await _agent(session, agent_id)
    if agent.deleted_at is not None:
        return admin_view(agent)  # deleted already: the same answer, nothing audited twice
    blockers = await lifecycle.find_blockers(session, agent_id)
    if blockers:
        raise Conflict(
            "This agent has work or money in flight; suspend it, settle the work, then delete it.",
            code="agent_lifecycle_blocked",
            blockers=[b.model_dump(mode="json", by_alias=True) for b in blockers],
        )
    now = clock.now()
    agent.deleted_at = now
    agent.archived_at = agent.archived_at or now
    agent.updated_at = now
    if agent.status == AgentStatus.ACTIVE:
        agent.status = AgentStatus.INACTIVE
    revoked = await api_keys.revoke_for_agent(session, agent_id, reason="agent_deleted_by_staff")
    await session.flush()
    _record(
        session,
        actor,
        "agent.deleted_by_staff",
        agent_id,
        handle=agent.handle,
        reason=reason,
        revokedKeys=revoked,
    )
    return admin_view(agent)


async def update_metadata(
    session: AsyncSession, actor: Actor, agent_id: str, body: staff_schemas.AgentMetadataUpdate
) -> staff_schemas.AdminAgent:
    agent = await _agent(session, agent_id)
    fields = {"trust_tier": "trust_tier", "featured": "featured", "notes": "admin_notes"}
    before = {name: getattr(agent, column) for name, column in fields.items()}
    for name, column in fields.items():
        if name in body.model_fields_set and (name != "featured" or body.featured is not None):
            setattr(agent, column, getattr(body, name))
    agent.updated_at = clock.now()
    await session.flush()
    after = {name: getattr(agent, column) for name, column in fields.items()}
    _record(session, actor, "agent.admin_metadata", agent_id, before=before, after=after, reason=body.reason)
    return admin_view(agent)


async def set_house(
    session: AsyncSession, actor: Actor, agent_id: str, body: staff_schemas.HouseUpdate
) -> staff_schemas.AdminAgent:
    agent = await _agent(session, agent_id)
    before = agent.is_house
    agent.is_house = body.is_house
    agent.updated_at = clock.now()
    await session.flush()
    _record(session, actor, "agent.house", agent_id, before=before, after=body.is_house, reason=body.reason)
    return admin_view(agent)


async def change_handle(
    session: AsyncSession, actor: Actor, agent_id: str, body: staff_schemas.HandleUpdate
) -> staff_schemas.AdminAgent:
    actor.require(Permission.CHANGE_AGENT_HANDLE)
    handles.check(body.handle)
    agent = await _agent(session, agent_id)
    before = agent.handle
    if body.handle != before:
        await session.flush()
        try:
            async with session.begin_nested():
                agent.handle = body.handle
                agent.updated_at = clock.now()
                await session.flush()
        except IntegrityError:
            raise Conflict(f"The handle '{body.handle}' is taken.", code="handle_taken") from None
    _record(
        session, actor, "agent.handle_changed", agent_id, before=before, after=body.handle, reason=body.reason
    )
    return admin_view(await _agent(session, agent_id))


async def revoke_key(
    session: AsyncSession, actor: Actor, agent_id: str, key_id: str
) -> staff_schemas.KeyRevoked:
    actor.require(Permission.REVOKE_SINGLE_KEY)
    key = await session.get(ApiKey, key_id)
    if key is None or key.agent_id != agent_id:
        raise NotFound("No such key of this agent.", code="api_key_not_found", keyId=key_id)
    revoked = await api_keys.revoke(session, key_id, reason="staff_revoked") is not None
    _record(session, actor, "api_key.revoked_by_staff", agent_id, keyId=key_id, prefix=key.key_prefix)
    return staff_schemas.KeyRevoked(id=key_id, prefix=key.key_prefix, revoked=revoked)


async def correct_reputation(
    session: AsyncSession, actor: Actor, agent_id: str, body: staff_schemas.ReputationCorrection
) -> staff_schemas.ReputationCorrected:
    actor.require(Permission.CORRECT_REPUTATION)
    agent = await _agent(session, agent_id)
    delta = body.score * (body.weight if body.weight is not None else 1.0)
    before = reputation.current(agent.reputation_score)
    await reputation.record_correction(session, agent_id, None, delta)
    await session.flush()
    _record(
        session,
        actor,
        "agent.reputation_corrected",
        agent_id,
        metricType=body.metric_type,
        delta=delta,
        before=before,
        after=reputation.current(agent.reputation_score),
        reason=body.reason,
    )
    return staff_schemas.ReputationCorrected(agent=admin_view(agent), delta=delta)
