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

On PostgreSQL a state move of a row the transaction holds locked (`states.compare_and_set` on a row
`lookup.current` vouches for) rides with those rows too (`move_at_commit`): the lock and the state read
under it already decided the move, so its guarded UPDATE is a data-modifying CTE of the same statement, which
returns how many moved (one each, or the commit fails). Until then nothing may read the row from the
database: a statement that names a moved table (and any flush) first writes the pending moves on their own
(`_before_statement`), so a read never sees a row behind the session's copy.

Other modules' statements can ride the same way (`ride_at_commit`, a `Rider`: an award's ledger posting, a
transaction's owner notifications and their mails): their data-modifying CTEs join that statement, which
returns what each changed, and each is written first by any statement that names its tables.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Insert, Table, bindparam, event, func, insert, select, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.sql.util import find_tables

from callboard_core.db.engine import dialect_of
from callboard_core.db.scopes import TrackedSession
from callboard_core.db.uow import PASSENGERS, PENDING_MOVES, PENDING_RIDERS, at_commit, sole_statement
from callboard_core.errors import Conflict

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


@dataclass(frozen=True)
class Move:
    """A guarded state move of one locked row, written with the transaction's last statement: `columns` are
    set (the state column first) where the row's `state_column` is still `source`."""

    table: Table
    row_id: str
    state_column: str
    source: str
    columns: tuple[str, ...]
    values: tuple[Any, ...]
    what: str

    def shape(self) -> tuple[Table, str, tuple[str, ...]]:
        return self.table, self.state_column, self.columns


async def move_at_commit(session: AsyncSession, move: Move) -> None:
    """Write `move` with the gathered rows (PostgreSQL: the caller holds the row locked and checked its state
    under the lock), or just before any statement that names its table."""
    pending: list[Move] = session.sync_session.info.setdefault(PENDING_MOVES, [])
    for i, earlier in enumerate(pending):
        if (earlier.table, earlier.row_id, earlier.state_column) == (
            move.table,
            move.row_id,
            move.state_column,
        ):
            # A second move of the row (a starter job's review, then its award): one UPDATE from the state
            # the row is stored in, setting what both set (the later value where they overlap).
            columns = dict(zip(earlier.columns, earlier.values, strict=True))
            columns.update(zip(move.columns, move.values, strict=True))
            pending[i] = replace(earlier, columns=tuple(columns), values=tuple(columns.values()))
            return
    pending.append(move)
    await at_commit(session, "rows", [move], _write, last=True)


def _not_as_expected() -> Exception:
    return RuntimeError("a statement riding with the commit did not change what it expected")


@dataclass(frozen=True)
class Rider:
    """Data-modifying statements of another module that ride with the commit's last statement (PostgreSQL),
    as a move does. `build(*args)` (called once per shape, cached) returns the CTEs and a scalar of what they
    changed. With `expected`, that scalar must be it (a count), or the commit fails with `refused()` (a 409,
    or what the caller's retry expects) and nothing of the transaction is stored; `answered` hears it once
    written (the mails a note rider wrote, for the outbox's log). `params` bind them: each kind of rider
    (its `build`) names its own. Written on its own (`_rider_alone`) before any statement that names its
    tables, or when the rows cannot be combined."""

    build: Callable[..., tuple[tuple[Any, ...], Any]]
    args: tuple[Hashable, ...]
    params: Mapping[str, Any]
    expected: int | None = None
    refused: Callable[[], Exception] = _not_as_expected
    answered: Callable[[Any], None] | None = None

    def shape(self) -> tuple[Any, ...]:
        return self.build, self.args


@functools.lru_cache(maxsize=64)
def _rider_alone(shape: tuple[Any, ...]) -> Any:
    """A rider's CTEs as a statement of their own, answering their count; it says which tables it names."""
    build, args = shape
    ctes, changed = build(*args)
    return naming_its_tables(select(changed).add_cte(*ctes))


def can_ride(session: AsyncSession) -> bool:
    """Whether work can wait for the commit's statement: PostgreSQL, in a unit of work, outside a savepoint
    (whose rollback must take the work with it)."""
    return (
        session.info.get("uow") is not None
        and dialect_of(session) == "postgresql"
        and not session.sync_session.in_nested_transaction()
    )


async def ride_at_commit(session: AsyncSession, rider: Rider) -> None:
    """Write `rider` with the gathered rows (PostgreSQL), or before any statement that names its tables. One
    rider of a kind waits at a time (their binds would meet): a second writes the waiting ones now."""
    sync = session.sync_session
    if not can_ride(session):
        await session.run_sync(_write_rider, rider)
        return
    if rider.build in sync.info.get(PENDING_RIDERS, {}):
        await session.run_sync(_write_pending_now)
    sync.info.setdefault(PENDING_RIDERS, {})[rider.build] = rider
    await at_commit(session, "rows", [rider], _write, last=True)


def _write_rider(session: Session, rider: Rider) -> None:
    changed = session.execute(_rider_alone(rider.shape()), dict(rider.params)).scalar()
    _refuse_unexpected(rider, changed)
    _answer(rider, changed)


