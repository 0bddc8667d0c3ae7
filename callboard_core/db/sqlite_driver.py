"""aiosqlite with one thread hop per statement instead of four, and writers queued in process.

aiosqlite runs each sqlite3 call on the connection's own thread: creating a cursor, executing, fetching and
closing are four round trips through a queue and the event loop's self-pipe, and on a small virtual machine
each costs far more than an indexed query does. Here `execute` runs the statement and fetches its rows in
one trip; creating and closing a cursor touch no database file and run inline. Everything else (commit,
rollback, the connection's thread and error types) is aiosqlite's own, so SQLAlchemy's aiosqlite dialect
drives it unchanged through `async_creator`.

Writers of one process queue on a `WriteGate` (an asyncio lock, first come first served) before BEGIN
IMMEDIATE, and leave it when their transaction has ended. Without it, the writers of one server met on the
file lock itself, where SQLite's busy handler puts each waiter to sleep for 1 ms, then 2, 5 … up to 100 ms
between tries: the lock sat free while every waiter slept, and under load a draft's p99 was 1.5 s. Other
processes' writers (`callboard worker`, a second server) still meet this one on the file lock.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, cast

import aiosqlite
from aiosqlite.context import contextmanager
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util import await_only

BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"


def _locked(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY or "database is locked" in str(exc)


def _begin_waiting(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """BEGIN IMMEDIATE waiting up to the busy timeout for another process's write lock (on the connection's
    thread); the connection's own timeout stays 0 for its next attempt on the loop's thread."""
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    try:
        conn.execute(BEGIN_IMMEDIATE)
    finally:
        conn.execute("PRAGMA busy_timeout=0")


def _run(cursor: sqlite3.Cursor, sql: str, parameters: Any) -> list[Any] | None:
    cursor.execute(sql, parameters)
    return cursor.fetchall() if cursor.description is not None else None


class Cursor(aiosqlite.Cursor):
    """Rows are fetched with the statement; the fetch methods hand them out without another trip."""

    def __init__(self, conn: aiosqlite.Connection, cursor: sqlite3.Cursor) -> None:
        super().__init__(conn, cursor)
        self._rows: deque[Any] = deque()

    async def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> Cursor:
        conn = self._conn
        if sql == BEGIN_IMMEDIATE and isinstance(conn, Connection) and conn.begins_inline:
            await conn.begin_immediate(self._cursor)
            self._rows = deque()
            return self
        rows = await self._execute(_run, self._cursor, sql, () if parameters is None else parameters)
        self._rows = deque(rows) if rows else deque()
        return self

    async def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        count = min(self._cursor.arraysize if size is None else size, len(self._rows))
        return [self._rows.popleft() for _ in range(count)]

    async def fetchall(self) -> list[Any]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    async def close(self) -> None:
        self._rows.clear()
        self._cursor.close()


class WriteGate:
    """The in-process queue of one database's writers (see the module's docstring). Waiting longer than the
    busy timeout fails as the file lock would have ("database is locked"), never hangs."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    @property
    def waiting(self) -> int:
        """Writers waiting for their turn now (tests; a sign of write contention)."""
        if self._lock is None:
            return 0
        return sum(not waiter.done() for waiter in self._lock[1]._waiters or ())

    def lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:  # an asyncio lock serves one loop
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]


