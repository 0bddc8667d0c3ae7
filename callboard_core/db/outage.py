"""A lost or unreachable database is an outage the caller can wait out, not a bug: both front ends answer it
as 503 `database_unavailable` with a retry delay (an HTTP `Retry-After`, the same body over MCP).

A deadlock or a serialization failure is the database undoing one transaction so that others can go on:
the write pipeline runs such an action again itself (`write_conflict`, `pipeline.run_write`); only one
that keeps colliding reaches the caller, as the same 503 with words that say what happened."""

from __future__ import annotations

import asyncpg
from sqlalchemy import exc as sa

from callboard_core.errors import Unavailable

RETRY_AFTER_SECONDS = 2

# What a database failure can raise: the front ends hand these to `as_outage` (anything else is a bug).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    sa.SQLAlchemyError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    ConnectionError,
)
# A retry may get past these: a connection refused, reset or closed under us, a server shutting down or
# restarting, an exhausted pool, a lock or deadlock given up on.
_TRANSIENT: tuple[type[BaseException], ...] = (
    sa.TimeoutError,
    sa.OperationalError,
    sa.InterfaceError,
    asyncpg.InterfaceError,  # "connection is closed", "connection was closed in the middle of operation"
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08
    asyncpg.exceptions.OperatorInterventionError,  # 57: admin shutdown, cannot connect now
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.LockNotAvailableError,
    ConnectionError,
    TimeoutError,
)


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return seen


# PostgreSQL ended the transaction to break a lock cycle, or to keep a serializable history: nothing of it
# was stored, and the same work run again normally goes through.
_CONFLICTS: dict[type[BaseException], str] = {
    asyncpg.exceptions.DeadlockDetectedError: "deadlock",  # SQLSTATE 40P01
    asyncpg.exceptions.SerializationError: "serialization",  # 40001
}


def write_conflict(error: BaseException) -> str | None:
    """Why the database undid the transaction for colliding with others ("deadlock" or "serialization": run
    it again), else None."""
    for link in _chain(error):
        for kind, reason in _CONFLICTS.items():
            if isinstance(link, kind):
                return reason
    return None


def as_outage(error: BaseException) -> Unavailable | None:
    """The 503 for a database error a retry may get past; None for anything else (a bug stays a 500)."""
    if write_conflict(error) is not None:
        return Unavailable(
            "This request kept colliding with others changing the same records, so the database undid it "
            "(nothing was stored). Retry in a few seconds; a write retried with the same Idempotency-Key is "
            "applied at most once.",
            code="database_unavailable",
            retry_after=RETRY_AFTER_SECONDS,
        )
    retryable = any(
        isinstance(link, _TRANSIENT) or (isinstance(link, sa.DBAPIError) and link.connection_invalidated)
        for link in _chain(error)
    )
    if not retryable:
        return None
    return Unavailable(
        "The database is not reachable right now. Retry in a few seconds; a write retried with the same "
        "Idempotency-Key is applied at most once.",
        code="database_unavailable",
        retry_after=RETRY_AFTER_SECONDS,
    )