def _refuse_unexpected(rider: Rider, changed: Any) -> None:
    if rider.expected is not None and int(changed or 0) != rider.expected:
        raise rider.refused()


def _answer(rider: Rider, changed: Any) -> None:
    if rider.answered is not None:
        rider.answered(changed)


@dataclass(frozen=True)
class Passenger:
    """A write another module would otherwise send as a round trip of its own (a paid award's document
    numbers), waiting for a statement the transaction sends anyway to carry it (PostgreSQL: an award's closing
    statement, `agents.reputation.record_completions`). `build(*args)` (cached) gives its data-modifying CTE
    and a scalar of what it wrote, which the carrier hands to `take`. A carrier runs it before its own work
    (the CTE is read by a filter evaluated once, first), so the rows it locks are taken in the order a
    statement of its own would have taken them. Left uncarried, its module writes it itself (`leave`)."""

    build: Callable[..., tuple[Any, Any]]
    args: tuple[Hashable, ...]
    params: Mapping[str, Any]
    take: Callable[[Any], None]

    def shape(self) -> tuple[Any, ...]:
        return self.build, self.args


def board(session: AsyncSession, passenger: Passenger) -> None:
    """`passenger` waits for a carrier (only in a unit of work on PostgreSQL: elsewhere nothing carries)."""
    session.sync_session.info.setdefault(PASSENGERS, []).append(passenger)


def alight(session: AsyncSession) -> list[Passenger]:
    """The waiting passengers, for a carrier that takes them all (none wait afterwards)."""
    return list(session.sync_session.info.pop(PASSENGERS, ()))


def leave(session: AsyncSession, passenger: Passenger) -> None:
    """`passenger` no longer waits: its module writes it itself."""
    waiting = session.sync_session.info.get(PASSENGERS, [])
    waiting[:] = [other for other in waiting if other is not passenger]


async def write_gathered(session: AsyncSession) -> None:
    """Write now the rows gathered for the commit (`insert_at_commit`): for a transaction that reads them
    back itself (a staff adjustment answers with the document its posting issued)."""
    uow = session.info.get("uow")
    if uow is not None:
        await uow.run_now("rows")


async def _write(
    session: AsyncSession, batches: list[tuple[Table, list[Mapping[str, Any]]] | Move | Rider]
) -> None:
    tables: dict[Table, list[Mapping[str, Any]]] = {}
    # A Move or a Rider here only registered this hook: the pending ones are the session's.
    for batch in batches:
        if isinstance(batch, tuple):
            tables.setdefault(batch[0], []).extend(batch[1])
    if session.sync_session.new:
        await session.flush()  # (writes the pending moves and riders first: `_before_flush`)
    info = session.sync_session.info
    moves: list[Move] = info.get(PENDING_MOVES, [])
    riders: list[Rider] = list(info.get(PENDING_RIDERS, {}).values())
    rows = [(table, row) for table, params in tables.items() for row in params]
    if (
        rows
        and len(tables) + len(moves) + len(riders) > 1
        and len(rows) <= COMBINED_ROWS_MAX
        and dialect_of(session) == "postgresql"
    ):
        info.pop(PENDING_MOVES, None)
        info.pop(PENDING_RIDERS, None)
        shape = tuple((table, tuple(row)) for table, row in rows)
        binds = _flat(rows)
        for i, move in enumerate(moves):
            binds.update(_move_params(i, move))
        for rider in riders:
            binds.update(rider.params)
        await sole_statement(session)
        statement = _combined(shape, tuple(m.shape() for m in moves), tuple(r.shape() for r in riders))
        result = await session.execute(statement, binds)
        if not moves and not riders:
            return
        counted = result.first()
        changed = [
            counted._mapping[f"changed{i}"] if counted is not None else None for i in range(len(riders))
        ]
        # The riders' counts first (a refused posting says so, whatever else moved); what they wrote is
        # told only once every check has passed.
        for rider, what in zip(riders, changed, strict=True):
            _refuse_unexpected(rider, what)
        if moves:
            _check_moved(moves, counted.moved if counted is not None else None)
        for rider, what in zip(riders, changed, strict=True):
            _answer(rider, what)
        return
    if moves or riders:
        await session.run_sync(_write_pending_now)
    if len(rows) == 1:
        await sole_statement(session)
    for table, params in tables.items():
        await session.execute(_insert_of(table), params)


def _write_pending_now(session: Session) -> None:
    """The pending riders, then the pending moves (one may record what a rider wrote), each on its own
    (synchronous: from a session event, or `run_sync`)."""
    riders: dict[Any, Rider] = session.info.pop(PENDING_RIDERS, {})
    for rider in riders.values():
        _write_rider(session, rider)
    moves: list[Move] = session.info.pop(PENDING_MOVES, [])
    for move in moves:
        params = _move_params(0, move)
        moved = len(session.execute(_alone(move.shape()), params).all())
        _check_moved([move], moved)


def _check_moved(moves: list[Move], moved: Any) -> None:
    """Each move held its row locked in the state it left: a miss is a broken lock, never a lost race."""
    if moves and int(moved or 0) != len(moves):
        raise Conflict(
            f"The {moves[0].what} changed while this request ran; try again.",
            code="invalid_state",
            current_state=None,
        )


