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
import shutil
import sqlite3
import tarfile
import tempfile
from dataclasses import dataclass
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


def _private_partial(target: Path, overwrite: bool) -> Path:
    """`target.partial`, created empty and readable by its owner only from its first byte (a backup holds
    every account, key hash and ledger entry); renamed onto `target` once complete."""
    if target.exists() and not overwrite:
        raise BackupError(f"{target} exists; choose another path or pass --force to replace it.")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    return partial


def backup(database_url: str, target: Path, *, overwrite: bool = False) -> str:
    """Copy the live database to `target`; returns the backup's migration revision."""
    source = sqlite_path(database_url)
    if not source.exists():
        raise BackupError(f"the database {source} does not exist (nothing to back up).")
    partial = _private_partial(target, overwrite)
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


# --- The whole of a SQLite installation: the database, its local files and its development secret --------

ARCHIVE_DB = "callboard.db"
ARCHIVE_BLOBS = "blobs"
ARCHIVE_SECRET = "secret_key"


@dataclass(frozen=True)
class Archived:
    revision: str
    files: int | None  # local files archived; None when files live in S3 (its versioning keeps them)
    secret: bool  # the development secret key (var/secret_key) is in the archive


@dataclass(frozen=True)
class Restored:
    revision: str
    files: int | None  # files restored; None when the backup held none (a database-only backup)
    secret: str  # "restored", "absent" (not in the backup) or "differs" (CALLBOARD_SECRET_KEY is another)


def backup_all(
    database_url: str,
    target: Path,
    *,
    var_dir: Path,
    local_files: bool,
    secret_key: str,
    overwrite: bool = False,
) -> Archived:
    """One tar archive (0600) holding the database snapshot, then the local files and the development secret
    key: a restore on another machine needs all three (files are signed with the key, and so are the stored
    idempotent responses). Files written after the snapshot may be in it too, harmless (nothing names them)."""
    partial = _private_partial(target, overwrite)
    try:
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            revision = backup(database_url, Path(tmp) / ARCHIVE_DB)
            with tarfile.open(partial, "w") as tar:
                tar.add(Path(tmp) / ARCHIVE_DB, arcname=ARCHIVE_DB)
                files: int | None = None
                if local_files:
                    root = var_dir / ARCHIVE_BLOBS
                    files = sum(1 for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0
                    if root.is_dir():
                        tar.add(root, arcname=ARCHIVE_BLOBS)
                secret_file = var_dir / ARCHIVE_SECRET
                # Only the generated development key; a configured CALLBOARD_SECRET_KEY is the operator's to keep.
                secret = secret_file.is_file() and secret_file.read_text().strip() == secret_key
                if secret:
                    tar.add(secret_file, arcname=ARCHIVE_SECRET)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return Archived(revision, files, secret)


def restore_all(database_url: str, source: Path, *, var_dir: Path, secret_key: str) -> Restored:
    """Restore a backup: an archive of `backup_all` (the database, its files, its development key) or a
    database file alone (as earlier releases wrote). The files are added to var/blobs; the key replaces
    var/secret_key unless CALLBOARD_SECRET_KEY (`secret_key` not the file's) is another, which is reported."""
    if not source.exists():
        raise BackupError(f"the backup {source} does not exist.")
    if not tarfile.is_tarfile(source):
        return Restored(restore(database_url, source), None, "absent")
    with tarfile.open(source) as tar, tempfile.TemporaryDirectory() as tmp:
        if ARCHIVE_DB not in tar.getnames():
            raise BackupError(f"{source} is an archive without {ARCHIVE_DB}: not a callboard backup.")
        tar.extractall(tmp, filter="data")  # no absolute paths, links out or devices
        revision = restore(database_url, Path(tmp) / ARCHIVE_DB)
        files = None
        if (Path(tmp) / ARCHIVE_BLOBS).is_dir():
            shutil.copytree(Path(tmp) / ARCHIVE_BLOBS, var_dir / ARCHIVE_BLOBS, dirs_exist_ok=True)
            files = sum(1 for p in (Path(tmp) / ARCHIVE_BLOBS).rglob("*") if p.is_file())
        archived = Path(tmp) / ARCHIVE_SECRET
        if not archived.is_file():
            return Restored(revision, files, "absent")
        key = archived.read_text().strip()
        secret_file = var_dir / ARCHIVE_SECRET
        # The file is the key in use unless CALLBOARD_SECRET_KEY names another (then the file is not read).
        file_in_use = secret_file.is_file() and secret_file.read_text().strip() == secret_key
        if key != secret_key and not file_in_use:
            return Restored(revision, files, "differs")
        fresh = _private_partial(secret_file, overwrite=True)
        fresh.write_text(key)
        os.replace(fresh, secret_file)
        return Restored(revision, files, "restored")
