"""PostgreSQL's commit notifications, so the read cache can serve there too (see db/readcache.py).

Every table carries a statement trigger that calls `pg_notify('callboard_changes', '')` (installed after
every migration, `install_triggers`); PostgreSQL delivers a notification only when its transaction commits,
once per transaction however many statements fired it. Each process listens on one dedicated connection
and counts what arrives: the count moves after every commit anywhere (this process, `callboard worker`,
another server, psql), and the cache serves an entry only while the count is the one it was loaded under.

While the listening connection is down the feed is not live and the cache serves nothing; it reconnects
with backoff, and reconnecting counts as a change (what was missed while down is unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg
from sqlalchemy.engine import Connection, make_url

from callboard_core.db.scopes import SCOPES

CHANNEL = "callboard_changes"
FUNCTION = "callboard_notify_change"
TRIGGER = "callboard_change"
SCOPE_FUNCTION = "callboard_notify_scope"
SCOPE_TRIGGER = "callboard_scope"  # + "_" + the scope's name

log = logging.getLogger(__name__)


def install_triggers(connection: Connection) -> None:
    """(Re)install the notify trigger on every table of the current schema: idempotent, run by the migration
    environment after every upgrade on PostgreSQL, so a table added by a later migration is covered too."""
    connection.exec_driver_sql(
        f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$"
    )
    tables = (
        connection.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> 'alembic_version'"
        )
        .scalars()
        .all()
    )
    for table in tables:
        connection.exec_driver_sql(
            f'CREATE OR REPLACE TRIGGER {TRIGGER} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "{table}" '
            f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
        )
    # A read cache scope's tables also notify with the scope's name (db/scopes.py): its entries then
    # outlive the commits that touch none of them.
    connection.exec_driver_sql(
        f"CREATE OR REPLACE FUNCTION {SCOPE_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN PERFORM pg_notify('{CHANNEL}', TG_ARGV[0]); RETURN NULL; END $$"
    )
    for scope, watched in SCOPES.items():
        for table, columns in watched:
            of = f" OF {', '.join(columns)}" if columns else ""
            connection.exec_driver_sql(
                f"CREATE OR REPLACE TRIGGER {SCOPE_TRIGGER}_{scope} AFTER INSERT OR UPDATE{of} OR DELETE OR "
                f"TRUNCATE ON \"{table}\" FOR EACH STATEMENT EXECUTE FUNCTION {SCOPE_FUNCTION}('{scope}')"
            )


def asyncpg_dsn(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


class ChangeFeed:
    def __init__(self, database_url: str, *, max_backoff: float = 5.0) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self.version = 0  # moves with every notification and every (re)connection
        self.epoch = 0  # moves with every (re)connection: what was missed while down is unknown
        self.scopes: dict[str, int] = dict.fromkeys(SCOPES, 0)  # notifications per read cache scope
        self.live = False
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._max_backoff = max_backoff

    async def start(self) -> None:
        """Listen now (raising if the database is unreachable); later losses reconnect in the background. A
        closed feed starts again (an app's lifespan closes its core; the next start reopens it)."""
        self._closed = False
        await self._connect()

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        try:
            await conn.add_listener(CHANNEL, self._notified)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._lost)
        self._conn = conn
        self.version += 1
        self.epoch += 1
        self.live = True

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.version += 1
        if payload in self.scopes:
            self.scopes[payload] += 1

    def _lost(self, _conn: Any) -> None:
        self.live = False
        self.version += 1
        self.epoch += 1
        self._conn = None
        self.retry()

    def retry(self) -> None:
        """Keep trying to listen, in the background, until it works or the feed is closed."""
        if not self._closed and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        delay = 0.05
        while not self._closed and not self.live:
            await asyncio.sleep(delay)
            try:
                await self._connect()
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("change feed: reconnect failed (%s); the read cache stays off", exc)
                delay = min(delay * 2, self._max_backoff)

    async def close(self) -> None:
        self._closed = True
        self.live = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                await conn.close()
