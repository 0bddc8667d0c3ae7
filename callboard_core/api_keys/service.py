"""API keys: issue, authenticate, list and revoke."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.api_keys.models import ApiKey
from callboard_core.api_keys.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ApiKeyList, ApiKeyRevoked
from callboard_core.audit import service as audit
from callboard_core.db import Database
from callboard_core.db.readcache import MISSING, ReadCache
from callboard_core.errors import Conflict, Forbidden, NotFound, Unauthenticated, ValidationFailed
from callboard_core.principals import KeyPrincipal
from callboard_core.security import tokens

READ = "read"
WRITE = "write"
READ_WRITE = [READ, WRITE]
ALL_SCOPES = frozenset(READ_WRITE)
# lastUsedAt is kept to this precision, so a busy key costs one write a minute, not one per request.
LAST_USED_PRECISION = timedelta(seconds=60)


async def issue(
    session: AsyncSession,
    *,
    agent_id: str | None,
    owner_id: str | None,
    scopes: Sequence[str],
    label: str | None = None,
    expires_at=None,
) -> tuple[str, ApiKey]:
    plaintext = tokens.new_api_key()
    key = ApiKey(
        key_hash=tokens.hash_token(plaintext),
        key_prefix=tokens.api_key_prefix(plaintext),
        label=label,
        agent_id=agent_id,
        owner_id=owner_id,
        scopes=sorted(set(scopes)),
        expires_at=expires_at,
    )
    session.add(key)
    await session.flush()
    return plaintext, key


class _KeyState(NamedTuple):
    """What authentication needs of a key row, prepared once per load (the read cache keeps it)."""

    principal: KeyPrincipal
    revoked: bool
    expires_at: datetime | None
    touch_due_at: datetime | None  # lastUsedAt + LAST_USED_PRECISION; None: never used


async def _load_key(session: AsyncSession, raw_key: str, key_hash: str) -> _KeyState | None:
    if not tokens.api_key_well_formed(raw_key):  # a typo costs no query
        return None
    row = (
        await session.execute(
            select(
                ApiKey.id,
                ApiKey.agent_id,
                ApiKey.owner_id,
                ApiKey.scopes,
                ApiKey.revoked_at,
                ApiKey.expires_at,
                ApiKey.last_used_at,
            ).where(ApiKey.key_hash == key_hash)
        )
    ).one_or_none()
    if row is None:
        return None
    principal = KeyPrincipal(
        key_id=row.id, agent_id=row.agent_id, owner_id=row.owner_id, scopes=frozenset(row.scopes)
    )
    due_at = row.last_used_at + LAST_USED_PRECISION if row.last_used_at is not None else None
    return _KeyState(principal, row.revoked_at is not None, row.expires_at, due_at)


async def authenticate(
    session: AsyncSession, raw_key: str, cache: ReadCache | None = None
) -> tuple[KeyPrincipal, bool]:
    """The caller behind an X-API-Key value, and whether its lastUsedAt is due for a refresh.

    Refuses malformed (bad checksum), unknown, revoked and expired keys alike, with one message.
    The key's row may come from the read cache; revocation and expiry are judged on every call.
    """
    key_hash = tokens.hash_token(raw_key)
    if cache is None:
        state = await _load_key(session, raw_key, key_hash)
    else:
        cache_key = ("api_key", key_hash)
        state = cache.get(cache_key)
        if state is MISSING:
            state = await cache.load(cache_key, lambda: _load_key(session, raw_key, key_hash))
    now = clock.now()
    if state is None or state.revoked or (state.expires_at is not None and state.expires_at <= now):
        raise Unauthenticated(
            "The API key is not valid (unknown, revoked or expired).", code="invalid_api_key"
        )
    return state.principal, state.touch_due_at is None or now >= state.touch_due_at


async def touch(db: Database, key_id: str) -> None:
    """Record use, in its own short write transaction (authentication itself only reads)."""
    now = clock.now()
    async with db.session(write=True) as session, session.begin():
        await session.execute(
            update(ApiKey)
            .where(
                ApiKey.id == key_id,
                or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < now - LAST_USED_PRECISION),
            )
            .values(last_used_at=now)
        )


def check_scopes(
    requested: Sequence[str] | None, *, default: Sequence[str], ceiling: frozenset[str]
) -> list[str]:
    scopes = sorted(set(requested)) if requested else sorted(set(default))
    if not scopes:
        raise ValidationFailed(
            "At least one scope is required.",
            errors=[{"field": "scopes", "code": "empty", "message": "at least one scope"}],
        )
    if not set(scopes) <= ceiling:
        raise Forbidden(
            "A key cannot grant scopes its creator does not hold.",
            code="scope_escalation",
            allowed=sorted(ceiling),
        )
    return scopes


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


async def revoke_for_agent(session: AsyncSession, agent_id: str, *, reason: str) -> int:
    result = await session.execute(
        update(ApiKey)
        .where(ApiKey.agent_id == agent_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=clock.now(), revoked_reason=reason)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def revoke_for_owner(session: AsyncSession, owner_id: str, *, reason: str) -> int:
    result = await session.execute(
        update(ApiKey)
        .where(ApiKey.owner_id == owner_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=clock.now(), revoked_reason=reason)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def get_visible(
    session: AsyncSession, key_id: str, *, owner_id: str | None, agent_id: str | None
) -> ApiKey:
    """A key the caller may see: its owner's keys, or (for an unclaimed agent) the agent's own. Else 404."""
    key = await session.get(ApiKey, key_id)
    if key is None or not _visible(key, owner_id=owner_id, agent_id=agent_id):
        raise NotFound("No such API key.", code="api_key_not_found")
    return key


def _visible(key: ApiKey, *, owner_id: str | None, agent_id: str | None) -> bool:
    if owner_id is not None:
        return key.owner_id == owner_id
    return agent_id is not None and key.agent_id == agent_id


# --- listing, minting and revoking for a caller ----------------------------------------------------


async def _list(session: AsyncSession, *conditions: Any) -> ApiKeyList:
    rows = (
        (
            await session.execute(
                select(ApiKey).where(*conditions).order_by(ApiKey.created_at.desc(), ApiKey.id.desc())
            )
        )
        .scalars()
        .all()
    )
    return ApiKeyList(keys=await info(session, rows))


async def list_for_owner(session: AsyncSession, owner_id: str) -> ApiKeyList:
    """Every key of this owner (revoked ones too, flagged), newest first."""
    return await _list(session, ApiKey.owner_id == owner_id)


async def list_for_key(session: AsyncSession, caller: KeyPrincipal) -> ApiKeyList:
    """The keys the calling key may see: its owner's; for a provisional agent (no owner), the agent's own."""
    if caller.owner_id is not None:
        return await list_for_owner(session, caller.owner_id)
    return await _list(session, ApiKey.agent_id == caller.agent_id)


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
    plaintext, key = await issue(session, agent_id=agent_id, owner_id=owner_id, scopes=scopes, label=label)
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


async def create_for_key(session: AsyncSession, caller: KeyPrincipal, body: ApiKeyCreate) -> ApiKeyCreated:
    """A new key, for the calling agent by default or another agent of the same owner; the scopes are
    read+write by default and never more than the caller's own (403 scope_escalation)."""
    scopes = check_scopes(body.scopes, default=READ_WRITE, ceiling=caller.scopes)
    agent_id = body.agent_id or caller.agent_id
    if agent_id is not None:
        if agent_id == caller.agent_id and caller.owner_id is None:
            agent = await session.get(Agent, agent_id)  # a provisional agent minting for itself
            if agent is None or agent.deleted_at is not None:
                raise NotFound("No such agent.", code="agent_not_found")
        else:
            await mintable_agent(session, agent_id, caller.owner_id)
    actor = ("agent", caller.agent_id) if caller.agent_id else ("user", caller.owner_id)
    return await mint(
        session,
        agent_id=agent_id,
        owner_id=caller.owner_id,
        scopes=scopes,
        label=body.label,
        actor_type=actor[0],
        actor_id=actor[1],
    )


