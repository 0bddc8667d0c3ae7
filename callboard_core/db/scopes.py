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
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import ORMExecuteState, Session, SessionTransaction, UOWTransaction

CREDENTIALS = "credentials"  # a key's or a signed-in owner's cached state
TAXONOMY = "taxonomy"  # the active capability tags and job types a draft names
AGENT_STANDING = "agent_standing"  # whether an agent may act, and for whom (jobs/access.AgentStanding)
# scope -> (table, the columns whose updates count; () for every update). Migrations 0021 and 0022 hold
# SQLite's triggers for these: a change here needs a migration of its own (tests/test_readcache.py compares
# them).
SCOPES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    CREDENTIALS: (
        # not last_used_at: a key's use is no change to its credential (ReadCache.touch_due)
        ("api_keys", ("key_hash", "agent_id", "owner_id", "scopes", "expires_at", "revoked_at")),
        ("user_sessions", ()),
        ("users", ("role", "status", "email", "email_verified_at", "deleted_at")),
    ),
    TAXONOMY: (("capability_tags", ()), ("job_types", ())),
    # not its profile, presence, reputation or counts: those change all day and decide nothing here
    AGENT_STANDING: (
        (
            "agents",
            (
                "owner_id",
                "status",
                "archived_at",
                "deleted_at",
                "requester_enabled",
                "worker_enabled",
                "is_house",
            ),
        ),
    ),
}
# scope -> table -> the columns whose updates count (empty: every update)
_WATCHED = {
    scope: {table: frozenset(columns) for table, columns in tables} for scope, tables in SCOPES.items()
}
_ANY = "*"  # a statement whose tables are unknown (text SQL): it may have touched every scope
_ALL = None  # a table's touched columns when any may have changed (an insert, a delete, an unknown update)
Touched = dict[str, set[str] | None]  # table -> the columns an update set, or _ALL


class OwnCommits:
    """This process's completed commits per scope (PostgreSQL's own-commit part of a scope's version)."""

    by_scope: dict[str, int] = dict.fromkeys(SCOPES, 0)


class TrackedSession(Session):
    """PostgreSQL's write sessions: they note the tables (and, for updates, the columns) they write, and count
    a commit for every scope it touched, as the scope's triggers would (a watched column set by an update; any
    insert or delete; any text statement but a SELECT). An agent's heartbeat then leaves its cached standing
    alone, as it does on SQLite."""


# The execution options of a write that changes nothing a scope's entries hold (a key's lastUsedAt touch).
NEUTRAL = {"cache_neutral": True}


def _touched(session: Session) -> Touched:
    touched: Touched = session.info.setdefault("cache_touched", {})
    return touched


def _touch(touched: Touched, table: str, columns: set[str] | None) -> None:
    if table in touched and (columns is _ALL or touched[table] is _ALL):
        touched[table] = _ALL
    elif table in touched:
        touched[table] |= columns  # type: ignore[operator]  # both sets here
    else:
        touched[table] = columns


def _set_columns(statement: Update) -> set[str] | None:
    """The column names an UPDATE's SET names, or _ALL when its values come with the parameters."""
    names = {getattr(key, "name", key) for key in statement._values or ()}
    return {name for name in names if isinstance(name, str)} or _ALL


@event.listens_for(TrackedSession, "do_orm_execute")
def _on_execute(state: ORMExecuteState) -> None:
    if state.execution_options.get("cache_neutral"):
        return
    statement = state.statement
    inner = getattr(statement, "element", None)  # an ORM read of a DML statement's RETURNING (states)
    if isinstance(inner, Insert | Update | Delete):
        statement = inner
    if isinstance(statement, Insert | Update | Delete):
        # with its data-modifying CTEs (db/rows.py writes several tables' rows in one statement)
        for dml in (statement, *(cte.element for cte in statement._independent_ctes)):
            table = getattr(getattr(dml, "table", None), "name", None)
            if table is None:
                _touch(_touched(state.session), _ANY, _ALL)
            else:
                columns = _set_columns(dml) if isinstance(dml, Update) else _ALL
                _touch(_touched(state.session), table, columns)
    elif not state.is_select and str(statement).lstrip()[:6].upper() not in ("SELECT", "WITH"):
        _touch(_touched(state.session), _ANY, _ALL)


@event.listens_for(TrackedSession, "after_flush")
def _on_flush(session: Session, _flush: UOWTransaction) -> None:
    touched = _touched(session)
    for obj in (*session.new, *session.deleted):
        table: Any = getattr(type(obj), "__table__", None)
        _touch(touched, table.name if table is not None else _ANY, _ALL)
    for obj in session.dirty:
        table = getattr(type(obj), "__table__", None)
        if table is None:
            _touch(touched, _ANY, _ALL)
            continue
        state = sa_inspect(obj)
        # the attributes the flush changed (their committed values are still recorded after_flush)
        columns = {
            column.name
            for key in state.committed_state
            for column in getattr(state.mapper.attrs.get(key), "columns", ())
        }
        _touch(touched, table.name, columns)


@event.listens_for(TrackedSession, "after_commit")
def _on_commit(session: Session) -> None:
    touched: Touched | None = session.info.pop("cache_touched", None)
    if not touched:
        return
    for scope, tables in _WATCHED.items():
        if _ANY in touched or any(
            table in touched
            and (touched[table] is _ALL or not watched or not watched.isdisjoint(touched[table]))  # type: ignore[arg-type]
            for table, watched in tables.items()
        ):
            OwnCommits.by_scope[scope] += 1


@event.listens_for(TrackedSession, "after_transaction_end")
def _on_end(session: Session, transaction: SessionTransaction) -> None:
    # After a commit (counted above) or a rollback of the whole transaction; a savepoint's end leaves the
    # transaction's own writes standing.
    if transaction.parent is None:
        session.info.pop("cache_touched", None)
