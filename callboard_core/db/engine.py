"""Engines for SQLite (the embedded default) and PostgreSQL (asyncpg).

SQLite: WAL, foreign keys and a busy timeout on every connection; write transactions begin with
BEGIN IMMEDIATE so two writers queue on the lock instead of one failing (or losing an update) at
commit time. Reads use a second engine whose transactions begin deferred, so they never block writers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool
from sqlalchemy.util import await_only

from callboard_core.db import scopes, sqlite_driver
from callboard_core.db.checkpoint import WRITER_AUTOCHECKPOINT_PAGES, Checkpointer


def json_loads(text: str | bytes) -> Any:
    # orjson parses the JSON columns several times faster (discovery decodes three per job); json.loads stays
    # as the fallback for what orjson refuses and json.dumps may have written (NaN, Infinity).
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def dialect_of(session: AsyncSession) -> str:
    """ "sqlite" or "postgresql": the database the session talks to."""
    return str(session.get_bind().dialect.name)


def insert_for(dialect: str) -> Any:
    """The dialect's own `insert` (it has `on_conflict_do_nothing` / `on_conflict_do_update`)."""
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


def writes_serialised(session: AsyncSession) -> bool:
    """Whether a write transaction holds the database's one write lock from its first statement (SQLite's
    BEGIN IMMEDIATE): every row it reads is then current until it commits, so a row lock, or a re-read
    after taking one, adds nothing. False on PostgreSQL, where rows are locked one by one (FOR UPDATE)."""
    return dialect_of(session) == "sqlite"


class Database:
    def __init__(self, url: str, *, pool_size: int = 10, busy_timeout_ms: int = 30_000, echo: bool = False):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        # SQLite: this process's writers queue here before BEGIN IMMEDIATE (sqlite_driver.WriteGate).
        self.write_gate = sqlite_driver.WriteGate(busy_timeout_ms / 1000) if self.is_sqlite else None
        if self.is_sqlite:
            self.write_engine = _sqlite_engine(
                url,
                immediate=True,
                busy_timeout_ms=busy_timeout_ms,
                echo=echo,
                gate=self.write_gate,
            )
            self.read_engine = _sqlite_engine(
                url, immediate=False, busy_timeout_ms=busy_timeout_ms, echo=echo
            )
        else:
            # LIFO: a steady load reuses the same few warm connections (their backends keep their plans)
            # and idle ones age out, where FIFO would rotate the whole pool.
            engine = create_async_engine(
                url,
                pool_size=pool_size,
                max_overflow=pool_size * 2,
                pool_pre_ping=False,
                pool_use_lifo=True,
                echo=echo,
                json_deserializer=json_loads,
            )
            self.write_engine = self.read_engine = engine
        # A write action holds at most two connections of one pool at once: its prepare step's read and a
        # short write of its own or of the sandbox processor (which keeps its objects in this database).
        # Were every connection held by an action waiting for its second, the pool would deadlock until its
        # timeout; admitting at most half the pool's capacity at a time rules that out. SQLite's reads and
        # writes have separate pools, and its writers queue on the write gate anyway: no limit there.
        self._action_slots = None if self.is_sqlite else max(1, (pool_size * 3) // 2)
        self._action_gate: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._checkpointer: Checkpointer | None = None
        # PostgreSQL's write sessions note the read cache's scopes they touch (db/scopes.py); SQLite counts
        # them by trigger, so its sessions need not.
        self.write_sessions = async_sessionmaker(
            self.write_engine,
            expire_on_commit=False,
            autoflush=False,
            sync_session_class=Session if self.is_sqlite else scopes.TrackedSession,
        )
        # Read sessions commit only to end their transaction: the read cache does not count those commits.
        self.read_sessions = async_sessionmaker(
            self.read_engine, expire_on_commit=False, autoflush=False, info={"readonly": True}
        )

    @contextlib.asynccontextmanager
    async def action_slot(self) -> AsyncIterator[None]:
        """One of the slots a write action runs in (see __init__); immediate on SQLite."""
        if self._action_slots is None:
            yield
            return
        loop = asyncio.get_running_loop()
        if self._action_gate is None or self._action_gate[0] is not loop:  # a semaphore serves one loop
            self._action_gate = (loop, asyncio.Semaphore(self._action_slots))
        async with self._action_gate[1]:
            yield

    def session(self, *, write: bool) -> AsyncSession:
        return (self.write_sessions if write else self.read_sessions)()

    @property
    def checkpointer(self) -> Checkpointer | None:
        """The WAL checkpointer `start_checkpointer` made (None before, and on PostgreSQL)."""
        return self._checkpointer

    def start_checkpointer(self) -> Checkpointer | None:
        """SQLite (a file): checkpoint the WAL on a thread of the server's own, not in a writer's commit on
        the event loop (db/checkpoint.py). Stopped by `dispose`. None where there is nothing to do."""
        path = make_url(self.url).database if self.is_sqlite else None
        if not path or ":memory:" in path or "mode=memory" in self.url:
            return None
        if self._checkpointer is None:
            self._checkpointer = Checkpointer(path)
        self._checkpointer.start()
        return self._checkpointer

    async def dispose(self) -> None:
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.stop)
        await self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            await self.read_engine.dispose()


