"""State machines as data: one table per machine, `{target: frozenset(sources)}`, and the helpers every
package drives its transitions through.

- `check` refuses a move its table does not allow before any row is touched (409 with `current_state`).
- `compare_and_set` moves one row: `UPDATE ... WHERE id = :id AND status IN (<sources>) RETURNING`, so of
  two racing requests exactly one wins; the loser gets None (or, through `move`, the 409 with the state the
  winner left behind). `compare_and_set_where` is the same for every row matching a filter (a batch move).
- `move` is `compare_and_set` that raises: given `current` (the state the caller read) it first refuses a
  move the table does not allow, without touching the row.

Every helper takes its arguments in one order: `session, model, row_id, table, target, *where` (no
`row_id` for the batch move), then keywords; the `**values` are the other columns the move sets.

A table may name several targets for one move when each source has exactly one of them (archiving an agent:
ACTIVE and INACTIVE become INACTIVE, SUSPENDED stays SUSPENDED); `compare_and_set` without a target then
picks each row's target from its current state in the same statement.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, TypeVar

from sqlalchemy import ClauseElement, ColumnElement, bindparam, case, inspect, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from callboard_core.db import lookup, rows
from callboard_core.db.engine import dialect_of
from callboard_core.errors import Conflict

State = TypeVar("State", bound=str)
M = TypeVar("M")
Table = Mapping[State, frozenset[State]]


def sources(table: Table[State], target: State | None = None) -> frozenset[State]:
    """The states a row may leave for `target` (for any target of the table when None)."""
    if target is not None:
        return table.get(target, frozenset())
    return frozenset().union(*table.values())


def allowed(table: Table[State], current: str | None, target: State | None = None) -> bool:
    return current is not None and current in sources(table, target)


def conflict(message: str, *, code: str = "invalid_state", current: str | None, **details: Any) -> Conflict:
    """The 409 for a refused or lost move: its details always name the current state (`currentState`)."""
    return Conflict(message, code=code, current_state=current, **details)


def refusal(
    current: str | None,
    target: str | None = None,
    *,
    what: str,
    code: str = "invalid_state",
    message: str | None = None,
    **details: Any,
) -> Conflict:
    """The 409 for a move the table does not allow from `current`: "This {what} is X; it cannot become Y."
    (or `message`)."""
    text = message or (
        f"This {what} is {current}; it cannot become {target}."
        if target is not None
        else f"This {what} is {current}; it cannot make this move."
    )
    return conflict(text, code=code, current=current, **details)


def check(
    table: Table[State],
    current: str,
    target: State | None = None,
    *,
    what: str,
    code: str = "invalid_state",
    message: str | None = None,
    **details: Any,
) -> None:
    """Refuse a move the table does not allow, naming the current state."""
    if not allowed(table, current, target):
        raise refusal(current, target, what=what, code=code, message=message, **details)


def _key(model: type[Any]) -> Any:
    """The model's one-column primary key."""
    (key,) = inspect(model).primary_key
    return key


def _target_expression(table: Table[State], column: Any, target: State | None) -> Any:
    if target is not None:
        return target
    if len(table) == 1:
        return next(iter(table))
    seen: set[str] = set()
    for from_states in table.values():
        if seen & from_states:  # one source, two targets: the move would be ambiguous
            raise ValueError(f"ambiguous state table: {sorted(seen & from_states)} lead to several targets")
        seen |= from_states
    return case(*((one_of(column, from_states), str(to)) for to, from_states in table.items()), else_=column)


def one_of(column: Any, states: frozenset[Any]) -> Any:
    """`column IN (states)` written as equalities: SQLAlchemy renders an IN list again on every run (an
    expanding parameter), equalities never."""
    equal = [column == state for state in sorted(states)]
    return equal[0] if len(equal) == 1 else or_(*equal)


def _moving(
    model: type[Any],
    table: Table[State],
    target: State | None,
    where: tuple[ColumnElement[bool], ...],
    state_column: str,
    values: dict[str, Any],
    *,
    core: bool = False,
) -> Any:
    """The guarded move's UPDATE. `core`: on the model's table, for a statement built once, whose `where`
    then names the table's columns (`model.__table__.c`), not the mapped attributes: an UPDATE that names a
    mapped class or attribute is ORM-enabled, and the ORM annotates it afresh on every run, so SQLAlchemy
    computes its cache key every time (~0.1 ms for a wide table); a Core statement's key is computed once."""
    subject: Any = inspect(model).local_table if core else model
    column = subject.c[state_column] if core else getattr(model, state_column)
    statement = (
        update(subject)
        .where(one_of(column, sources(table, target)), *where)
        .values({state_column: _target_expression(table, column, target), **values})
    )
    return statement if core else statement.execution_options(synchronize_session=False)