async def create_for_owner(session: AsyncSession, owner_id: str, body: ApiKeyCreate) -> ApiKeyCreated:
    """A new key minted from the dashboard: for one of the owner's agents, or owner-level (no agentId)."""
    scopes = check_scopes(body.scopes, default=READ_WRITE, ceiling=ALL_SCOPES)
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


async def _revoke(
    session: AsyncSession, key: ApiKey, *, actor_type: str, actor_id: str | None
) -> ApiKeyRevoked:
    """Revoke now (compare-and-set on revoked_at); revoking a revoked key again is a no-op."""
    now = clock.now()
    won = (
        await session.execute(
            update(ApiKey)
            .where(ApiKey.id == key.id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=now, revoked_reason="revoked")
            .returning(ApiKey.id)
            .execution_options(synchronize_session=False)
        )
    ).first()
    if won is not None:
        audit.record(
            session,
            actor_type=actor_type,
            actor_id=actor_id,
            action="api_key.revoked",
            target_type="api_key",
            target_id=key.id,
            agent_id=key.agent_id,
        )
    await session.refresh(key)
    return ApiKeyRevoked(key_info=await info_one(session, key))


async def revoke_for_key(session: AsyncSession, caller: KeyPrincipal, key_id: str) -> ApiKeyRevoked:
    key = await get_visible(session, key_id, owner_id=caller.owner_id, agent_id=caller.agent_id)
    actor = ("agent", caller.agent_id) if caller.agent_id else ("user", caller.owner_id)
    return await _revoke(session, key, actor_type=actor[0], actor_id=actor[1])


async def revoke_for_owner_key(session: AsyncSession, owner_id: str, key_id: str) -> ApiKeyRevoked:
    key = await get_visible(session, key_id, owner_id=owner_id, agent_id=None)
    return await _revoke(session, key, actor_type="user", actor_id=owner_id)
