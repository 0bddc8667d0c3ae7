"""The SQLite driver (one trip per statement; reads on the event loop's thread) behaves as aiosqlite does."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections import Counter

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from callboard_core.db import sqlite_driver
from callboard_core.db.engine import Database


async def _fill(path) -> None:
    conn = await sqlite_driver.connector(str(path), timeout=5)()
    try:
        async with conn.cursor() as cur:
            await cur.execute("CREATE TABLE t (n INTEGER)")
            await cur.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
        await conn.commit()
    finally:
        await conn.close()


@pytest.mark.parametrize("inline", [False, True])
async def test_rows_are_handed_out_in_order_by_every_fetch_method(tmp_path, inline):
    await _fill(tmp_path / "d.db")
    conn = await sqlite_driver.connector(str(tmp_path / "d.db"), timeout=5, inline=inline)()
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT n FROM t ORDER BY n")
            assert await cur.fetchone() == (0,)
            assert await cur.fetchmany(3) == [(1,), (2,), (3,)]
            assert await cur.fetchall() == [(i,) for i in range(4, 10)]
            assert await cur.fetchone() is None
            await cur.execute("UPDATE t SET n = n + 100 WHERE n < ?", (2,))
            assert cur.rowcount == 2 and await cur.fetchall() == []
        await conn.rollback()
    finally:
        await conn.close()


async def test_errors_are_sqlite3_errors(tmp_path):
    conn = await sqlite_driver.connector(str(tmp_path / "e.db"), timeout=5, inline=True)()
    try:
        async with conn.cursor() as cur:
            with pytest.raises(sqlite3.OperationalError, match="no such table"):
                await cur.execute("SELECT * FROM missing")
    finally:
        await conn.close()


async def test_statements_run_on_the_loop_thread_once_a_writer_holds_the_lock(tmp_path):
    """Reads never wait in WAL mode; a write transaction waits only in its BEGIN IMMEDIATE (on the
    connection's thread, when another process holds the lock: test_a_long_write_does_not_stall_the_loop),
    then holds the lock, so its statements run on the loop's thread too, without a thread hand-off each."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    seen: dict[str, int] = {}
    try:
        for write in (True, False):
            async with db.session(write=write) as session:
                raw = await session.connection()  # a writer's BEGIN IMMEDIATE: the lock is ours from here
                driver = (await raw.get_raw_connection()).driver_connection
                name = "write" if write else "read"

                def record(_: int, name: str = name) -> int:
                    seen[name] = threading.get_ident()
                    return 1

                driver._conn.create_function("who", 1, record)
                assert (await session.execute(text("SELECT who(1)"))).scalar_one() == 1
                assert isinstance(driver, sqlite_driver.Connection)
    finally:
        await db.dispose()
    assert seen["read"] == threading.get_ident()  # no trip through a queue and the loop's self-pipe
    assert seen["write"] == threading.get_ident()


async def test_a_statement_needs_no_coroutine_of_the_driver_once_it_runs_inline(tmp_path, monkeypatch):
    """SQLAlchemy's adapter hands each driver coroutine to the event loop and back (a greenlet switch each):
    while the connection runs inline, executing a statement, a writer's BEGIN IMMEDIATE (no other process
    holding the lock), COMMIT and ROLLBACK call sqlite3 directly (sqlite_driver.AdaptedCursor). (A cursor's
    close may still be awaited, from the async side, where it costs no switch.)"""
    calls: Counter[str] = Counter()
    for owner, names in (
        (sqlite_driver.Cursor, ("execute", "executemany")),
        (sqlite_driver.Connection, ("commit", "rollback", "begin_immediate")),
    ):
        for name in names:
            original = getattr(owner, name)

            async def counted(self, *args, _original=original, _name=name, **kwargs):
                calls[_name] += 1
                return await _original(self, *args, **kwargs)

            monkeypatch.setattr(owner, name, counted)
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    try:
        for write in (True, False):  # connected (the connection's settings are not statements of a session)
            async with db.session(write=write) as session:
                await session.execute(text("SELECT 1"))
        calls.clear()
        async with db.session(write=True) as session:
            await session.execute(text("CREATE TABLE t (n INTEGER)"))
            await session.execute(text("INSERT INTO t VALUES (:n)"), [{"n": 1}, {"n": 2}])
            assert (await session.execute(text("SELECT sum(n) FROM t"))).scalar_one() == 3
            await session.commit()
        async with db.session(write=False) as session:
            assert (await session.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2
        assert calls == Counter()
        # SQLAlchemy's AsyncConnection.execute requires one switch a call (AwaitRequired): opening the cursor.
        async with db.write_engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2
    finally:
        await db.dispose()


async def test_a_read_session_cannot_write(tmp_path):
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'y.db'}")
    try:
        async with db.session(write=True) as session, session.begin():
            await session.execute(text("CREATE TABLE t (n INTEGER)"))
        async with db.session(write=False) as session:
            with pytest.raises(OperationalError, match="readonly"):
                await session.execute(text("INSERT INTO t VALUES (1)"))
        async with db.session(write=False) as session:
            assert (await session.execute(text("SELECT count(*) FROM t"))).scalar_one() == 0
    finally:
        await db.dispose()


async def test_a_long_write_does_not_stall_the_loop(tmp_path):
    """A writer waiting for SQLite's lock (held by another connection) waits on its own thread."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'z.db'}", busy_timeout_ms=5_000)
    holder = Database(f"sqlite+aiosqlite:///{tmp_path / 'z.db'}")
    try:
        async with db.session(write=True) as session, session.begin():
            await session.execute(text("CREATE TABLE t (n INTEGER)"))
        held = holder.session(write=True)
        await held.begin()
        await held.execute(text("INSERT INTO t VALUES (1)"))  # holds the write lock

        async def waiting_writer() -> None:
            async with db.session(write=True) as session, session.begin():
                await session.execute(text("INSERT INTO t VALUES (2)"))

        writer = asyncio.create_task(waiting_writer())
        ticks = 0
        for _ in range(20):
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and not writer.done()  # the loop ran while the writer waited
        await held.commit()
        await held.close()
        await asyncio.wait_for(writer, 5)
        async with db.session(write=False) as session:
            assert (await session.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2
    finally:
        await db.dispose()
        await holder.dispose()


async def test_a_free_write_lock_is_taken_on_the_loop_thread_and_a_held_one_waited_for_on_its_own(
    tmp_path, monkeypatch
):
    """BEGIN IMMEDIATE tries the loop's thread first (the connection's busy timeout is 0, so the try never
    waits): no hand-off to the connection's thread when the lock is free. When another process holds it,
    the wait moves to the connection's thread with the configured busy timeout (and fails as a locked
    database past it); the connection's timeout is 0 again after, for its next try."""
    import aiosqlite

    path = tmp_path / "b.db"
    db = Database(f"sqlite+aiosqlite:///{path}", busy_timeout_ms=300)
    handoffs: list[str] = []
    real = aiosqlite.Connection._execute

    async def counted(self, fn, *args, **kwargs):
        handoffs.append(getattr(fn, "__name__", repr(fn)))
        return await real(self, fn, *args, **kwargs)

    try:
        await _table(db)
        await _write(db, 1)  # the pool's connection is open: its connect and PRAGMAs are behind it
        monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
        await _write(db, 2)
        assert handoffs == [], handoffs  # BEGIN IMMEDIATE, the INSERT and COMMIT: all on the loop thread

        other = sqlite3.connect(path, isolation_level=None)  # another process's writer
        other.execute("BEGIN IMMEDIATE")
        handoffs.clear()
        with pytest.raises(OperationalError, match="database is locked"):
            await _write(db, 3)  # waited its 300 ms on its thread, then failed as SQLite does
        assert "_begin_waiting" in handoffs
        waiting = asyncio.create_task(_write(db, 4))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        other.execute("COMMIT")  # the holder ends within the timeout: the waiting writer goes in
        await asyncio.wait_for(waiting, 5)
        other.close()
        async with db.session(write=True) as session:
            raw = await session.connection()
            driver = (await raw.get_raw_connection()).driver_connection
            assert driver._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
        assert await _stored(db) == [1, 2, 4]
    finally:
        await db.dispose()


