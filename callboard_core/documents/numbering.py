"""Gapless, human document numbers per kind and year: `RCT-2026-000001`, `INV-…`, `CRN-…`.

A number comes from the (kind, year) counter row, moved by one atomic upsert in the issuing transaction
(`INSERT … ON CONFLICT (kind, year) DO UPDATE SET last_number = last_number + 1 RETURNING last_number`, on
SQLite and PostgreSQL alike), never from max()+1. On PostgreSQL the upsert locks the counter row until the
issuing transaction ends, so concurrent issuers of one kind take turns and each sees the other's number; on
SQLite there is one writer. A transaction that rolls back takes its increment with it: no gap, no reuse.

The numbers of documents that wait for the commit (a paid award's, on PostgreSQL: `issue.py`) are `Waiting`:
the same upsert rides as a data-modifying CTE in a statement the transaction sends anyway (the award's
closing statement, a `db/rows.Passenger`), which reads it first, so the counters are still taken before the
agents' rows and the accounts, as a statement of their own took them; if nothing carried it, the documents
take their numbers when they are issued, by `next_numbers`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, union_all
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.engine import dialect_of, insert_for
from callboard_core.db.rows import Passenger, board, leave, naming_its_tables
from callboard_core.documents.models import DocumentCounter, DocumentKind

_counters = cast(Table, DocumentCounter.__table__)


def format_number(kind: DocumentKind, year: int, n: int) -> str:
    return f"{kind.prefix}-{year}-{n:06d}"


async def next_number(session: AsyncSession, kind: DocumentKind, at: datetime) -> str:
    """The next number of `kind` for the year of `at`, taken in the caller's transaction."""
    return (await next_numbers(session, [kind], at))[0]


async def next_numbers(session: AsyncSession, kinds: Sequence[DocumentKind], at: datetime) -> list[str]:
    """The next number of each of `kinds` (in their order; a kind named twice gets two) for the year of
    `at`, taken in the caller's transaction by one upsert whatever their number: the documents of one
    ledger transaction (an award's invoice and receipt) cost one statement. Its rows go in kind order, so
    two issuers on PostgreSQL lock the counters in the same order."""
    wanted = Counter(kind.value for kind in kinds)
    rows = [{"kind": kind, "year": at.year, "last_number": n} for kind, n in sorted(wanted.items())]
    # The rows as parameters: one statement compiled once (SQLAlchemy sends them as one multi-row INSERT).
    last = {
        str(kind): int(n) for kind, n in (await session.execute(_upsert(dialect_of(session)), rows)).all()
    }
    return _counted_back(kinds, at.year, last)


def _counted_back(kinds: Sequence[DocumentKind], year: int, last: dict[str, int]) -> list[str]:
    """Each of `kinds` numbered from its kind's last number, counted back over the kinds named."""
    wanted = Counter(kind.value for kind in kinds)
    numbers = []
    for kind in kinds:
        numbers.append(format_number(kind, year, last[kind.value] - wanted[kind.value] + 1))
        wanted[kind.value] -= 1
    return numbers


class Waiting:
    """Numbers a transaction's documents wait for (PostgreSQL, a posting at commit: `issue.py`): carried by
    a statement the transaction sends anyway (`db/rows.Passenger`, the award's closing statement), which
    takes the counters in the same order and the same transaction as `next_numbers`, or else taken by
    `numbers()` when the documents are issued."""

    def __init__(self, session: AsyncSession, kinds: Sequence[DocumentKind], at: datetime) -> None:
        self.kinds, self.at = list(kinds), at
        self.taken: list[str] | None = None
        counted = sorted(Counter(kind.value for kind in kinds).items())  # kind order, as `next_numbers`
        params: dict[str, Any] = {"dn_year": at.year}
        for i, (kind, n) in enumerate(counted):
            params[f"dn_kind{i}"], params[f"dn_n{i}"] = kind, n
        # The passenger calls back `_take` (it holds this object): dropped once carried or left, so the two
        # are freed without the cyclic collector (UnitOfWork._release).
        self.passenger: Passenger | None = Passenger(
            build=_carried, args=(len(counted),), params=params, take=self._take
        )
        board(session, self.passenger)

    def _take(self, carried: Any) -> None:
        last = {kind: int(n) for kind, _, n in (str(each).partition(" ") for each in carried or ())}
        self.taken, self.passenger = _counted_back(self.kinds, self.at.year, last), None

    async def numbers(self, session: AsyncSession) -> list[str]:
        """The numbers, carried or taken now (one statement, `next_numbers`)."""
        if self.taken is None:
            if self.passenger is not None:
                leave(session, self.passenger)
                self.passenger = None
            self.taken = await next_numbers(session, self.kinds, self.at)
        return self.taken


@functools.lru_cache(maxsize=8)
def _carried(count: int) -> tuple[Any, Any]:
    """`_upsert` of `count` kinds (dn_kind<i>, dn_n<i>, dn_year) as a data-modifying CTE (PostgreSQL), its
    rows in kind order from a UNION ALL (SQLAlchemy keys and caches it, which it does not for a multi-row
    VALUES), and the counters it moved, "<kind> <last number>" each."""
    rows = [
        select(
            bindparam(f"dn_kind{i}", type_=_counters.c.kind.type).label("kind"),
            bindparam("dn_year", type_=_counters.c.year.type).label("year"),
            bindparam(f"dn_n{i}", type_=_counters.c.last_number.type).label("last_number"),
        )
        for i in range(count)
    ]
    insert = pg_insert(_counters).from_select(
        ["kind", "year", "last_number"], rows[0] if count == 1 else union_all(*rows)
    )
    moved = (
        insert.on_conflict_do_update(
            index_elements=[_counters.c.kind, _counters.c.year],
            set_={"last_number": _counters.c.last_number + insert.excluded.last_number},
        )
        .returning(_counters.c.kind, _counters.c.last_number)
        .cte("document_numbers")
    )
    return moved, select(
        func.array_agg(func.concat_ws(" ", moved.c.kind, moved.c.last_number))
    ).scalar_subquery()


@functools.cache
def _upsert(dialect: str) -> Any:
    insert = insert_for(dialect)(_counters)
    return naming_its_tables(
        insert.on_conflict_do_update(
            index_elements=[_counters.c.kind, _counters.c.year],
            set_={"last_number": _counters.c.last_number + insert.excluded.last_number},
        ).returning(_counters.c.kind, _counters.c.last_number)
    )
