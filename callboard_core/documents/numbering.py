"""Gapless, human document numbers per kind and year: `RCT-2026-000001`, `INV-…`, `CRN-…`.

A number comes from the (kind, year) counter row, moved by one atomic upsert in the issuing transaction
(`INSERT … ON CONFLICT (kind, year) DO UPDATE SET last_number = last_number + 1 RETURNING last_number`, on
SQLite and PostgreSQL alike), never from max()+1. On PostgreSQL the upsert locks the counter row until the
issuing transaction ends, so concurrent issuers of one kind take turns and each sees the other's number; on
SQLite there is one writer. A transaction that rolls back takes its increment with it: no gap, no reuse.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.engine import dialect_of, insert_for
from callboard_core.db.rows import naming_its_tables
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
    numbers = []
    for kind in kinds:  # each kind's last number, its numbers counted back from it
        numbers.append(format_number(kind, at.year, last[kind.value] - wanted[kind.value] + 1))
        wanted[kind.value] -= 1
    return numbers


@functools.cache
def _upsert(dialect: str) -> Any:
    insert = insert_for(dialect)(_counters)
    return naming_its_tables(
        insert.on_conflict_do_update(
            index_elements=[_counters.c.kind, _counters.c.year],
            set_={"last_number": _counters.c.last_number + insert.excluded.last_number},
        ).returning(_counters.c.kind, _counters.c.last_number)
    )