class Connection(aiosqlite.Connection):
    inline = False  # run statements on the calling (event loop) thread: see connector()
    wal = False  # the file is in WAL mode (set at connect): a write transaction's statements never wait
    _gate: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None  # held from BEGIN to the end
    commits_landed = 0  # this process's commits through this driver, counted once done (db/readcache.py)
    # A writer of a WAL database whose busy timeout is 0 (begin_inline): its BEGIN IMMEDIATE tries the loop's
    # thread first and waits on its own thread only when another process holds the lock.
    begins_inline = False
    begin_wait_ms = 0

    def begin_inline(self, busy_timeout_ms: int) -> None:
        """From now on, BEGIN IMMEDIATE runs as `begin_immediate` does (set at connect; the caller has set
        the connection's busy timeout to 0)."""
        self.begins_inline, self.begin_wait_ms = True, busy_timeout_ms

    async def begin_immediate(self, cursor: sqlite3.Cursor) -> None:
        """Take the write lock. This process's writers queue on the gate before it, so the lock is free but
        when another process (`callboard worker`, a second server) writes: then the attempt on the loop's
        thread fails at once (busy timeout 0) and the wait happens on the connection's thread, up to the busy
        timeout, as every BEGIN IMMEDIATE used to. The hand-off to that thread and back cost more than the
        rest of a draft's transaction, which holds the gate all the while."""
        if not self.try_begin_inline(cursor):
            await super()._execute(_begin_waiting, self._conn, self.begin_wait_ms)

    async def enter_gate(self, gate: WriteGate) -> None:
        """Wait for this process's turn to write (before BEGIN IMMEDIATE)."""
        lock = gate.lock()
        if lock.locked():
            try:
                async with asyncio.timeout(gate.timeout):
                    await lock.acquire()
            except TimeoutError:
                raise sqlite3.OperationalError("database is locked") from None
        else:
            await lock.acquire()
        self._gate = (asyncio.get_running_loop(), lock)

    def leave_gate(self, *, ended_only: bool = True) -> None:
        """Let the next writer in, once this connection's transaction has ended (or unconditionally)."""
        held = self._gate
        if held is None or (ended_only and self._connection is not None and self._conn.in_transaction):
            return
        self._gate = None
        loop, lock = held
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            lock.release()
        elif not loop.is_closed():  # a connection dropped by the garbage collector, off the loop
            loop.call_soon_threadsafe(lock.release)

    async def commit(self) -> None:
        try:
            await super().commit()
            Connection.commits_landed += 1
        finally:
            self.leave_gate()

    async def rollback(self) -> None:
        try:
            await super().rollback()
        finally:
            self.leave_gate()

    def commit_inline(self) -> None:
        """`commit` while `inline` (AdaptedConnection), without a coroutine."""
        try:
            self.run_inline(self._conn.commit)
            Connection.commits_landed += 1
        finally:
            self.leave_gate()

    def rollback_inline(self) -> None:
        try:
            self.run_inline(self._conn.rollback)
        finally:
            self.leave_gate()

    def try_begin_inline(self, cursor: sqlite3.Cursor) -> bool:
        """`begin_immediate`'s first attempt, without a coroutine: whether it took the lock (False: another
        process holds it, and `begin_immediate` must wait for it)."""
        try:
            self.run_inline(cursor.execute, BEGIN_IMMEDIATE)
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
            return False
        return True

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self.leave_gate(ended_only=False)

    def stop(self) -> asyncio.Future[Any] | None:
        # SQLAlchemy's terminate (a connection invalidated or collected mid-transaction): closing it ends the
        # transaction, so the next writer may go.
        try:
            return super().stop()
        finally:
            self.leave_gate(ended_only=False)

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.inline:
            return await super()._execute(fn, *args, **kwargs)
        return self.run_inline(fn, *args, **kwargs)

    def run_inline(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn` on the calling (event loop's) thread, as `_execute` runs it while `inline`."""
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)

    @contextmanager
    async def cursor(self) -> aiosqlite.Cursor:
        # A cursor is a Python object until it executes: no trip to the connection's thread.
        return Cursor(self, self._conn.cursor())


def connector(
    path: str, *, timeout: float, inline: bool = False
) -> Callable[[], Awaitable[aiosqlite.Connection]]:
    """SQLAlchemy's `async_creator` for a database file. The sqlite3 connection is shared with the loop
    thread only for cursor creation and closing, never while a statement runs, hence check_same_thread."""

    async def connect() -> aiosqlite.Connection:
        conn = Connection(partial(sqlite3.connect, path, timeout=timeout, check_same_thread=False), 64)
        conn._thread.daemon = True  # as SQLAlchemy does for aiosqlite: never hold up interpreter exit
        await conn
        conn.inline = inline
        return conn

    return connect


# --- SQLAlchemy's adapter for this driver --------------------------------------------------------------------


class AdaptedCursor(AsyncAdapt_aiosqlite_cursor):
    """SQLAlchemy's cursor adapter with fewer greenlet switches while the connection runs statements inline.
    The adapter runs sync SQLAlchemy code in a greenlet and hands each driver coroutine to the event loop and
    back (`await_`): opening, executing and closing a cursor were three such round trips a statement, a
    quarter to a third of a simple statement's CPU, for coroutines that never wait here (reads, and a writer's
    statements once BEGIN IMMEDIATE holds the lock). While `inline`, executing and closing call sqlite3
    directly. Opening keeps its round trip: SQLAlchemy's AsyncConnection.execute refuses a call that never
    switched (AwaitRequired, its check for a driver that is not async). A BEGIN IMMEDIATE is tried inline
    too, and waits (for another process's lock) through the adapter's own path."""

    __slots__ = ()

    @property
    def _raw(self) -> sqlite3.Cursor:
        return cast(Cursor, self._cursor)._cursor

    def _inline(self, operation: Any) -> Connection | None:
        conn = self._connection
        if isinstance(conn, Connection) and conn.inline and operation != BEGIN_IMMEDIATE:
            return conn
        return None

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        conn = self._inline(operation)
        if conn is None:
            if operation == BEGIN_IMMEDIATE and self._begun_inline():
                return self._cursor
            return super().execute(operation, parameters)
        try:
            rows = conn.run_inline(_run, self._raw, operation, () if parameters is None else parameters)
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        self._rows = deque(rows) if rows else deque()
        return self._cursor

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        conn = self._inline(operation)
        if conn is None:
            return super().executemany(operation, seq_of_parameters)
        try:
            conn.run_inline(self._raw.executemany, operation, seq_of_parameters)
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        return self._cursor

    def _begun_inline(self) -> bool:
        """A writer's BEGIN IMMEDIATE taken on the loop's thread when no other process holds the lock (the
        usual case); False leaves the waiting to the adapter's path (Cursor.execute, begin_immediate)."""
        conn = self._connection
        if not (isinstance(conn, Connection) and conn.begins_inline and conn.inline):
            return False
        try:
            begun = conn.try_begin_inline(self._raw)
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        if begun:
            self._rows = deque()
        return begun

    def close(self) -> None:
        if self._inline(None) is None or self._soft_closed_memoized:
            super().close()
            return
        self._rows.clear()
        self._raw.close()  # a Python object until it executes (Cursor.close)


class AdaptedConnection(AsyncAdapt_aiosqlite_connection):
    """SQLAlchemy's connection adapter: `AdaptedCursor` cursors, and a commit or rollback while `inline`
    without a coroutine."""

    __slots__ = ()
    _cursor_cls = AdaptedCursor

    def _end(self, inline: Callable[[Connection], None], adapted: Callable[[], None]) -> None:
        conn = self._connection
        if not (isinstance(conn, Connection) and conn.inline):
            adapted()
            return
        try:
            inline(conn)
        except Exception as error:
            self._handle_exception(error)

    def commit(self) -> None:
        self._end(Connection.commit_inline, super().commit)

    def rollback(self) -> None:
        self._end(Connection.rollback_inline, super().rollback)


class DBAPI(AsyncAdapt_aiosqlite_dbapi):
    """SQLAlchemy's aiosqlite DBAPI, adapting this driver's connections with `AdaptedConnection`: pass an
    instance as `create_async_engine(module=...)` beside `async_creator=connector(...)`."""

    def connect(self, *arg: Any, **kw: Any) -> AdaptedConnection:
        creator_fn = kw.pop("async_creator_fn")
        return AdaptedConnection(self, await_only(creator_fn(*arg, **kw)))


def dbapi() -> DBAPI:
    return DBAPI(aiosqlite, sqlite3)