async def compare_and_set(
    session: AsyncSession,
    model: type[M],
    row_id: str,
    table: Table[State],
    target: State | None = None,
    *where: ColumnElement[bool],
    state_column: str = "status",
    where_params: Mapping[str, Any] | None = None,
    **values: Any,
) -> M | None:
    """Move one row to `target` (or, without one, to the target the table gives its current state), setting
    `values` too, if its state is one of the table's sources for that target and every `where` holds.
    With `where_params`, each `where` is a clause the caller built once, on the table's columns, whose bound
    parameters these are (a deadline guard): the statement is then built once too.

    Returns the updated row (the session's copy refreshed: only the columns the move set when the session
    holds the row as it stands, `lookup.current`; else all of them), or None when the row was not in such a
    state (a lost race or a move the table does not allow): the caller decides what that means."""
    if not sources(table, target):
        return None
    if (not where or where_params is not None) and not any(
        isinstance(value, ClauseElement) for value in values.values()
    ):
        # The common move (by id, plain values): its statement built once per shape, the values bound.
        shape = tuple(sorted(table.items())) if target is None else tuple(sorted(sources(table, target)))
        mapped: Any = model  # a mapped class: hashable
        params = {"row_id": row_id, **{f"v_{name}": value for name, value in values.items()}}
        params.update(where_params or {})
        held = lookup.current(session, mapped, row_id)
        if held is None:
            statement = _one_row_move(mapped, shape, target, state_column, tuple(values), where)
            return (await session.execute(statement, params)).scalar_one_or_none()
        if (
            not where
            and dialect_of(session) == "postgresql"
            and not session.sync_session.in_nested_transaction()
        ):
            # Held locked as it stands: the state read under the lock decides; the UPDATE rides with the
            # transaction's last statement (db/rows.move_at_commit).
            return await _move_held(session, held, row_id, table, target, state_column, values)
        # The session holds the row as it stands: only what the move set comes back, onto that object (the
        # whole row, read again through the ORM, cost more than the UPDATE on a wide table such as jobs).
        sync = session.sync_session
        if sync.new or sync.dirty or sync.deleted:  # as the ORM statement's autoflush would, first
            await session.flush()
        statement, keys = _narrow_move(mapped, shape, target, state_column, tuple(values), where)
        row = (await session.execute(statement, params)).first()
        if row is None:
            return None
        for key, value in zip(keys, row, strict=True):
            set_committed_value(held, key, value)
        return held
    statement = (
        _moving(model, table, target, (_key(model) == row_id, *where), state_column, values)
        .returning(model)
        .execution_options(populate_existing=True)
    )
    return (await session.execute(statement)).scalar_one_or_none()


async def _move_held(
    session: AsyncSession,
    held: M,
    row_id: str,
    table: Table[State],
    target: State | None,
    state_column: str,
    values: Mapping[str, Any],
) -> M | None:
    """`compare_and_set` of a row the transaction holds locked (PostgreSQL): decided here from the state the
    lock read, the session's copy set, the guarded UPDATE written at commit (or before any statement that
    reads its table)."""
    current = getattr(held, state_column)
    to = target if target is not None else next((t for t, froms in table.items() if current in froms), None)
    if to is None or current not in sources(table, to):
        return None
    mapper = inspect(type(held))
    columns = {state_column: str(to), **values}
    for column in mapper.local_table.c:
        if column.onupdate is not None and column.key not in columns:
            columns[column.key] = rows.default_value(column.onupdate)  # (as an UPDATE would set it)
    for key, value in columns.items():
        set_committed_value(held, key, value)
    await rows.move_at_commit(
        session,
        rows.Move(
            table=mapper.local_table,
            row_id=row_id,
            state_column=state_column,
            source=str(current),
            columns=tuple(columns),
            values=tuple(columns.values()),
            what=mapper.local_table.name.removesuffix("s").replace("_", " "),
        ),
    )
    return held


@functools.lru_cache(maxsize=1024)
def _one_row_moving(
    model: type[Any],
    shape: tuple[Any, ...],
    target: Any,
    state_column: str,
    names: tuple[str, ...],
    where: tuple[Any, ...] = (),
) -> Any:
    """compare_and_set's UPDATE of one row by id setting `names` (each bound as `v_<name>`, the row id as
    `row_id`); `shape` is the table (no target) or the target's sources, so one shape is one statement.
    SQLAlchemy builds and looks up a statement's cache key on each run; built once, it is a dict lookup."""
    table: dict[Any, frozenset[Any]] = (
        {to: frozenset(froms) for to, froms in shape} if target is None else {target: frozenset(shape)}
    )
    values: dict[str, Any] = {name: bindparam(f"v_{name}") for name in names}
    by_id = (_key(model) == bindparam("row_id"), *where)
    return _moving(model, table, target, by_id, state_column, values, core=True)


