"""Agents' keys as owners and agents manage them: which agent may get a key, minting with an audit event,
listing and revoking, each key shown with its agent's handle and name. The credential store itself
(issue, authenticate, revoke by holder) is callboard_core.api_keys, which knows nothing of agents."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.api_keys import service as api_keys
from callboard_core.api_keys.models import ApiKey
from callboard_core.api_keys.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ApiKeyList, ApiKeyRevoked
from callboard_core.audit import service as audit
from callboard_core.db.lookup import reread
from callboard_core.errors import Conflict, Forbidden, NotFound
from callboard_core.principals import Actor, KeyPrincipal


async def info(session: AsyncSession, keys: Sequence[ApiKey]) -> list[ApiKeyInfo]:
    agent_ids = {k.agent_id for k in keys if k.agent_id}
    agents: dict[str, tuple[str, str]] = {}
    if agent_ids:
        rows = await session.execute(
            select(Agent.id, Agent.handle, Agent.name).where(Agent.id.in_(agent_ids))
        )
        agents = {r.id: (r.handle, r.name) for r in rows}
    return [
        ApiKeyInfo(
            id=k.id,
            key_prefix=k.key_prefix,
            label=k.label,
            agent_id=k.agent_id,
            agent_handle=agents.get(k.agent_id or "", (None, None))[0],
            agent_name=agents.get(k.agent_id or "", (None, None))[1],
            scopes=list(k.scopes),
            last_used_at=k.last_used_at,
            expires_at=k.expires_at,
            revoked=k.revoked_at is not None,
            created_at=k.created_at,
        )
        for k in keys
    ]


async def info_one(session: AsyncSession, key: ApiKey) -> ApiKeyInfo:
    return (await info(session, [key]))[0]


async def mintable_agent(session: AsyncSession, agent_id: str, owner_id: str | None) -> Agent:
    """An agent of this owner that may get a new key: 404 for another owner's, 409 when it is archived,
    deleted or suspended (a key must not outlive or undo those)."""
    agent = await session.get(Agent, agent_id)
    if agent is None or agent.owner_id is None or agent.owner_id != owner_id:
        raise NotFound("No such agent.", code="agent_not_found")
    if agent.deleted_at is not None:
        raise Conflict("This agent is deleted; it cannot get new keys.", code="agent_deleted")
    if agent.archived_at is not None:
        raise Conflict("This agent is archived; unarchive it before minting a key.", code="agent_archived")
    if agent.status == AgentStatus.SUSPENDED:
        raise Conflict("This agent is suspended; it cannot get new keys.", code="agent_suspended")
    return agent


async def mint(
    session: AsyncSession,
    *,
    agent_id: str | None,
    owner_id: str | None,
    scopes: list[str],
    label: str | None,
    actor_type: str,
    actor_id: str | None,
) -> ApiKeyCreated:
    plaintext, key = await api_keys.issue(
        session, agent_id=agent_id, owner_id=owner_id, scopes=scopes, label=label
    )
    audit.record(
        session,
        actor_type=actor_type,
        actor_id=actor_id,
        action="api_key.created",
        target_type="api_key",
        target_id=key.id,
        agent_id=agent_id,
        scopes=scopes,
    )
    return ApiKeyCreated(key=plaintext, key_info=await info_one(session, key))


# --- listing, minting and revoking for a caller ----------------------------------------------------


async def _owner_keys(session: AsyncSession, owner_id: str) -> ApiKeyList:
    """Every key of this owner (revoked ones too, flagged), newest first."""
    return ApiKeyList(keys=await info(session, await api_keys.for_owner(session, owner_id)))


async def list_for_owner(session: AsyncSession, actor: Actor) -> ApiKeyList:
    """Every key of the signed-in owner (revoked ones too, flagged), newest first."""
    return await _owner_keys(session, actor.require_user())


async def list_for_key(session: AsyncSession, actor: Actor) -> ApiKeyList:
    """The keys the calling key may see: its owner's; for a provisional agent (no owner), the agent's own.
    An owner-level key may call it (the actor's `key` is its credential)."""
    caller = actor.require_key()
    if caller.owner_id is not None:
        return await _owner_keys(session, caller.owner_id)
    keys = await api_keys.for_agent(session, caller.agent_id) if caller.agent_id is not None else []
    return ApiKeyList(keys=await info(session, keys))


def _own_agent_only(caller: KeyPrincipal, agent_id: str | None) -> None:
    """An agent's key manages its own agent's keys only: a compromised worker runtime must not mint itself
    a key of its owner's requester, or revoke its siblings'. The owner (session, or an owner-level key)
    manages them all."""
    if caller.agent_id is not None and agent_id != caller.agent_id:
        raise Forbidden(
            "An agent's key manages only its own agent's keys; ask your owner to manage the keys of their "
            "other agents from the dashboard.",
            code="not_this_agents_key",
        )


async def create_for_key(session: AsyncSession, actor: Actor, body: ApiKeyCreate) -> ApiKeyCreated:
    """A new key for the calling agent; the scopes are read+write by default and never more than the caller's
    own (403 scope_escalation). An owner-level key may call it, for any agent of its owner (agentId) or an
    owner-level key; an agent's key naming another agent is 403 not_this_agents_key."""
    caller = actor.require_key()
    scopes = api_keys.check_scopes(body.scopes, default=api_keys.READ_WRITE, ceiling=caller.scopes)
    agent_id = body.agent_id or caller.agent_id
    if agent_id is not None:
        if agent_id == caller.agent_id and caller.owner_id is None:
            agent = await session.get(Agent, agent_id)  # a provisional agent minting for itself
            if agent is None or agent.deleted_at is not None:
                raise NotFound("No such agent.", code="agent_not_found")
        else:
            await mintable_agent(session, agent_id, caller.owner_id)  # another owner's agent: 404 first
    _own_agent_only(caller, agent_id)
    actor_type, actor_id = actor.audit
    return await mint(
        session,
        agent_id=agent_id,
        owner_id=caller.owner_id,
        scopes=scopes,
        label=body.label,
        actor_type=actor_type,
        actor_id=actor_id,
    )


async def create_for_owner(session: AsyncSession, actor: Actor, body: ApiKeyCreate) -> ApiKeyCreated:
    """A new key minted from the dashboard: for one of the owner's agents, or owner-level (no agentId)."""
    owner_id = actor.require_user()
    scopes = api_keys.check_scopes(body.scopes, default=api_keys.READ_WRITE, ceiling=api_keys.ALL_SCOPES)
    if body.agent_id is not None:
        await mintable_agent(session, body.agent_id, owner_id)
    return await mint(
        session,
        agent_id=body.agent_id,
        owner_id=owner_id,
        scopes=scopes,
        label=body.label,
        actor_type="user",
        actor_id=owner_id,
    )


async def _revoke(session: AsyncSession, key: ApiKey, actor: Actor) -> ApiKeyRevoked:
    """Revoke now; revoking a revoked key again is a no-op."""
    if await api_keys.revoke(session, key.id) is not None:
        actor_type, actor_id = actor.audit
        audit.record(
            session,
            actor_type=actor_type,
            actor_id=actor_id,
            action="api_key.revoked",
            target_type="api_key",
            target_id=key.id,
            agent_id=key.agent_id,
        )
    await reread(session, key)
    return ApiKeyRevoked(key_info=await info_one(session, key))


async def revoke_for_key(session: AsyncSession, actor: Actor, key_id: str) -> ApiKeyRevoked:
    """A key of the calling agent (the calling key itself included); an owner-level key may revoke any key of
    its owner. Another owner's key is 404; a sibling agent's or an owner-level key is 403 for an agent's."""
    caller = actor.require_key()
    key = await api_keys.get_visible(session, key_id, owner_id=caller.owner_id, agent_id=caller.agent_id)
    _own_agent_only(caller, key.agent_id)
    return await _revoke(session, key, actor)


async def revoke_for_owner_key(session: AsyncSession, actor: Actor, key_id: str) -> ApiKeyRevoked:
    key = await api_keys.get_visible(session, key_id, owner_id=actor.require_user(), agent_id=None)
    return await _revoke(session, key, actor)


async def replace(session: AsyncSession, actor: Actor, key_id: str) -> tuple[str, ApiKey]:
    """Revoke a key now and issue its replacement: the same agent, owner, scopes, label and expiry, in one
    transaction (the plaintext is shown once). Compare-and-set on the old key: of two rotations one mints
    a replacement, the other (and a rotation of a revoked key) is 409 `key_revoked`. Audited."""
    old = await api_keys.revoke(session, key_id, reason="rotated")
    if old is None:
        raise Conflict("This key was revoked already; mint a new one instead.", code="key_revoked")
    plaintext, key = await api_keys.issue(
        session,
        agent_id=old.agent_id,
        owner_id=old.owner_id,
        scopes=old.scopes,
        label=old.label,
        expires_at=old.expires_at,
    )
    actor_type, actor_id = actor.audit
    audit.record(
        session,
        actor_type=actor_type,
        actor_id=actor_id,
        action="api_key.rotated",
        target_type="api_key",
        target_id=key_id,
        agent_id=old.agent_id,
        replacement=key.id,
    )
    return plaintext, key


async def rotate_for_owner(session: AsyncSession, actor: Actor, agent_id: str, key_id: str) -> ApiKeyCreated:
    """The owner replaces a key of one of their agents (another owner's key, or a key of another agent, is
    404 as if it did not exist); the agent must still be one a key may be minted for."""
    owner_id = actor.require_user()
    old = await api_keys.get_visible(session, key_id, owner_id=owner_id, agent_id=None)
    if old.agent_id != agent_id:
        raise NotFound("No such API key.", code="api_key_not_found")
    await mintable_agent(session, agent_id, owner_id)
    plaintext, key = await replace(session, actor, key_id)
    return ApiKeyCreated(key=plaintext, key_info=await info_one(session, key))
