"""The core's dependencies, built once per process and shared by every front end."""

from __future__ import annotations

from dataclasses import dataclass

from callboard_core.agents import capability_links
from callboard_core.blobs import BlobStore, build_blob_store
from callboard_core.config import Environment, Settings
from callboard_core.db import Database, UnitOfWork
from callboard_core.db.readcache import ReadCache
from callboard_core.idempotency.service import Sealer
from callboard_core.jobs import lifecycle_hooks
from callboard_core.mail.service import Mailer, build_mailer
from callboard_core.payments import hooks as payment_hooks
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
        payment_hooks.register()  # an auto top-up's payment_intent.succeeded credits the owner
        db = Database(
            settings.database_url,
            pool_size=settings.db_pool_size,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        )
        return cls(
            settings=settings,
            db=db,
            mailer=build_mailer(settings, db),
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
        await self.mailer.drain()
        await self.read_cache.aclose()
        await self.processor.aclose()
        await self.db.dispose()