def _move_params(index: int, move: Move) -> dict[str, Any]:
    params = {f"u{index}_id": move.row_id, f"u{index}_from": move.source}
    params.update({f"u{index}_{c}": value for c, value in zip(move.columns, move.values, strict=True)})
    return params


def _moving(index: int, shape: tuple[Table, str, tuple[str, ...]]) -> Any:
    table, state_column, columns = shape
    return (
        update(table)
        .where(
            table.c.id == bindparam(f"u{index}_id"),
            table.c[state_column] == bindparam(f"u{index}_from", type_=table.c[state_column].type),
        )
        .values({c: bindparam(f"u{index}_{c}", type_=table.c[c].type) for c in columns})
        .returning(table.c.id)
    )


@functools.lru_cache(maxsize=256)
def _alone(shape: tuple[Table, str, tuple[str, ...]]) -> Any:
    """One move on its own, returning the row's id if it moved."""
    return _moving(0, shape).execution_options(**_WRITING)


_WRITING = {"gathered_write": True}  # the pending moves' own statements (`_before_statement` lets them by)


def _moved_tables(session: Session) -> set[str]:
    tables = {move.table.name for move in session.info.get(PENDING_MOVES, ())}
    for rider in session.info.get(PENDING_RIDERS, {}).values():
        tables |= _rider_alone(rider.shape()).get_execution_options()["tables_named"]
    return tables


def naming_its_tables(statement: Any) -> Any:
    """`statement` saying which tables it names (walked once: call it where the statement is built once), so
    a move pending for the commit need not be written before it when it names none of the moved tables."""
    names = tables_named(statement)
    return statement.execution_options(tables_named=names) if names else statement


def tables_named(statement: Any) -> frozenset[str]:
    """The tables `statement` names (`naming_its_tables`' option, for a statement wrapped after it is built)."""
    found = find_tables(
        statement,
        include_crud=True,
        include_joins=True,
        include_selects=True,
        include_aliases=True,
        check_columns=True,
    )
    return frozenset(t.name for t in found if isinstance(t, Table))


@event.listens_for(TrackedSession, "do_orm_execute")
def _before_statement(state: ORMExecuteState) -> None:
    """A statement that names a table with a pending move, or does not say which it names
    (`naming_its_tables`), writes the pending moves first: no read sees a moved row as it was."""
    session = state.session
    if not _pending(session) or state.execution_options.get("gathered_write"):
        return
    named = state.execution_options.get("tables_named")
    if named is None or named & _moved_tables(session):
        _write_pending_now(session)


@event.listens_for(TrackedSession, "before_flush")
def _before_flush(session: Session, *_: Any) -> None:
    if _pending(session):
        _write_pending_now(session)


def _pending(session: Session) -> bool:
    """Whether moves or riders wait for the commit."""
    return bool(session.info.get(PENDING_MOVES)) or bool(session.info.get(PENDING_RIDERS))


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
                value = default_value(default)
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
            values[column.key] = None if default is None else default_value(default)
    return values


def default_value(default: Any) -> Any:
    """A column's Python-side default (or onupdate) evaluated now: its value, or its function's result."""
    return default.arg if default.is_scalar else default.arg(None)


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
def _combined(
    shape: Shape,
    moves: tuple[tuple[Table, str, tuple[str, ...]], ...] = (),
    riders: tuple[tuple[Any, ...], ...] = (),
) -> Insert:
    """One INSERT for rows of several tables (PostgreSQL): a single-row INSERT per row, all but the last as
    data-modifying CTEs, which PostgreSQL runs to completion whether or not the statement reads them; each
    move (`move_at_commit`) one more, the statement returning how many rows they moved (`moved`); each
    rider's CTEs (`ride_at_commit`) too, with what each changed (`changed<i>`, in the riders' order). Built
    once per shape; single-row VALUES, because SQLAlchemy caches no multi-row VALUES statement (it would
    compile this one again on every commit)."""
    *first, last = (
        insert(table).values({c: bindparam(_bind(i, c), type_=table.c[c].type) for c in columns})
        for i, (table, columns) in enumerate(shape)
    )
    updates = [_moving(i, move).cte(f"u{i}") for i, move in enumerate(moves)]
    built = [build(*args) for build, args in riders]
    ctes = [cte for rider_ctes, _changed in built for cte in rider_ctes]
    statement = last.add_cte(*(s.cte(f"w{i}") for i, s in enumerate(first)), *updates, *ctes)
    counts = [select(func.count()).select_from(u).scalar_subquery() for u in updates]
    returned = [sum(counts[1:], counts[0]).label("moved")] if counts else []
    returned += [changed.label(f"changed{i}") for i, (_ctes, changed) in enumerate(built)]
    if not returned:
        return statement
    return statement.returning(*returned).execution_options(**_WRITING)


def _flat(rows: list[tuple[Table, Mapping[str, Any]]]) -> dict[str, Any]:
    return {_bind(i, c): value for i, (_table, row) in enumerate(rows) for c, value in row.items()}
