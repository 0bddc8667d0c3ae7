"""SQLite's WAL checkpoints, off the writers' path.

A WAL database appends each commit's pages to the `-wal` file; a checkpoint copies them back into the database
file. By default the connection whose commit takes the WAL past 1,000 pages does it, inside that commit: here
that is the event loop's thread (sqlite_driver runs a writer's statements inline), so every ~40 awards (an
estimate from the pages an award writes) one request stopped the loop for the copy and the database file's fsync, and every request waiting behind it with
it. The server (`Database.start_checkpointer`, from the app's lifespan) instead runs a PASSIVE checkpoint on a
thread of its own every CHECKPOINT_INTERVAL_S: it never waits for a lock, never blocks a writer or a reader,
and copies a page the writers changed many times in the interval once.

The writers keep a checkpoint of their own, at WRITER_AUTOCHECKPOINT_PAGES: a PASSIVE checkpoint that runs
while writers append cannot always finish, and only a checkpoint that did lets the next writer start the WAL
over from its beginning. At that size the writer finds nearly every page copied already (the thread did it),
so its part is small; and a process without the thread (`callboard worker` alone, a script) still bounds the
WAL, at 4,000 pages (16 MB) instead of 1,000.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger("callboard.db")

CHECKPOINT_INTERVAL_S = 0.25
WRITER_AUTOCHECKPOINT_PAGES = 4000


class Checkpointer:
    """PASSIVE checkpoints of one SQLite database file, every `interval_s`, on a daemon thread."""

    def __init__(self, path: str, interval_s: float = CHECKPOINT_INTERVAL_S) -> None:
        self.path, self.interval_s = path, interval_s
        self.runs = 0  # checkpoints run to their end (not refused as busy)
        self.last: tuple[int, int] | None = None  # the last one's (frames in the WAL, frames copied)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
        # The thread's runs and a caller's `run_once` take turns on the connection.
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoint", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the thread (after one last checkpoint) and close its connection."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout_s)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def run_once(self) -> tuple[int, int] | None:
        """One PASSIVE checkpoint: (frames in the WAL, frames copied so far in it), or None when another
        checkpoint was running (SQLITE_BUSY: that one does the work)."""
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                self._conn.execute("PRAGMA busy_timeout=0")  # never wait: the next run comes soon
                self._conn.execute("PRAGMA synchronous=NORMAL")  # as the writers: the copy syncs the file
            busy, frames, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy:
            return None
        self.runs, self.last = self.runs + 1, (frames, copied)
        return self.last

    def _run(self) -> None:
        failed = False
        while True:
            stopping = self._stop.wait(self.interval_s)
            try:
                self.run_once()
                failed = False
            except sqlite3.Error as exc:  # the writers' own checkpoint still bounds the WAL: say it once
                if not failed:
                    log.warning("sqlite checkpoint failed (%s): the writers' checkpoint takes over", exc)
                failed = True
            if stopping:
                return
