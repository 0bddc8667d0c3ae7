"""A read-through cache for hot reads (credential lookups, an agent's own record), validated by SQLite's
own change counter.

`PRAGMA data_version` changes whenever any other connection, in this process or another, commits to the
database file. Every entry is tagged with the counter seen before it was loaded and is served only while
the counter is unchanged, so a commit anywhere (a revoked key, an edited agent) is seen by the very next
request: there is no staleness window. The probe is one in-process sqlite3 call of a few microseconds,
far cheaper than a query through the async driver's thread. PostgreSQL has no such counter; there the
cache is off and reads go to the database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from sqlalchemy.engine import make_url

T = TypeVar("T")
_MISSING = object()


class ReadCache:
    def __init__(self, database_url: str, *, max_entries: int = 50_000) -> None:
        url = make_url(database_url)
        path = url.database if url.get_backend_name() == "sqlite" else None
        self._path = path if path and path != ":memory:" else None
        self._conn: sqlite3.Connection | None = None
        self._cursor: sqlite3.Cursor | None = None
        self._version: int | None = None
        self._entries: dict[Hashable, Any] = {}
        self._max = max_entries

    @property
    def enabled(self) -> bool:
        return self._path is not None

    def _current(self) -> int | None:
        if self._path is None:
            return None
        if self._cursor is None:
            # Autocommit, so every PRAGMA reads the database's latest committed state.
            self._conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            self._cursor = self._conn.cursor()
        return int(self._cursor.execute("PRAGMA data_version").fetchone()[0])

    async def get_or_load(self, key: Hashable, loader: Callable[[], Awaitable[T]]) -> T:
        version = self._current()
        if version is None:
            return await loader()
        if version != self._version:
            self._entries.clear()
            self._version = version
        hit = self._entries.get(key, _MISSING)
        if hit is not _MISSING:
            return hit
        value = await loader()
        # Keep it only if nothing was committed while it loaded.
        if self._current() == version:
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[key] = value
        return value

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = self._cursor = None
