"""`callboard worker`: background jobs. Today it purges expired idempotency records; the job
lifecycle's deadline sweeper joins here. Several workers at once are safe (every job is idempotent)."""

from __future__ import annotations

import asyncio
import logging

from callboard_core.config import Settings
from callboard_core.container import Core
from callboard_core.idempotency.service import purge_expired

log = logging.getLogger("callboard.worker")
INTERVAL_SECONDS = 30


async def run_once(core: Core) -> None:
    async with core.uow() as uow:
        purged = await purge_expired(uow.session)
    if purged:
        log.info("purged %d expired idempotency records", purged)


async def run_worker(settings: Settings, *, once: bool = False) -> None:
    core = Core.build(settings)
    try:
        while True:
            await run_once(core)
            if once:
                return
            await asyncio.sleep(INTERVAL_SECONDS)
    finally:
        await core.close()
