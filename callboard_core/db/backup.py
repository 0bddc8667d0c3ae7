"""`callboard backup` and `callboard restore` for the embedded SQLite database.

A backup uses SQLite's online backup API (`sqlite3.Connection.backup`): it copies a consistent snapshot while
the server keeps serving (readers and the writer go on; pages a write changes mid-copy are copied again),
into a temporary file renamed into place once complete and checked (`PRAGMA integrity_check`), so a backup
file is never half written. A restore checks the backup the same way (a SQLite database made by callboard:
it has the migration table) and copies it over the configured database with the same API; stop the server
and the worker first, and the next start migrates it forward if it is older than the code. PostgreSQL has
its own tools (pg_dump / pg_restore, or continuous archiving): these commands say so rather than guess.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy.engine import make_url


class BackupError(Exception):
    """A backup or restore that cannot be done: the message says why and what to do instead."""


def sqlite_path(database_url: str) -> Path:
    url = make_url(database_url)
    if not url.get_backend_name().startswith("sqlite"):
        raise BackupError(
            "callboard backup and restore handle the embedded SQLite database only; for PostgreSQL use "
            "pg_dump -Fc (and pg_restore), or continuous archiving (see README, Production)."
        )
    if not url.database or url.database == ":memory:":
        raise BackupError("CALLBOARD_DATABASE_URL names no SQLite file to back up.")
    return Path(url.database)


def _check(path: Path) -> str:
    """The migration revision of a sound callboard database at path; BackupError otherwise."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            (result,) = conn.execute("PRAGMA integrity_check").fetchone()
            if result != "ok":
                raise BackupError(f"{path} fails SQLite's integrity check: {result}")
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a callboard SQLite database ({exc}).") from None
    if row is None:
        raise BackupError(f"{path} has no migration revision: it is not a callboard database.")
    return str(row[0])


def _copy(source: Path, target: Path) -> None:
    with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as src, sqlite3.connect(target) as dst:
        src.backup(dst, pages=1024)  # in steps: the server's writer is never held up for long
        # One self-contained file: the copy inherits the live database's WAL mode, whose -wal and -shm
        # files would otherwise be left beside it.
        dst.execute("PRAGMA journal_mode=DELETE")
    # sqlite3's context manager commits but does not close.
    src.close()
    dst.close()


def backup(database_url: str, target: Path, *, overwrite: bool = False) -> str:
    """Copy the live database to `target`; returns the backup's migration revision."""
    source = sqlite_path(database_url)
    if not source.exists():
        raise BackupError(f"the database {source} does not exist (nothing to back up).")
    if target.exists() and not overwrite:
        raise BackupError(f"{target} exists; choose another path or pass --force to replace it.")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    # Readable by its owner only from its first byte: it holds every account, key hash and ledger entry.
    os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    try:
        _copy(source, partial)
        revision = _check(partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return revision


def restore(database_url: str, source: Path) -> str:
    """Replace the configured database's contents with the backup at `source`; returns its revision."""
    target = sqlite_path(database_url)
    if not source.exists():
        raise BackupError(f"the backup {source} does not exist.")
    revision = _check(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    _copy(source, target)
    return revision
