"""The core's dependencies, built once per process and shared by every front end."""

from __future__ import annotations

from dataclasses import dataclass

from callboard_core import payouts, setup_links
from callboard_core.agents import capability_links
from callboard_core.billing import processor_events as billing_events
from callboard_core.blobs import BlobStore, build_blob_store
from callboard_core.config import Environment, Settings
from callboard_core.db import Database, UnitOfWork
from callboard_core.db.readcache import ReadCache
from callboard_core.documents import issue as documents_issue
from callboard_core.idempotency.service import Sealer
from callboard_core.jobs import lifecycle_hooks
from callboard_core.ledger import counting as ledger_counting
from callboard_core.mail.service import Mailer, build_mailer
from callboard_core.owner_notifications import delivery as notification_delivery
from callboard_core.owner_notifications import service as owner_notifications
from callboard_core.owner_notifications import triggers as notification_triggers
from callboard_core.processor import PaymentProcessor, build_processor
from callboard_core.ratelimit import RateLimiter
from callboard_core.security import passwords


@dataclass
class Core:
    settings: Settings
    db: Database
    mailer: Mailer
    rate_limiter: RateLimiter
    sealer: Sealer
    read_cache: ReadCache
    blobs: BlobStore
    processor: PaymentProcessor

    @classmethod
    def build(cls, settings: Settings) -> Core:
        passwords.configure(fast=settings.env is Environment.TEST)
        # Explicit, not import side effects (both idempotent): a process that never imports the job services
        # (a CLI, a worker) must still refuse to archive or delete an agent with work in flight, and a
        # taxonomy edit (tag rename, merge) must reach the agents' tags whatever was imported first.
        lifecycle_hooks.register()
        capability_links.register()
        # Every new ledger posting of a documented kind issues its receipt, invoice or credit note.
        documents_issue.register()
        # Owner notifications hear the job's history, documents and payouts.
        notification_triggers.register()
        # Money: payouts queue on the ledger's captures and hear of accounts and transfers from the
        # processor; setup links complete on the processor's word.
        payouts.register()
        setup_links.register()
        billing_events.register()  # saved cards and top-ups hear the processor's webhooks
        ledger_counting.register()  # every committed ledger posting is counted on /metrics
        db = Database(
            settings.database_url,
            pool_size=settings.db_pool_size,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        )
        mailer = build_mailer(settings, db)
        # Owner notifications' email goes out right after the commit that raised it (the worker retries).
        notification_delivery.install(db, mailer, settings)
        return cls(
            settings=settings,
            db=db,
            mailer=mailer,
            rate_limiter=RateLimiter(settings),
            sealer=Sealer(settings.secret_key),
            read_cache=ReadCache(settings.database_url),
            blobs=build_blob_store(settings),
            processor=build_processor(settings, db),
        )

    def uow(self, *, write: bool = True) -> UnitOfWork:
        return UnitOfWork(self.db, write=write)

    async def start(self) -> None:
        """What needs the event loop: the read cache's change feed on PostgreSQL."""
        await self.read_cache.start()

    async def close(self) -> None:
        await owner_notifications.drain()
        await self.mailer.drain()
        await self.read_cache.aclose()
        await self.processor.aclose()
        await self.db.dispose()
