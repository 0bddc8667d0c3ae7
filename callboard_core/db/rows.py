"""New append-only rows written by one Core INSERT instead of the unit of work's flush.

A flush of a few new objects costs ~0.5 ms of CPU on this machine (the unit of work sorts mappers, tracks
each object's state, fetches what the database returns), several times what the INSERT itself costs. Rows
that are written once and never changed by their transaction (ledger transactions and entries, documents,
payouts, outbox mails, job events, a paid publish's new payment) gain nothing from that bookkeeping. `insert_rows` sends them as one statement, compiled once per
class; the objects stay transient: their attributes are read as usual, and any later query finds the rows.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.uow import at_commit


async def insert_rows(session: AsyncSession, rows: Sequence[Any]) -> None:
    """INSERT these new objects of one mapped class now, in the session's transaction (after the session's
    pending new objects, flushed first). A column left unset gets its Python default (written back to the
    object: its id, its time); set to None, it is NULL. A duplicate key raises IntegrityError as a flush
    would."""
    if not rows:
        return
    if session.sync_session.new:  # pending rows go first (these may refer to them): one flush
        await session.flush()
    model: Any = type(rows[0])  # a mapped class: hashable
    statement, columns = _insert_of(model)
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
    await session.execute(statement, params)


async def insert_at_commit(session: AsyncSession, key: str, rows: Sequence[Any]) -> None:
    """`insert_rows` as the transaction's last work, every row gathered under `key` (one mapped class) in one
    statement: a job's history gets several events in one request (`uow.at_commit`)."""
    await at_commit(session, f"rows:{key}", rows, insert_rows)


@functools.cache
def _insert_of(model: type[Any]) -> tuple[Any, tuple[tuple[str, str, Any], ...]]:
    mapper = sa_inspect(model)
    table: Table = mapper.local_table
    columns = []
    for prop in mapper.column_attrs:
        (column,) = prop.columns
        if column.server_default is not None and column.default is None:
            # The statement names every column: a server-side default would never apply.
            raise TypeError(f"{table.name}.{column.name} has only a server default: give it a Python one")
        columns.append((prop.key, column.key, column.default))
    return insert(table), tuple(columns)
