"""The core's dependencies, built once per process and shared by every front end."""

from __future__ import annotations

from dataclasses import dataclass, field

from callboard_core import handlers
from callboard_core.blobs import BlobStore, build_blob_store
from callboard_core.bus import MessageBus
from callboard_core.config import Environment, Settings
from callboard_core.db import Database, UnitOfWork
from callboard_core.db.readcache import ReadCache
from callboard_core.idempotency.service import Sealer
from callboard_core.ledger import counting as ledger_counting
from callboard_core.mail.service import Mailer, build_mailer
from callboard_core.processor import PaymentProcessor, build_processor
from callboard_core.ratelimit import RateLimiter
from callboard_core.security import passwords


def open_database(settings: Settings) -> Database:
    """The database `settings` name, with their pool and SQLite lock timeout."""
    return Database(
        settings.database_url,
        pool_size=settings.db_pool_size,
        busy_timeout_ms=settings.sqlite_busy_timeout_ms,
    )


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
    # Who hears what (callboard_core/handlers.py); rides on every unit of work this core opens.
    bus: MessageBus = field(default_factory=MessageBus)

    @classmethod
    def build(
        cls, settings: Settings, *, db: Database | None = None, read_cache: ReadCache | None = None
    ) -> Core:
        """The core for `settings`. `db` and `read_cache`, when given, are open ones of the same database to
        share: the test suite keeps one of each per database for all its tests (emptying the cache before
        each), as a server keeps them for all its requests."""
        passwords.configure(fast=settings.env is Environment.TEST)
        ledger_counting.declare()  # every kind of money operation shows on /metrics from the start
        assert db is None or db.url == settings.database_url
        db = db or open_database(settings)
        mailer = build_mailer(settings, db)
        core = cls(
            settings=settings,
            db=db,
            mailer=mailer,
            rate_limiter=RateLimiter(settings),
            sealer=Sealer(settings.secret_key),
            read_cache=read_cache or ReadCache(settings.database_url),
            blobs=build_blob_store(settings),
            processor=build_processor(settings, db),
        )
        core.bus = MessageBus(handlers.table(core))
        return core

    def uow(self, *, write: bool = True) -> UnitOfWork:
        return UnitOfWork(self.db, write=write, bus=self.bus)

    async def start(self) -> None:
        """What needs the event loop: the read cache's change feed on PostgreSQL."""
        await self.read_cache.start()

    async def close(self) -> None:
        await self.bus.drain()
        await self.mailer.drain()
        await self.read_cache.aclose()
        await self.processor.aclose()
        await self.db.dispose()
