"""Readiness and the metrics' state gauges, read for the operator's probes (`/readyz`, `/metrics`).

Readiness: can this process serve? The database answers and its schema is at the migration head this
code was written for, and the blob store takes a write. (`/healthz` says only that the process is up.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from functools import lru_cache
from typing import TypeVar

from sqlalchemy import text

from callboard_core import clock, metrics
from callboard_core.container import Core
from callboard_core.db.migrate import head_revision
from callboard_core.ids import new_id
from callboard_core.jobs.sweeper import oldest_due
from callboard_core.schemas import ApiModel

CHECK_TIMEOUT_SECONDS = 3.0
T = TypeVar("T")


class Readiness(ApiModel):
    """`ready` only when every check is `ok`; each check says what is wrong otherwise."""

    ready: bool
    database: str
    schema_revision: str | None
    expected_revision: str
    blobs: str


@lru_cache(maxsize=1)
def _expected() -> str:
    return head_revision()


async def _database(core: Core) -> tuple[str, str | None]:
    try:
        async with core.db.session(write=False) as session:
            revision = await session.scalar(text("SELECT version_num FROM alembic_version"))
    except Exception as exc:  # unreachable, no such table, refused: all "not ready"
        return f"unreachable: {type(exc).__name__}", None
    return "ok", None if revision is None else str(revision)


async def _blobs(core: Core) -> str:
    key = f"health/readyz-{new_id('chk')}"
    try:
        await core.blobs.put_bytes(key, b"ok", "text/plain")
        await core.blobs.delete(key)
    except Exception as exc:
        return f"not writable: {type(exc).__name__}"
    return "ok"


async def _within(check: Awaitable[T], fallback: T) -> T:
    try:
        return await asyncio.wait_for(check, CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return fallback


async def readiness(core: Core) -> Readiness:
    """Both checks at once, each bounded (a hung database must not hang the probe)."""
    (database, revision), blobs = await asyncio.gather(
        _within(_database(core), ("timed out", None)), _within(_blobs(core), "timed out")
    )
    expected = _expected()
    schema_ok = revision == expected
    if database == "ok" and not schema_ok:
        database = f"schema at {revision or 'nothing'}, expected {expected}: run `callboard migrate`"
    return Readiness(
        ready=database == "ok" and blobs == "ok",
        database=database,
        schema_revision=revision,
        expected_revision=expected,
        blobs=blobs,
    )


async def metrics_text(core: Core) -> bytes:
    """`/metrics`: the state gauges read now (database pool, the sweeper's lag), then every metric in the
    Prometheus text format."""
    pool = core.db.write_engine.pool
    metrics.DB_POOL.labels(state="checked_out").set(getattr(pool, "checkedout", lambda: 0)())
    metrics.DB_POOL.labels(state="idle").set(getattr(pool, "checkedin", lambda: 0)())
    async with core.uow(write=False) as uow:
        due = await oldest_due(uow.session)
    metrics.SWEEPER_LAG.set(max(0.0, (clock.now() - due).total_seconds()) if due is not None else 0.0)
    return metrics.exposition()
