"""Browser sessions: server-side rows keyed by the hash of the cookie's token."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.auth.models import UserSession
from callboard_core.db.readcache import CREDENTIALS, MISSING, ReadCache
from callboard_core.errors import Unauthenticated
from callboard_core.principals import UserPrincipal
from callboard_core.security import tokens
from callboard_core.security.permissions import Role
from callboard_core.users.models import User, UserStatus

COOKIE_NAME = "svc_session"


async def start(
    session: AsyncSession,
    user: User,
    *,
    ttl: timedelta,
    previous_token: str | None = None,
    ip_address: str | None = None,
    user_agent: str | None = None,
) -> tuple[str, UserSession]:
    """A fresh session for user. The session the browser had before (if any) is revoked: rotation at sign-in."""
    if previous_token:
        await session.execute(
            update(UserSession)
            .where(
                UserSession.token_hash == tokens.hash_token(previous_token), UserSession.revoked_at.is_(None)
            )
            .values(revoked_at=clock.now())
        )
    token = tokens.new_token(32)
    row = UserSession(
        user_id=user.id,
        token_hash=tokens.hash_token(token),
        expires_at=clock.now() + ttl,
        ip_address=ip_address,
        user_agent=user_agent,
    )
    session.add(row)
    await session.flush()
    return token, row


class _SessionState(NamedTuple):
    """What authentication needs of a session row and its user, prepared once per load (the read cache
    keeps it)."""

    principal: UserPrincipal
    usable: bool  # not revoked, user active
    expires_at: datetime


# Built once, as api_keys' `_KEY_BY_HASH`: every signed-in request runs it after any commit.
_SESSION_BY_HASH = (
    select(
        UserSession.id,
        UserSession.expires_at,
        UserSession.revoked_at,
        User.id.label("user_id"),
        User.role,
        User.status,
        User.email,
        User.email_verified_at,
    )
    .join(User, User.id == UserSession.user_id)
    .where(UserSession.token_hash == bindparam("token_hash"))
)


async def _load_session(session: AsyncSession, token_hash: str) -> _SessionState | None:
    row = (await session.execute(_SESSION_BY_HASH, {"token_hash": token_hash})).one_or_none()
    if row is None:
        return None
    principal = UserPrincipal(
        user_id=row.user_id,
        role=Role(row.role),
        session_id=row.id,
        email=row.email,
        email_verified=row.email_verified_at is not None,
    )
    return _SessionState(
        principal, row.revoked_at is None and row.status == UserStatus.ACTIVE, row.expires_at
    )


async def authenticate(session: AsyncSession, token: str, cache: ReadCache | None = None) -> UserPrincipal:
    invalid = Unauthenticated("Your session has ended; sign in again.", code="invalid_session")
    if not token or len(token) > 128:
        raise invalid
    token_hash = tokens.hash_token(token)
    if cache is None:
        state = await _load_session(session, token_hash)
    else:
        cache_key = ("session", token_hash)
        state = cache.get(cache_key, CREDENTIALS)
        if state is MISSING:
            state = await cache.load(cache_key, lambda: _load_session(session, token_hash), CREDENTIALS)
    # Revocation and expiry are judged on every call, also for a cached row.
    if state is None or not state.usable or state.expires_at <= clock.now():
        raise invalid
    return state.principal


async def revoke_all(session: AsyncSession, user_id: str) -> int:
    result = await session.execute(
        update(UserSession)
        .where(UserSession.user_id == user_id, UserSession.revoked_at.is_(None))
        .values(revoked_at=clock.now())
    )
    return int(getattr(result, "rowcount", 0) or 0)
