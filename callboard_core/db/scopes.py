"""The read cache's scopes: entries that depend on a few tables only, so a commit that changes none of them
leaves them valid (see db/readcache.py).

Without scopes any commit anywhere empties the whole cache, so under a write load (agents posting work all
day) every authenticated request went back to the database for its credential. A credential's cached state
depends on its own row only: a few columns of `api_keys` for a key (its use, `last_used_at`, is not one);
`user_sessions` and a few columns of `users` for a signed-in owner.

How a scope's changes are counted:
- SQLite: row triggers bump the scope's row of `cache_generations` in the writing transaction (migration
  0021), whichever connection or process writes; the cache reads the generations whenever the database's
  change counter has moved.
- PostgreSQL: statement triggers notify the change feed with the scope's name (changefeed.install_triggers),
  and this process's own commits that touched a scope's tables count at once (`TrackedSession`), before
  their notification arrives.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Delete, Insert, Update, event
from sqlalchemy.orm import ORMExecuteState, Session, SessionTransaction, UOWTransaction

CREDENTIALS = "credentials"  # a key's or a signed-in owner's cached state
# scope -> (table, the columns whose updates count; () for every update). Migration 0021 holds SQLite's
# triggers for these: a change here needs a migration of its own (tests/test_readcache.py compares them).
SCOPES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    CREDENTIALS: (
        # not last_used_at: a key's use is no change to its credential (ReadCache.touch_due)
        ("api_keys", ("key_hash", "agent_id", "owner_id", "scopes", "expires_at", "revoked_at")),
        ("user_sessions", ()),
        ("users", ("role", "status", "email", "email_verified_at", "deleted_at")),
    ),
}
_TABLES = {scope: frozenset(table for table, _ in tables) for scope, tables in SCOPES.items()}
_ANY = "*"  # a statement whose tables are unknown (text SQL): it may have touched every scope


class OwnCommits:
    """This process's completed commits per scope (PostgreSQL's own-commit part of a scope's version)."""

    by_scope: dict[str, int] = dict.fromkeys(SCOPES, 0)


class TrackedSession(Session):
    """PostgreSQL's write sessions: they note the tables they write, and count a commit for every scope it
    touched (a scope's table written by a flush or by a DML statement; any text statement but a SELECT)."""


# The execution options of a write that changes nothing a scope's entries hold (a key's lastUsedAt touch).
NEUTRAL = {"cache_neutral": True}


def _touched(session: Session) -> set[str]:
    touched: set[str] = session.info.setdefault("cache_touched", set())
    return touched


@event.listens_for(TrackedSession, "do_orm_execute")
def _on_execute(state: ORMExecuteState) -> None:
    if state.execution_options.get("cache_neutral"):
        return
    statement = state.statement
    if isinstance(statement, Insert | Update | Delete):
        _touched(state.session).add(getattr(statement.table, "name", _ANY))
    elif not state.is_select and str(statement).lstrip()[:6].upper() not in ("SELECT", "WITH"):
        _touched(state.session).add(_ANY)


@event.listens_for(TrackedSession, "after_flush")
def _on_flush(session: Session, _flush: UOWTransaction) -> None:
    touched = _touched(session)
    for obj in (*session.new, *session.dirty, *session.deleted):
        table: Any = getattr(type(obj), "__table__", None)
        touched.add(table.name if table is not None else _ANY)


@event.listens_for(TrackedSession, "after_commit")
def _on_commit(session: Session) -> None:
    touched = session.info.pop("cache_touched", None)
    if not touched:
        return
    for scope, tables in _TABLES.items():
        if _ANY in touched or not tables.isdisjoint(touched):
            OwnCommits.by_scope[scope] += 1


@event.listens_for(TrackedSession, "after_transaction_end")
def _on_end(session: Session, transaction: SessionTransaction) -> None:
    # After a commit (counted above) or a rollback of the whole transaction; a savepoint's end leaves the
    # transaction's own writes standing.
    if transaction.parent is None:
        session.info.pop("cache_touched", None)