@functools.lru_cache(maxsize=1024)
def _one_row_move(*shape: Any) -> Any:
    """`_one_row_moving` (same arguments) returning the whole row, as the session's object refreshed (the
    ORM reads the Core statement's RETURNING)."""
    model = shape[0]
    moving = _one_row_moving(*shape).returning(*inspect(model).local_table.c)
    # It says which tables it names: a posting or a move waiting for the commit (db/rows.py) is not written
    # before it unless it names their tables (an award's capture stays at commit, its accounts locked there).
    return (
        select(model)
        .from_statement(moving)
        .execution_options(populate_existing=True, tables_named=rows.tables_named(moving))
    )


@functools.lru_cache(maxsize=1024)
def _narrow_move(*shape: Any) -> tuple[Any, tuple[str, ...]]:
    """`_one_row_moving` (same arguments) returning only the columns it sets: the state, the values named,
    and those every update sets (`updated_at`), as a Core statement; and their keys, in order."""
    model, state_column, names = shape[0], shape[3], shape[4]
    table = inspect(model).local_table
    keys = tuple(dict.fromkeys((state_column, *names, *(c.key for c in table.c if c.onupdate is not None))))
    return rows.naming_its_tables(_one_row_moving(*shape).returning(*(table.c[key] for key in keys))), keys


async def compare_and_set_where(
    session: AsyncSession,
    model: type[Any],
    table: Table[State],
    target: State | None = None,
    *where: ColumnElement[bool],
    state_column: str = "status",
    **values: Any,
) -> list[str]:
    """`compare_and_set` for every row matching `where` (a batch move); returns the ids that moved."""
    if not sources(table, target):
        return []
    statement = _moving(model, table, target, where, state_column, values).returning(_key(model))
    return [str(row_id) for row_id in (await session.execute(statement)).scalars()]


def batch_move(
    model: type[Any],
    table: Table[State],
    target: State,
    *where: ColumnElement[bool],
    state_column: str = "status",
    **values: Any,
) -> Any:
    """`compare_and_set_where`'s statement, for a move a caller runs often: built once with bound parameters
    (`bindparam`, named unlike any column) in `where` and `values`, run by `moved`. `where` names the
    table's columns (`model.__table__.c`: see `_moving`)."""
    return _moving(model, table, target, where, state_column, values, core=True).returning(_key(model))


async def moved(session: AsyncSession, statement: Any, params: Mapping[str, Any]) -> list[str]:
    """Run a `batch_move` statement; the ids that moved."""
    return [str(row_id) for row_id in (await session.execute(statement, params)).scalars()]


async def current_state(
    session: AsyncSession, model: type[Any], row_id: str, *, state_column: str = "status"
) -> str | None:
    """The row's state as stored now (None: no such row), for a conflict's details."""
    column = getattr(model, state_column)
    return (await session.execute(select(column).where(_key(model) == row_id))).scalar_one_or_none()


async def move(
    session: AsyncSession,
    model: type[M],
    row_id: str,
    table: Table[State],
    target: State | None = None,
    *where: ColumnElement[bool],
    what: str | None = None,
    message: str | None = None,
    code: str = "invalid_state",
    current: str | None = None,
    details: Mapping[str, Any] | None = None,
    state_column: str = "status",
    **values: Any,
) -> M:
    """`compare_and_set`, or a 409 `code` carrying the state the row is in (`current_state`) and `details`.

    Given `current` (the state the caller read), a move the table does not allow is refused (`check`) before
    the row is touched. When the row did not move, the 409 is `message` if given; otherwise the table's
    refusal for the state found ("This {what} is X; it cannot become Y."), or, when that state would still
    allow the move (a `where` said no, or the row went and came back), "The {what} changed while this
    request ran; try again." with the current state only."""
    if message is None and what is None:
        raise TypeError("move() needs `what` (the row's name in its messages) or a `message`")
    name, extra = what or "row", dict(details or {})
    if current is not None:
        check(table, current, target, what=name, code=code, message=message, **extra)
    row = await compare_and_set(
        session, model, row_id, table, target, *where, state_column=state_column, **values
    )
    if row is not None:
        return row
    raise await not_moved(
        session,
        model,
        row_id,
        table,
        target,
        what=name,
        code=code,
        message=message,
        details=extra,
        state_column=state_column,
    )


async def not_moved(
    session: AsyncSession,
    model: type[Any],
    row_id: str,
    table: Table[State],
    target: State | None,
    *,
    what: str,
    code: str = "invalid_state",
    message: str | None = None,
    details: Mapping[str, Any] | None = None,
    state_column: str = "status",
) -> Conflict:
    """The 409 for a row a guarded move left where it was (`move`'s, for a caller that ran the move inside a
    statement of its own): the state it is in now, and why."""
    now = await current_state(session, model, row_id, state_column=state_column)
    if message is not None:
        return conflict(message, code=code, current=now, **dict(details or {}))
    if allowed(table, now, target):  # a `where` said no, or the row left and came back meanwhile
        return conflict(f"The {what} changed while this request ran; try again.", code=code, current=now)
    return refusal(now, target, what=what, code=code, **dict(details or {}))