def _sqlite_engine(
    url: str,
    *,
    immediate: bool,
    busy_timeout_ms: int,
    echo: bool,
    gate: sqlite_driver.WriteGate | None = None,
) -> AsyncEngine:
    memory = ":memory:" in url or url.rstrip("/").endswith("sqlite+aiosqlite:")
    kwargs: dict[str, Any] = {"echo": echo}
    if memory:
        kwargs["poolclass"] = NullPool
    parsed = make_url(url)
    if not memory and parsed.database and not parsed.query:
        kwargs["async_creator"] = sqlite_driver.connector(
            parsed.database, timeout=busy_timeout_ms / 1000, inline=not immediate
        )
        kwargs["module"] = sqlite_driver.dbapi()
        if immediate:
            # One writer at a time holds the gate; a few more connections only let the next ones wait at
            # the gate instead of in the pool's queue (both first come first served). Fewer connections,
            # fewer page caches (up to 2 MB each) and warmer ones: with the default 5 + 10 the server grew
            # by ~5 MB more under a draft load.
            kwargs.update(pool_size=2, max_overflow=2, pool_timeout=busy_timeout_ms / 1000)
    else:
        kwargs["connect_args"] = {"timeout": busy_timeout_ms / 1000}
    engine = create_async_engine(url, json_deserializer=json_loads, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so BEGIN is ours to emit.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        wal = str(cursor.fetchone()[0]).lower() == "wal"
        driver = getattr(dbapi_connection, "driver_connection", None)
        if isinstance(driver, sqlite_driver.Connection):
            driver.wal = wal
        if not immediate:
            # Reads run on the event loop's thread (sqlite_driver): they must never wait for a lock. WAL
            # readers never do; without WAL they would, so they go back to the connection's thread. And the
            # read engine never writes: a write here would be a bug that could block the loop, so it fails.
            cursor.execute("PRAGMA query_only=ON")
            if isinstance(driver, sqlite_driver.Connection) and not wal:
                driver.inline = False
        cursor.execute("PRAGMA foreign_keys=ON")
        if immediate and wal and isinstance(driver, sqlite_driver.Connection):
            # Its BEGIN IMMEDIATE tries the loop's thread without waiting, and waits on the connection's
            # thread with the busy timeout only if another process holds the lock (sqlite_driver). Nothing
            # else a writer runs ever waits in WAL mode.
            cursor.execute("PRAGMA busy_timeout=0")
            driver.begin_inline(busy_timeout_ms)
        else:
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        if immediate and wal:  # the server's thread checkpoints (db/checkpoint.py); this is the fallback
            cursor.execute(f"PRAGMA wal_autocheckpoint={WRITER_AUTOCHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine.sync_engine.pool, "reset")
    def _on_reset(dbapi_connection: Any, _record: Any, state: Any) -> None:
        # A COMMIT that SQLite refused (a deferred foreign key: the ledger's zero sum, migration 0014) leaves
        # its transaction open, and SQLAlchemy, having ended its own, skips the rollback on return: without
        # this the connection would go back to the pool mid-transaction and refuse the next BEGIN.
        raw = getattr(getattr(dbapi_connection, "driver_connection", None), "_conn", None)
        if state.transaction_was_reset and raw is not None and raw.in_transaction:
            dbapi_connection.rollback()

    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        driver = getattr(conn.connection.dbapi_connection, "driver_connection", None)
        if immediate and isinstance(driver, sqlite_driver.Connection) and driver.wal:
            # Only BEGIN IMMEDIATE can wait (for another process's lock, up to busy_timeout): on the
            # connection's thread, and only then (sqlite_driver.Connection.begin_immediate). Once it holds
            # the write lock, nothing in the transaction waits for a lock in WAL mode, so its statements and
            # COMMIT run on the event loop's thread, as reads do, without a thread hand-off each. Before it,
            # this process's writers queue on the gate (sqlite_driver).
            if gate is not None:
                try:
                    await_only(driver.enter_gate(gate))
                except sqlite3.OperationalError as exc:  # waited the busy timeout: as the file lock fails
                    raise OperationalError(begin, None, exc) from None
            driver.inline = driver.begins_inline
            try:
                conn.exec_driver_sql(begin)
            except BaseException:
                driver.leave_gate()
                raise
            driver.inline = True
            return
        conn.exec_driver_sql(begin)

    return engine
