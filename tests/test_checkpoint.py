"""SQLite's WAL checkpoints run on the server's own thread, not in a writer's commit (db/checkpoint.py)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from callboard_core.container import Core
from callboard_core.db.checkpoint import WRITER_AUTOCHECKPOINT_PAGES, Checkpointer
from callboard_core.db.engine import Database
from http_api.app import create_app

ROWS = 300


async def _write_rows(db: Database, start: int, count: int) -> None:
    for i in range(start, start + count):  # one transaction each, as requests write
        async with db.session(write=True) as session, session.begin():
            await session.execute(text("INSERT INTO t (id, body) VALUES (:i, :b)"), {"i": i, "b": "x" * 2000})


def _rows_in_the_database_file(path: Path, tmp_path: Path) -> int:
    """The rows the database file holds by itself: a copy of it without its WAL, opened alone."""
    copy = tmp_path / "copy.db"
    shutil.copyfile(path, copy)
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
async def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'c.db'}")
    async with database.session(write=True) as session, session.begin():
        await session.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)"))
    conn = sqlite3.connect(tmp_path / "c.db")  # the table itself in the file: the tests count its rows there
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return database


async def test_writers_leave_the_checkpoint_to_the_thread_until_the_wal_is_large(db: Database) -> None:
    async with db.session(write=True) as session, session.begin():
        pages = (await session.execute(text("PRAGMA wal_autocheckpoint"))).scalar()
    assert pages == WRITER_AUTOCHECKPOINT_PAGES  # SQLite's own default is 1,000
    await db.dispose()


async def test_the_thread_copies_what_the_writers_committed_into_the_database_file(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    await _write_rows(db, 0, ROWS)
    # Below the writers' threshold nothing has reached the file yet: the rows are in the WAL only.
    assert _rows_in_the_database_file(path, tmp_path) == 0
    checkpointer = db.start_checkpointer()
    assert checkpointer is not None and checkpointer.running
    for _ in range(200):
        if checkpointer.last is not None and checkpointer.last[0] > 0:
            break
        await asyncio.sleep(0.02)
    assert checkpointer.last is not None
    frames, copied = checkpointer.last
    assert frames > 0 and copied == frames  # no reader or writer held it back: all of it
    assert _rows_in_the_database_file(path, tmp_path) == ROWS
    # Writes go on while it runs; the next run takes them too.
    await _write_rows(db, ROWS, 50)
    runs = checkpointer.runs
    for _ in range(200):
        if checkpointer.runs > runs + 1:
            break
        await asyncio.sleep(0.02)
    assert _rows_in_the_database_file(path, tmp_path) == ROWS + 50
    await db.dispose()
    assert not checkpointer.running  # dispose stopped it


def test_a_writer_mid_transaction_neither_waits_for_it_nor_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("INSERT INTO t VALUES (1, 'committed')")
    conn.execute("BEGIN IMMEDIATE")  # a writer holds the lock, its row not committed
    conn.execute("INSERT INTO t VALUES (2, 'in flight')")
    checkpointer = Checkpointer(str(path))
    # PASSIVE: it runs beside the writer, copying what was committed.
    assert checkpointer.run_once() is not None
    conn.execute("COMMIT")
    assert _rows_in_the_database_file(path, tmp_path) == 1
    assert checkpointer.run_once() is not None
    assert _rows_in_the_database_file(path, tmp_path) == 2
    checkpointer.stop()
    conn.close()


async def test_the_server_checkpoints_on_its_own_thread_while_it_runs(core: Core) -> None:
    app = create_app(core=core)
    async with app.router.lifespan_context(app):
        checkpointer = core.db.checkpointer
        running = checkpointer is not None and checkpointer.running
        assert running is core.db.is_sqlite  # PostgreSQL has nothing of the kind to do
        if checkpointer is not None:
            assert checkpointer._thread in threading.enumerate()
    assert checkpointer is None or not checkpointer.running  # the lifespan's end stopped it


async def test_postgresql_and_memory_databases_have_no_checkpointer() -> None:
    assert Database("sqlite+aiosqlite:///:memory:").start_checkpointer() is None
    assert Database("postgresql+asyncpg://nobody@127.0.0.1:1/none").start_checkpointer() is None