async def _table(db: Database) -> None:
    async with db.session(write=True) as session, session.begin():
        await session.execute(text("CREATE TABLE t (n INTEGER)"))


async def _write(db: Database, n: int) -> None:
    """One write transaction of its own: insert n."""
    async with db.session(write=True) as session, session.begin():
        await session.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})


async def _stored(db: Database) -> list[int]:
    async with db.session(write=False) as session:
        return list((await session.execute(text("SELECT n FROM t ORDER BY n"))).scalars())


async def test_writers_of_one_process_take_turns_in_arrival_order(tmp_path):
    """The writers of one process queue on the write gate, first come first served, instead of polling
    SQLite's file lock with growing sleeps (a waiter slept up to 100 ms while the lock sat free)."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'g.db'}")
    order: list[int] = []
    try:
        await _table(db)
        first = db.session(write=True)
        await first.begin()
        await first.execute(text("INSERT INTO t VALUES (0)"))  # holds the gate and the lock

        async def writer(n: int) -> None:
            async with db.session(write=True) as session, session.begin():
                await session.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})
                order.append(n)  # inside the transaction: the order the gate let them in

        waiting = []
        assert db.write_gate is not None
        for n in range(1, 4):  # the first holds one of the pool's four connections
            waiting.append(asyncio.create_task(writer(n)))
            for _ in range(500):  # arrive in order: each waits at the gate before the next one starts
                if db.write_gate.waiting == n:
                    break
                await asyncio.sleep(0.01)
            assert db.write_gate.waiting == n
        assert not any(task.done() for task in waiting)
        started = asyncio.get_running_loop().time()
        await first.commit()
        await first.close()
        await asyncio.wait_for(asyncio.gather(*waiting), 5)
        # Each went in as soon as the one before it ended: no busy-handler sleep between them.
        assert asyncio.get_running_loop().time() - started < 0.5
        assert order == [1, 2, 3]
        assert await _stored(db) == [0, 1, 2, 3]
    finally:
        await db.dispose()


async def test_a_writer_waiting_past_the_busy_timeout_fails_as_a_locked_database(tmp_path):
    """A write that waits for another of this process's writers longer than the busy timeout fails as the
    file lock would have ("database is locked"), and the gate is free again once the holder ends."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}", busy_timeout_ms=200)
    try:
        await _table(db)
        holder = db.session(write=True)
        await holder.begin()
        await holder.execute(text("INSERT INTO t VALUES (1)"))
        with pytest.raises(OperationalError, match="database is locked"):
            await _write(db, 2)
        await holder.rollback()  # a rollback frees the gate as a commit does
        await holder.close()
        await _write(db, 3)
        assert await _stored(db) == [3]
    finally:
        await db.dispose()


async def test_a_cancelled_writer_lets_the_next_one_in(tmp_path):
    """A request cancelled inside its write transaction (a client gone, a timeout) ends the transaction and
    frees the gate: the next writer is not stuck behind it."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", busy_timeout_ms=2_000)
    try:
        await _table(db)
        inside = asyncio.Event()

        async def stuck() -> None:
            async with db.session(write=True) as session, session.begin():
                await session.execute(text("INSERT INTO t VALUES (1)"))
                inside.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(stuck())
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _write(db, 2)
        assert await _stored(db) == [2]
    finally:
        await db.dispose()
