"""Background jobs: the job lifecycle's deadline sweeper, the payouts due, the sandbox processor's webhook
deliveries and housekeeping (expired idempotency records).

`callboard serve` runs the sweeper loop in the server process; `callboard worker` runs the same loop on its
own. Several at once are safe: every move is a compare-and-set guarded by its deadline."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from callboard_core import metrics
from callboard_core.agents import presence
from callboard_core.config import Settings
from callboard_core.container import Core
from callboard_core.disputes import service as disputes
from callboard_core.idempotency.service import purge_expired
from callboard_core.jobs.sweeper import sweep
from callboard_core.ledger import service as ledger
from callboard_core.owner_notifications import delivery as notification_delivery
from callboard_core.owner_notifications import triggers as notification_triggers
from callboard_core.payouts import service as payouts
from callboard_core.processor.sandbox.delivery import deliver_pending

if TYPE_CHECKING:
    import httpx  # the sandbox's webhook deliveries import it when they first run (not every server does)

log = logging.getLogger("callboard.worker")
PURGE_EVERY = 60  # passes between housekeeping runs
SHUTDOWN_GRACE = 30.0  # seconds a pass under way may take to finish at shutdown


async def run_once(
    core: Core, *, housekeeping: bool = True, webhook_client: httpx.AsyncClient | None = None
) -> dict[str, int]:
    """One pass. `webhook_client`: how the sandbox's events reach the webhook (tests: over the app)."""
    moved = await sweep(core)
    async with core.uow() as uow:  # presences whose last beat left the freshness window
        moved["presence_lowered"] = await presence.sweep(uow.session)
    moved["dispute_sla"] = await disputes.sweep_sla(core)
    if any(moved.values()):
        log.info("sweeper moved %s", {k: v for k, v in moved.items() if v})
    # Each step stands alone: a processor that is down must not hold up the sweep or the deliveries.
    try:
        sent = await payouts.send_due(core)
    except Exception:
        log.exception("sending the payouts due failed")
    else:
        if sent:
            log.info("payouts: %s", sent)
    try:  # owner notifications' email: first attempts left behind, and retries whose time has come
        mailed = await notification_delivery.deliver_due(core, core.mailer, core.settings)
    except Exception:
        log.exception("delivering owner notifications failed")
    else:
        if mailed:
            log.info("owner notifications: %d delivery attempts", mailed)
    try:
        delivered = await deliver_pending(core.processor, core.settings, webhook_client)
    except Exception:  # the sweep above must not wait on a webhook endpoint that is down
        log.exception("delivering sandbox processor events failed")
    else:
        if delivered:
            log.info("delivered %d sandbox processor events", delivered)
    if housekeeping:
        async with core.uow() as uow:
            purged = await purge_expired(uow.session)
        if purged:
            log.info("purged %d expired idempotency records", purged)
        async with core.uow() as uow:  # one digest per owner per week, for owners with news
            digests = await notification_triggers.weekly_digests(uow.session)
        if digests:
            log.info("wrote %d weekly digests", digests)
    return moved


async def verify_books(core: Core) -> list[str]:
    """Check the whole ledger (`ledger.verify`) and report: each problem logged, their number on /metrics
    (`callboard_ledger_verify_failures`). Full scans: it runs on its own schedule, not every pass."""
    async with core.uow(write=False) as uow:
        problems = await ledger.verify(uow.session)
    metrics.LEDGER_VERIFY_FAILURES.set(len(problems))
    for problem in problems[:50]:
        log.error("ledger check: %s", problem)
    if len(problems) > 50:
        log.error("ledger check: %d more problems", len(problems) - 50)
    return problems


async def loop(core: Core, interval: float, stop: asyncio.Event | None = None) -> None:
    """Sweep every `interval` seconds until `stop` is set (a pass under way finishes first) or cancelled;
    an error is logged and the next pass tries again. The ledger is checked on its own, longer interval
    (first after one interval, so a starting server does not scan the books at once)."""
    stop = stop or asyncio.Event()
    passes = 0
    every = core.settings.ledger_verify_interval_seconds
    verify_at = time.monotonic() + every
    while not stop.is_set():
        try:
            await run_once(core, housekeeping=passes % PURGE_EVERY == 0)
            if every and time.monotonic() >= verify_at:
                verify_at = time.monotonic() + every
                await verify_books(core)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("background pass failed")
        passes += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


@contextlib.asynccontextmanager
async def in_background(core: Core, interval: float) -> AsyncIterator[asyncio.Task[None]]:
    """The loop beside the server. At shutdown the pass under way finishes (each of its steps is a unit of
    work of its own, so one cut short would only wait for the next pass); after SHUTDOWN_GRACE it is cut."""
    stop = asyncio.Event()
    task = asyncio.create_task(loop(core, interval, stop))
    try:
        yield task
    finally:
        stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), SHUTDOWN_GRACE)
        except TimeoutError:
            log.warning("the background pass did not finish within %ss; stopping it", SHUTDOWN_GRACE)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def run_worker(settings: Settings, *, once: bool = False) -> None:
    """`callboard worker`: SIGTERM or SIGINT lets the pass under way finish, then it exits."""
    core = Core.build(settings)
    try:
        if once:
            await run_once(core)
            return
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):  # platforms without signal handlers in asyncio
                running.add_signal_handler(sig, stop.set)
        # Said once the handlers are in place: from here a SIGTERM waits for the pass under way.
        log.info("worker started: a pass every %ss", settings.sweep_interval_seconds)
        await loop(core, settings.sweep_interval_seconds, stop)
        log.info("worker stopped")
    finally:
        await core.close()
