"""New append-only rows written by one Core INSERT instead of the unit of work's flush.

A flush of a few new objects costs ~0.5 ms of CPU on this machine (the unit of work sorts mappers, tracks
each object's state, fetches what the database returns), several times what the INSERT itself costs. Rows
that are written once and never changed by their transaction (ledger transactions and entries, payouts,
outbox mails, job events, a paid publish's new payment) gain nothing from that bookkeeping. `insert_rows`
sends them as one statement, compiled once per class; the objects stay transient: their attributes are
read as usual, and any later query finds the rows.

Rows nobody reads in their own transaction (a job's events, agents' notifications, the outbox's mails, a
new draft, an award's payout, a paid publish's payment, a posting's documents) are written as the
transaction's very last work (`insert_at_commit`; `insert_dicts_at_commit` from column values, for a wide
row whose mapped object costs more to build than its insert), all tables together: on PostgreSQL in one
statement (each row but the last a data-modifying CTE: one round trip, one parse of a prepared statement,
instead of one per table), on SQLite one per table in the order their first rows were gathered (a parent
before its children). A transaction that does read them back writes them first (`write_gathered`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Insert, Table, bindparam, insert
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.engine import dialect_of
from callboard_core.db.uow import at_commit, sole_statement

# Rows of several tables in one statement only while it stays small: its text grows with the rows, and
# each new shape (each row's table and columns) is compiled and prepared once. Larger batches (an admission
# tells thousands of applicants) go table by table, each in SQLAlchemy's multi-row VALUES batches.
COMBINED_ROWS_MAX = 32


async def insert_rows(session: AsyncSession, rows: Sequence[Any]) -> None:
    """INSERT these new objects of one mapped class now, in the session's transaction (after the session's
    pending new objects, flushed first). A column left unset gets its Python default (written back to the
    object: its id, its time); set to None, it is NULL. A duplicate key raises IntegrityError as a flush
    would."""
    if not rows:
        return
    if session.sync_session.new:  # pending rows go first (these may refer to them): one flush
        await session.flush()
    table, params = _params_of(rows)
    await session.execute(_insert_of(table), params)


async def insert_at_commit(session: AsyncSession, rows: Sequence[Any]) -> None:
    """`insert_rows` as the transaction's last work: every row gathered so (any mapped classes) in as few
    statements as the database allows (see the module's docstring). A job's history gets several events in
    one request. The values are taken now (defaults filled in: an id is known at once); nothing is written if
    the transaction rolls back; a duplicate key fails the commit."""
    if rows:
        await at_commit(session, "rows", [_params_of(rows)], _write, last=True)


async def insert_dicts_at_commit(
    session: AsyncSession, table: Table, rows: Sequence[Mapping[str, Any]]
) -> None:
    """`insert_at_commit` for rows given as column values (a column not named gets its default now)."""
    if rows:
        await at_commit(
            session, "rows", [(table, [_complete(table, row) for row in rows])], _write, last=True
        )


async def write_gathered(session: AsyncSession) -> None:
    """Write now the rows gathered for the commit (`insert_at_commit`): for a transaction that reads them
    back itself (a staff adjustment answers with the document its posting issued)."""
    uow = session.info.get("uow")
    if uow is not None:
        await uow.run_now("rows")


async def _write(session: AsyncSession, batches: list[tuple[Table, list[Mapping[str, Any]]]]) -> None:
    tables: dict[Table, list[Mapping[str, Any]]] = {}
    for table, params in batches:
        tables.setdefault(table, []).extend(params)
    if session.sync_session.new:
        await session.flush()
    rows = [(table, row) for table, params in tables.items() for row in params]
    if len(tables) > 1 and len(rows) <= COMBINED_ROWS_MAX and dialect_of(session) == "postgresql":
        shape = tuple((table, tuple(row)) for table, row in rows)
        await sole_statement(session)
        await session.execute(_combined(shape), _flat(rows))
        return
    if len(rows) == 1:
        await sole_statement(session)
    for table, params in tables.items():
        await session.execute(_insert_of(table), params)


def _params_of(rows: Sequence[Any]) -> tuple[Table, list[dict[str, Any]]]:
    """The column values of new objects of one mapped class, their unset defaults filled in (and written back
    to the objects)."""
    model: Any = type(rows[0])  # a mapped class: hashable
    table, columns = _columns_of(model)
    params = []
    for row in rows:
        state = row.__dict__
        values = {}
        for attribute, column, default in columns:
            if attribute in state:
                value = state[attribute]
            elif default is not None:
                value = default.arg if default.is_scalar else default.arg(None)
                setattr(row, attribute, value)
            else:
                value = None
            values[column] = value
        params.append(values)
    return table, params


def row_values(row: Any, prefix: str = "") -> dict[str, Any]:
    """A new object's column values as `insert_rows` would write them (unset defaults filled in and written
    back: its id is known at once), each key prefixed: the binds of a hand-built statement."""
    _table, (values,) = _params_of([row])
    return {f"{prefix}{column}": value for column, value in values.items()}


def _complete(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """Every column of the table named (a statement naming several rows of one table must not leave a
    default's parameter to SQLAlchemy, which would give each the same name)."""
    values = dict(row)
    for column in table.c:
        if column.key not in values:
            default: Any = column.default
            if default is None:
                values[column.key] = None
            else:
                values[column.key] = default.arg if default.is_scalar else default.arg(None)
    return values


@functools.cache
def _insert_of(table: Table) -> Insert:
    return insert(table)  # built once per table: SQLAlchemy keys and compiles it once


@functools.cache
def _columns_of(model: type[Any]) -> tuple[Table, tuple[tuple[str, str, Any], ...]]:
    mapper = sa_inspect(model)
    table: Table = mapper.local_table
    columns = []
    for prop in mapper.column_attrs:
        (column,) = prop.columns
        if column.server_default is not None and column.default is None:
            # The statement names every column: a server-side default would never apply.
            raise TypeError(f"{table.name}.{column.name} has only a server default: give it a Python one")
        columns.append((prop.key, column.key, column.default))
    return table, tuple(columns)


Shape = tuple[tuple[Table, tuple[str, ...]], ...]  # per row: its table, the columns it names


def _bind(index: int, column: str) -> str:
    return f"w{index}_{column}"


@functools.lru_cache(maxsize=256)
def _combined(shape: Shape) -> Insert:
    """One INSERT for rows of several tables (PostgreSQL): a single-row INSERT per row, all but the last as
    data-modifying CTEs, which PostgreSQL runs to completion whether or not the statement reads them. Built
    once per shape; single-row VALUES, because SQLAlchemy caches no multi-row VALUES statement (it would
    compile this one again on every commit)."""
    *first, last = (
        insert(table).values({c: bindparam(_bind(i, c), type_=table.c[c].type) for c in columns})
        for i, (table, columns) in enumerate(shape)
    )
    return last.add_cte(*(statement.cte(f"w{i}") for i, statement in enumerate(first)))


def _flat(rows: list[tuple[Table, Mapping[str, Any]]]) -> dict[str, Any]:
    return {_bind(i, c): value for i, (_table, row) in enumerate(rows) for c, value in row.items()}
