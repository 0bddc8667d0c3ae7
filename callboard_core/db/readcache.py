"""A read-through cache for hot reads (credential lookups, an agent's own record), validated by SQLite's
own change counter.

`PRAGMA data_version` changes whenever any other connection, in this process or another, commits to the
database file. Every entry is tagged with the counter seen before it was loaded and is served only while
the counter is unchanged. The probe is one in-process sqlite3 call of a few microseconds, yet under a read
load it was an eighth of a cached request's CPU, so it is taken at most once per `probe_interval` (1 ms)
unless this process has committed since the last probe (the driver counts its commits once they have
landed): this process's commits are seen by the very next lookup, another process's (`callboard worker`,
a second server, an operator's shell) within a millisecond, the window PostgreSQL's notifications have
too (docs/decisions.md, "The cost of every request, fourth part").

PostgreSQL has no such counter; there the version is the change feed's count of commit notifications
(db/changefeed.py) plus this process's own completed commits. This process's commits are seen at once;
another process's when its notification arrives, normally well under a millisecond after the commit (the
window is documented in docs/decisions.md). While the feed is not listening the cache serves nothing.

An entry of a scope (`db/scopes.py`: a credential's state) depends on a few tables only and is kept across
the commits that touch none of them: its version is the scope's own count of changes (SQLite's
`cache_generations`, kept by triggers; PostgreSQL's notifications named after the scope plus this process's
own commits that touched it), looked at whenever the database's version moves.

A request may `pin()` the cache: the counter is then probed at the request's first lookup and not again
for its later lookups, unless this process has committed something since (SQLAlchemy's commit event, so
a request still reads its own commits). A commit that finished before the request started is still seen;
one that lands while the request runs is concurrent with it, as it would be without the cache.

Concurrent misses of one key at one version share a single load (the first caller's); the others wait for
it and fall back to their own load only if it fails. Without that, one commit (which empties the cache)
under load sends every in-flight request to the database at once, each holding a pooled connection.

`derived()` keeps one more thing per cached value (its JSON rendering), dropped with the entries. Cached
values are shared by every request that reads them, so they are never modified.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Hashable
from contextvars import ContextVar, Token
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

from callboard_core.db.changefeed import ChangeFeed
from callboard_core.db.scopes import CREDENTIALS, SCOPES, OwnCommits
from callboard_core.db.sqlite_driver import Connection as SqliteConnection

__all__ = ["CREDENTIALS", "MISSING", "Pin", "ReadCache"]

T = TypeVar("T")
MISSING: Any = object()


class _Commits:
    """Commits made through SQLAlchemy in this process; a pinned lookup re-probes when it has moved."""

    count = 0  # commits about to be made (SQLite re-probes its counter, which moves only once they land)
    completed = 0  # commits made by sessions (PostgreSQL's own-commit part of the version)


@event.listens_for(Engine, "commit")
def _count_commit(_conn: Any) -> None:
    _Commits.count += 1


@event.listens_for(Session, "after_commit")
def _count_completed(session: Session) -> None:
    if not session.info.get("readonly"):
        _Commits.completed += 1


class Pin:
    """The current request's claim on the last probe (see ReadCache.pin)."""

    __slots__ = ("active", "cache", "commits", "token")

    def __init__(self, cache: ReadCache) -> None:
        self.cache = cache
        self.active = True
        self.commits = -1  # the commit count at this request's probe; -1: not probed yet
        self.token: Token[Pin | None] | None = None

    def release(self) -> None:
        # Tasks spawned during the request copied the context, and with it this pin: they must probe again.
        self.active = False
        if self.token is not None:
            _pin.reset(self.token)
            self.token = None


_pin: ContextVar[Pin | None] = ContextVar("callboard_readcache_pin", default=None)


