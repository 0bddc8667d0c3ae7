"""API keys, the credential store: issue, authenticate, look up and revoke keys by holder.

It knows nothing of agents (agents depend on it): which agent may hold a key, and the key listings that name
agents, are agents/keys.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, bindparam, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.api_keys.models import ApiKey
from callboard_core.db.readcache import CREDENTIALS, MISSING, ReadCache
from callboard_core.db.scopes import NEUTRAL
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Forbidden, NotFound, Unauthenticated, ValidationFailed
from callboard_core.guidance import Act, step
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


# Built once: every authenticated request runs it (a miss of the read cache after any commit), and building
# the statement and its cache key each time cost more than SQLite took to answer it.
_KEY_BY_HASH = select(
    ApiKey.id,
    ApiKey.agent_id,
    ApiKey.owner_id,
    ApiKey.scopes,
    ApiKey.revoked_at,
    ApiKey.expires_at,
    ApiKey.last_used_at,
).where(ApiKey.key_hash == bindparam("key_hash"))


async def _load_key(session: AsyncSession, raw_key: str, key_hash: str) -> _KeyState | None:
    if not tokens.api_key_well_formed(raw_key):  # a typo costs no query
        return None
    row = (await session.execute(_KEY_BY_HASH, {"key_hash": key_hash})).one_or_none()
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
        state = cache.get(cache_key, CREDENTIALS)
        if state is MISSING:
            state = await cache.load(cache_key, lambda: _load_key(session, raw_key, key_hash), CREDENTIALS)
    now = clock.now()
    if state is None or state.revoked or (state.expires_at is not None and state.expires_at <= now):
        raise Unauthenticated(
            "The API key is not valid (unknown, revoked or expired).", code="invalid_api_key"
        )
    due = state.touch_due_at is None or now >= state.touch_due_at
    return state.principal, due and (cache is None or cache.touch_due(_touched(state.principal.key_id), now))


def _touched(key_id: str) -> tuple[str, str]:
    return ("touch", key_id)


def note_touch(cache: ReadCache, key_id: str) -> None:
    """This process has set the key's lastUsedAt (or is about to): its cached state keeps the old use time,
    so `authenticate` finds no touch due for a minute."""
    cache.note_touch(_touched(key_id), clock.now() + LAST_USED_PRECISION)


async def touch(uows: UnitsOfWork, key_id: str) -> None:
    """Record use, in a unit of work of its own (authentication itself only reads)."""
    now = clock.now()
    async with uows.uow() as write:
        await write.session.execute(
            update(ApiKey)
            .where(
                ApiKey.id == key_id,
                or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < now - LAST_USED_PRECISION),
            )
            .values(last_used_at=now)
            .execution_options(**NEUTRAL)  # a use: no change to the key's cached credential
        )


def require_scope(principal: KeyPrincipal, *, write: bool) -> None:
    """A key may act only within its scopes: 403 `insufficient_scope`, naming the one needed (every front end
    asks this after authenticating a key)."""
    needed = WRITE if write else READ
    if needed not in principal.scopes:
        raise Forbidden(
            f"This API key lacks the '{needed}' scope.",
            code="insufficient_scope",
            required=needed,
            scopes=sorted(principal.scopes),
            next_action=step(
                Act.CLAIM_LINK,
                "Nobody has claimed you yet, so your key is read-only: give your owner your claim URL "
                "(this mints a fresh one); once they claim you, your key can write.",
            )
            if principal.agent_id is not None and principal.owner_id is None
            else step(Act.OWNER_WRITE_KEY, "A read-only key cannot act: use a key with the write scope."),
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


async def revoke_for_agent(session: AsyncSession, agent_id: str, *, reason: str) -> int:
    result = await session.execute(
        update(ApiKey)
        .where(ApiKey.agent_id == agent_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=clock.now(), revoked_reason=reason)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def revoke_unused(session: AsyncSession, agent_id: str, *, label: str, reason: str) -> int:
    """Revoke the agent's live keys of this label that were never used: a key handed out for a runtime that
    another key has since been configured in (the activation's, once `callboard kit install` minted its own)."""
    result = await session.execute(
        update(ApiKey)
        .where(
            ApiKey.agent_id == agent_id,
            ApiKey.label == label,
            ApiKey.revoked_at.is_(None),
            ApiKey.last_used_at.is_(None),
        )
        .values(revoked_at=clock.now(), revoked_reason=reason)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def revoke_for_owner(
    session: AsyncSession, owner_id: str, *, reason: str, agent_ids: ColumnElement[Any] | None = None
) -> list[str]:
    """Revoke every live key of the owner, and of the agents `agent_ids` names (a subquery of the caller's:
    this store knows no agents); the prefixes revoked."""
    held = ApiKey.owner_id == owner_id
    if agent_ids is not None:
        held = or_(held, ApiKey.agent_id.in_(agent_ids))
    return list(
        (
            await session.execute(
                update(ApiKey)
                .where(held, ApiKey.revoked_at.is_(None))
                .values(revoked_at=clock.now(), revoked_reason=reason)
                .returning(ApiKey.key_prefix)
                .execution_options(synchronize_session=False)
            )
        ).scalars()
    )


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


# --- lookups and batch moves for the agents package ------------------------------------------------


async def for_owner(session: AsyncSession, owner_id: str) -> list[ApiKey]:
    """Every key of this owner (revoked ones too), newest first."""
    return await _newest_first(session, ApiKey.owner_id == owner_id)


async def for_agent(session: AsyncSession, agent_id: str) -> list[ApiKey]:
    """Every key of this agent (revoked ones too), newest first."""
    return await _newest_first(session, ApiKey.agent_id == agent_id)


async def _newest_first(session: AsyncSession, condition: ColumnElement[bool]) -> list[ApiKey]:
    rows = await session.execute(
        select(ApiKey).where(condition).order_by(ApiKey.created_at.desc(), ApiKey.id.desc())
    )
    return list(rows.scalars().all())


async def count_active(session: AsyncSession, agent_ids: Sequence[str]) -> dict[str, int]:
    """How many unrevoked keys each of these agents holds (agents without keys are left out)."""
    if not agent_ids:
        return {}
    rows = await session.execute(
        select(ApiKey.agent_id, func.count())
        .where(ApiKey.agent_id.in_(agent_ids), ApiKey.revoked_at.is_(None))
        .group_by(ApiKey.agent_id)
    )
    return {str(agent_id): int(n) for agent_id, n in rows.all()}


async def hand_to_owner(session: AsyncSession, agent_id: str, owner_id: str) -> int:
    """A claimed agent's live keys become its owner's, read+write; returns how many."""
    result = await session.execute(
        update(ApiKey)
        .where(ApiKey.agent_id == agent_id, ApiKey.revoked_at.is_(None))
        .values(owner_id=owner_id, scopes=READ_WRITE)
    )
    return int(getattr(result, "rowcount", 0) or 0)


class RevokedKey(NamedTuple):
    """What a replacement for a revoked key needs."""

    agent_id: str | None
    owner_id: str | None
    scopes: list[str]
    label: str | None
    expires_at: datetime | None


async def revoke(session: AsyncSession, key_id: str, *, reason: str = "revoked") -> RevokedKey | None:
    """Revoke one key now, compare-and-set on revoked_at: of two revocations one wins.
    Returns what a replacement needs, None if it was revoked already."""
    row = (
        await session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=clock.now(), revoked_reason=reason)
            .returning(ApiKey.agent_id, ApiKey.owner_id, ApiKey.scopes, ApiKey.label, ApiKey.expires_at)
            .execution_options(synchronize_session=False)
        )
    ).one_or_none()
    return None if row is None else RevokedKey(*row)
