"""`by_pk`: Session.get for the hot paths, by a statement built once per class and loader options; `current`:
the session's object of a row when it is the row as it stands (a compare-and-set then refreshes only the
columns it set: states.compare_and_set); `reread`: Session.refresh, by such a statement, without the reference
cycle refresh leaves per object.

Session.get builds its SELECT, applies its options and computes the statement's cache key on every call that
misses the identity map (~0.1 ms here, several times what the primary-key lookup costs in SQLite); a lifecycle
step made three to six of them. Here the statement is built once, so its cache key is computed once.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy import bindparam, event, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session, SessionTransaction
from sqlalchemy.orm.attributes import set_committed_value

from callboard_core.db.engine import writes_serialised

M = TypeVar("M")


async def by_pk(
    session: AsyncSession, model: type[M], ident: Any, *, options: Sequence[Any] = ()
) -> M | None:
    """The row of `model` with this primary key (a tuple for a composite key), or None: the session's own
    object when it holds one that is loaded, as Session.get. `options` must be the same objects on every call
    (a module constant): they key the statement."""
    found = held(session, model, ident)
    if found is not None:
        return found
    params = _pk_params(ident if isinstance(ident, tuple) else (ident,))
    statement = _by_key(cast(Hashable, model), tuple(options))
    row: M | None = (await session.execute(statement, params)).scalar_one_or_none()
    return row


async def reread(session: AsyncSession, obj: object, *keys: str) -> None:
    """`session.refresh(obj, keys)`: these columns of the object's row (all of them when no key is named)
    read again into the session's object. Session.refresh builds an AttributeState per attribute to look for
    unflushed changes, memoized on the object's state and pointing back at it: a reference cycle per
    refreshed object, left with all it holds for Python's cyclic collector (docs/decisions.md). Here one
    statement, built once per class and keys, and no cycle. The row must exist (NoResultFound)."""
    model = type(obj)
    params = _pk_params(sa_inspect(obj).identity or ())
    if not keys:
        loaded = (await session.execute(_reread_by_key(cast(Hashable, model)), params)).scalar_one()
        if loaded is not obj:  # populate_existing refreshed the session's own object, not this one
            raise InvalidRequestError(f"{obj!r} is not this session's object: nothing to read again into")
        return
    row = (await session.execute(_columns_by_key(cast(Hashable, model), keys), params)).one()
    for key, value in zip(keys, row, strict=True):
        set_committed_value(obj, key, value)


def held(session: AsyncSession, model: type[M], ident: Any) -> M | None:
    """The session's own loaded object of `model` with this primary key, if it holds one (no statement)."""
    values = ident if isinstance(ident, tuple) else (ident,)
    key = sa_inspect(model).identity_key_from_primary_key(values)
    found: M | None = session.sync_session.identity_map.get(key)
    return found if found is not None and not sa_inspect(found).expired_attributes else None


def note_locked(session: AsyncSession, rows: Sequence[Any]) -> None:
    """These loaded objects' rows are locked by the session's transaction (FOR UPDATE, read with
    populate_existing): until it ends, or any rollback, what the session holds of them is current."""
    locked: set[Any] = session.sync_session.info.setdefault(_LOCKED, set())
    locked.update(sa_inspect(row).key for row in rows)


def current(session: AsyncSession, model: type[M], ident: Any) -> M | None:
    """`held`, when what the session holds is the row as it stands, so a write to some of its columns need
    not read the others back: every row a SQLite write transaction reads (its writes are serialised from the
    first statement), or a row this transaction locked (`note_locked`). Else None, and always None once the
    session has ended a transaction: what it still holds may be from that one (a unit of work is one
    transaction, db/uow.py; this keeps a session used for more from trusting it)."""
    info = session.sync_session.info
    found = held(session, model, ident)
    if found is None or info.get(_ENDED):
        return None
    if writes_serialised(session):
        return found
    locked = info.get(_LOCKED)
    return found if locked and sa_inspect(found).key in locked else None


_LOCKED = "callboard.locked_rows"
_ENDED = "callboard.ended_a_transaction"


@event.listens_for(Session, "after_soft_rollback")
def _forget_locks(session: Session, previous_transaction: SessionTransaction) -> None:
    # A rollback, to a savepoint too, may release the locks taken since: the rows are no longer known current.
    session.info.pop(_LOCKED, None)


@event.listens_for(Session, "after_transaction_end")
def _forget_all(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the whole transaction, not a savepoint: its locks and reads are over
        session.info.pop(_LOCKED, None)
        session.info[_ENDED] = True


def _pk_params(values: Sequence[Any]) -> dict[str, Any]:
    return {f"pk{i}": value for i, value in enumerate(values)}


def _where_pk(model: Hashable) -> list[Any]:
    """The primary key's columns equal to binds pk0, pk1, ... (`_pk_params`)."""
    return [column == bindparam(f"pk{i}") for i, column in enumerate(sa_inspect(model).primary_key)]


@functools.lru_cache(maxsize=256)  # a bound, should a caller build options per call
def _by_key(model: Hashable, options: tuple[Any, ...]) -> Any:
    return select(cast(Any, model)).where(*_where_pk(model)).options(*options)


@functools.lru_cache(maxsize=64)
def _reread_by_key(model: Hashable) -> Any:
    return _by_key(model, ()).execution_options(populate_existing=True)


@functools.lru_cache(maxsize=64)
def _columns_by_key(model: Hashable, keys: tuple[str, ...]) -> Any:
    return select(*(getattr(model, key) for key in keys)).where(*_where_pk(model))