class ReadCache:
    def __init__(
        self, database_url: str, *, max_entries: int = 50_000, probe_interval: float = 0.001
    ) -> None:
        url = make_url(database_url)
        path = url.database if url.get_backend_name() == "sqlite" else None
        self._path = path if path and path != ":memory:" else None
        self._feed = ChangeFeed(database_url) if url.get_backend_name() == "postgresql" else None
        self._conn: sqlite3.Connection | None = None
        self._cursor: sqlite3.Cursor | None = None
        self._version: Hashable = None
        self._entries: dict[Hashable, Any] = {}
        self._values: dict[int, Any] = {}  # id(value) -> value, for the values in _entries
        self._derived: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(value), kind) -> (value, made)
        self._flights: dict[Hashable, tuple[Hashable, asyncio.Future[Any]]] = {}  # key -> (version, its load)
        # A scope's entries and the version they hold under (db/scopes.py): they outlive other commits.
        self._scoped: dict[str, dict[Hashable, Any]] = {scope: {} for scope in SCOPES}
        self._scope_versions: dict[str, Hashable] = {}
        self._max = max_entries
        self.probe_interval = probe_interval  # SQLite: see the module's docstring; 0 probes every lookup
        self._probed: tuple[float, int, int] = (-1e9, -1, -1)  # (monotonic time, commits, commits landed)
        self._touches: dict[Hashable, datetime] = {}  # what this process touched, and until when it is fresh

    @property
    def enabled(self) -> bool:
        return self._path is not None or (self._feed is not None and self._feed.live)

    @property
    def feed(self) -> ChangeFeed | None:
        """PostgreSQL's change feed (None on SQLite)."""
        return self._feed

    async def start(self) -> None:
        """Start listening for PostgreSQL's commit notifications (nothing to do on SQLite). If the database
        cannot be reached now, the cache stays off and the feed keeps retrying in the background."""
        if self._feed is None or self._feed.live:
            return
        try:
            await self._feed.start()
        except (OSError, asyncpg.PostgresError):
            self._feed.retry()

    def _current(self) -> Hashable:
        if self._feed is not None:
            return (self._feed.version, _Commits.completed)
        if self._cursor is None:
            # Autocommit, so every PRAGMA reads the database's latest committed state.
            self._conn = sqlite3.connect(self._path or "", isolation_level=None, check_same_thread=False)
            self._cursor = self._conn.cursor()
        return int(self._cursor.execute("PRAGMA data_version").fetchone()[0])

    def _sync(self) -> None:
        if self._path is not None:
            now, commits, landed = time.monotonic(), _Commits.count, SqliteConnection.commits_landed
            at, commits_then, landed_then = self._probed
            if now - at < self.probe_interval and commits == commits_then and landed == landed_then:
                return
            self._probed = (now, commits, landed)
        version = self._current()
        if version != self._version:
            self._forget()
            self._version = version
            # A scope's version moves only with the database's (a scope's change is a change): look at them
            # only then.
            for scope, current in self._scopes_current().items():
                if self._scope_versions.get(scope) != current:
                    self._scoped[scope].clear()
                    self._scope_versions[scope] = current

    def _scopes_current(self) -> dict[str, Hashable]:
        feed = self._feed
        if feed is not None:
            return {s: (feed.epoch, n, OwnCommits.by_scope[s]) for s, n in feed.scopes.items()}
        assert self._cursor is not None  # _current() has opened it
        try:
            rows = dict(self._cursor.execute("SELECT scope, generation FROM cache_generations").fetchall())
        except sqlite3.OperationalError:  # not a callboard database (tools, tests): scopes follow the whole
            rows = {}
        return {scope: rows.get(scope, ("all", self._version)) for scope in SCOPES}

    def clear(self) -> None:
        """Forget every entry (as when another process commits): for tools and tests that need it cold."""
        self._probed = (-1e9, -1, -1)
        self._forget()
        self._touches.clear()
        for entries in self._scoped.values():
            entries.clear()

    def _forget(self) -> None:
        self._entries.clear()
        self._values.clear()
        self._derived.clear()

    def pin(self) -> Pin | None:
        """Until the pin is released, this context's lookups share one probe (taken at the first lookup).
        Only SQLite's probe costs anything; PostgreSQL's version is two integers in memory."""
        if self._path is None:
            return None
        pin = Pin(self)
        pin.token = _pin.set(pin)
        return pin

    def get(self, key: Hashable, scope: str | None = None) -> Any:
        """The cached value, or MISSING (always MISSING when the cache is off). An entry of a `scope`
        (db/scopes.py) outlives the commits that touch none of the scope's tables."""
        entries = self._entries if scope is None else self._scoped[scope]
        if self._path is None:
            if not self.enabled:
                return MISSING
            self._sync()
            return entries.get(key, MISSING)
        pin = _pin.get()
        if pin is None or pin.cache is not self or not pin.active:
            self._sync()
        elif pin.commits != _Commits.count:
            pin.commits = _Commits.count
            self._sync()
        return entries.get(key, MISSING)

    async def get_or_load(
        self, key: Hashable, loader: Callable[[], Awaitable[T]], scope: str | None = None
    ) -> T:
        hit = self.get(key, scope)
        if hit is not MISSING:
            return hit
        return await self.load(key, loader, scope)

    async def load(self, key: Hashable, loader: Callable[[], Awaitable[T]], scope: str | None = None) -> T:
        """Load what get() has just missed; keep it only if nothing it depends on was committed since the
        version the entries are tagged with was read (any commit; for a scope's entry, one of the scope's)."""
        if not self.enabled:
            return await loader()
        version = self._version if scope is None else self._scope_versions.get(scope)
        flight = self._flights.get(key)
        if flight is not None and flight[0] == version:
            shared = await asyncio.shield(flight[1])  # shielded: our cancellation must not cancel theirs
            return shared if shared is not MISSING else await loader()
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._flights[key] = (version, done)
        try:
            value = await loader()
        except BaseException:
            done.set_result(MISSING)  # the waiters load for themselves
            raise
        finally:
            if self._flights.get(key, (None, None))[1] is done:
                del self._flights[key]
        done.set_result(value)
        if scope is None:
            if self._current() == version:
                if len(self._entries) >= self._max:
                    self._forget()
                self._entries[key] = value
                self._values[id(value)] = value
            return value
        self._probed = (-1e9, -1, -1)  # a fresh look, not the last millisecond's
        self._sync()
        if version is not None and self._scope_versions.get(scope) == version:
            entries = self._scoped[scope]
            if len(entries) >= self._max:
                entries.clear()
            entries[key] = value
        return value

    def touch_due(self, key: Hashable, now: datetime) -> bool:
        """Whether this process has not touched `key` (noted with `note_touch`) or its touch has aged. A
        cached entry keeps the use time it was loaded with (its use is no change to it: db/scopes.py), so
        without this every request of a cached key would find a touch due."""
        until = self._touches.get(key)
        return until is None or now >= until

    def note_touch(self, key: Hashable, until: datetime) -> None:
        if len(self._touches) >= self._max:
            self._touches.clear()  # at worst, one more touch per key
        self._touches[key] = until

    def derived(self, value: Any, kind: str, make: Callable[[Any], T]) -> T:
        """make(value), computed once while value is a cached entry (and each time for any other value)."""
        key = (id(value), kind)
        hit = self._derived.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        result = make(value)
        if self._values.get(id(value)) is value:
            self._derived[key] = (value, result)
        return result

    async def aclose(self) -> None:
        if self._feed is not None:
            await self._feed.close()
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = self._cursor = None
