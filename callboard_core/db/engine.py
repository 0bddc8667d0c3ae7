"""Engines for SQLite (the embedded default) and PostgreSQL (asyncpg).

SQLite: WAL, foreign keys and a busy timeout on every connection; write transactions begin with
BEGIN IMMEDIATE so two writers queue on the lock instead of one failing (or losing an update) at
commit time. Reads use a second engine whose transactions begin deferred, so they never block writers.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool


class Database:
    def __init__(self, url: str, *, pool_size: int = 10, busy_timeout_ms: int = 30_000, echo: bool = False):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self.write_engine = _sqlite_engine(url, immediate=True, busy_timeout_ms=busy_timeout_ms, echo=echo)
            self.read_engine = _sqlite_engine(url, immediate=False, busy_timeout_ms=busy_timeout_ms, echo=echo)
        else:
            engine = create_async_engine(
                url, pool_size=pool_size, max_overflow=pool_size * 2, pool_pre_ping=False, echo=echo
            )
            self.write_engine = self.read_engine = engine
        self.write_sessions = async_sessionmaker(self.write_engine, expire_on_commit=False, autoflush=False)
        self.read_sessions = async_sessionmaker(self.read_engine, expire_on_commit=False, autoflush=False)

    def session(self, *, write: bool) -> AsyncSession:
        return (self.write_sessions if write else self.read_sessions)()

    async def dispose(self) -> None:
        await self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            await self.read_engine.dispose()


def _sqlite_engine(url: str, *, immediate: bool, busy_timeout_ms: int, echo: bool) -> AsyncEngine:
    memory = ":memory:" in url or url.rstrip("/").endswith("sqlite+aiosqlite:")
    kwargs: dict[str, Any] = {"echo": echo}
    if memory:
        kwargs["poolclass"] = NullPool
    engine = create_async_engine(url, connect_args={"timeout": busy_timeout_ms / 1000}, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so BEGIN is ours to emit.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return engine
