"""Gapless, human document numbers per kind and year: `RCT-2026-000001`, `INV-…`, `CRN-…`.

A number comes from the (kind, year) counter row, moved by one atomic upsert in the issuing transaction
(`INSERT … ON CONFLICT (kind, year) DO UPDATE SET last_number = last_number + 1 RETURNING last_number`, on
SQLite and PostgreSQL alike), never from max()+1. On PostgreSQL the upsert locks the counter row until the
issuing transaction ends, so concurrent issuers of one kind take turns and each sees the other's number; on
SQLite there is one writer. A transaction that rolls back takes its increment with it: no gap, no reuse.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.engine import dialect_of, insert_for
from callboard_core.documents.models import DocumentCounter, DocumentKind

_counters = cast(Table, DocumentCounter.__table__)


def format_number(kind: DocumentKind, year: int, n: int) -> str:
    return f"{kind.prefix}-{year}-{n:06d}"


async def next_number(session: AsyncSession, kind: DocumentKind, at: datetime) -> str:
    """The next number of `kind` for the year of `at`, taken in the caller's transaction."""
    upsert = (
        insert_for(dialect_of(session))(_counters)
        .values(kind=kind.value, year=at.year, last_number=1)
        .on_conflict_do_update(
            index_elements=[_counters.c.kind, _counters.c.year],
            set_={"last_number": _counters.c.last_number + 1},
        )
        .returning(_counters.c.last_number)
    )
    n = (await session.execute(upsert)).scalar_one()
    return format_number(kind, at.year, int(n))
