"""`by_pk`: Session.get for the hot paths, by a statement built once per class and loader options.

Session.get builds its SELECT, applies its options and computes the statement's cache key on every call that
misses the identity map (~0.1 ms here, several times what the primary-key lookup costs in SQLite); a lifecycle
step made three to six of them. Here the statement is built once, so its cache key is computed once.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy import bindparam, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncSession

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
    values = ident if isinstance(ident, tuple) else (ident,)
    params = {f"pk{i}": value for i, value in enumerate(values)}
    statement = _by_key(cast(Hashable, model), tuple(options))
    row: M | None = (await session.execute(statement, params)).scalar_one_or_none()
    return row


def held(session: AsyncSession, model: type[M], ident: Any) -> M | None:
    """The session's own loaded object of `model` with this primary key, if it holds one (no statement)."""
    values = ident if isinstance(ident, tuple) else (ident,)
    key = sa_inspect(model).identity_key_from_primary_key(values)
    found: M | None = session.sync_session.identity_map.get(key)
    return found if found is not None and not sa_inspect(found).expired_attributes else None


@functools.lru_cache(maxsize=256)  # a bound, should a caller build options per call
def _by_key(model: Hashable, options: tuple[Any, ...]) -> Any:
    mapper = sa_inspect(model)
    where = [column == bindparam(f"pk{i}") for i, column in enumerate(mapper.primary_key)]
    return select(cast(Any, model)).where(*where).options(*options)
