"""`callboard backup` / `restore` for the SQLite default: an online backup taken while a writer keeps
writing is a consistent, migrated database; restoring it gives a database the service runs on; PostgreSQL
and bad paths get one clear line and exit status 2."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from callboard_core.container import Core
from callboard_core.db import backup
from callboard_core.db.migrate import alembic_config
from callboard_core.seed import migrate_and_seed
from callboard_core.users import service as users
from callboard_core.users.models import User
from http_api.cli import main
from tests.conftest import make_settings


def _head() -> str:
    from alembic.script import ScriptDirectory

    return str(
        ScriptDirectory.from_config(alembic_config("sqlite+aiosqlite:///unused.db")).get_current_head()
    )


def _beside(path: Path) -> tuple[list[str], int]:
    """The files named like path (a -wal, -shm or .partial left behind would show), and path's mode."""
    return sorted(p.name for p in path.parent.glob(path.name + "*")), path.stat().st_mode & 0o777


async def _count_users(url: str, tmp_path: Path) -> int:
    core = Core.build(make_settings(url, tmp_path))
    try:
        async with core.uow(write=False) as uow:
            return int(await uow.session.scalar(select(func.count()).select_from(User)) or 0)
    finally:
        await core.close()


async def test_a_backup_taken_while_writing_restores_to_a_working_database(tmp_path: Path) -> None:
    live = f"sqlite+aiosqlite:///{tmp_path / 'live.db'}"
    settings = make_settings(live, tmp_path)
    await migrate_and_seed(settings)
    core = Core.build(settings)
    stop = asyncio.Event()

    async def writer() -> int:
        written = 0
        while not stop.is_set():
            async with core.uow() as uow:
                await users.create(uow.session, email=f"writer{written}@example.com")
            written += 1
            await asyncio.sleep(0)
        return written

    task = asyncio.create_task(writer())
    try:
        await asyncio.sleep(0.3)
        revision = await asyncio.to_thread(backup.backup, live, tmp_path / "copy.db")
        await asyncio.sleep(0.1)
    finally:
        stop.set()
        written = await task
        await core.close()
    assert revision == _head()
    assert _beside(tmp_path / "copy.db") == (["copy.db"], 0o600)  # one file, its owner's only
    with sqlite3.connect(tmp_path / "copy.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    copied = await _count_users(f"sqlite+aiosqlite:///{tmp_path / 'copy.db'}", tmp_path)
    assert 0 < copied < written  # a snapshot taken mid-stream: some of the rows, each whole

    restored = f"sqlite+aiosqlite:///{tmp_path / 'restored.db'}"
    assert backup.restore(restored, tmp_path / "copy.db") == revision
    assert await _count_users(restored, tmp_path) == copied
    await migrate_and_seed(make_settings(restored, tmp_path))  # the service starts on it


def test_the_commands_say_what_is_wrong_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("CALLBOARD_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'live.db'}")
    asyncio.run(migrate_and_seed(make_settings(f"sqlite+aiosqlite:///{tmp_path / 'live.db'}", tmp_path)))
    main(["backup", str(tmp_path / "b.db")])
    assert "backed up to" in capsys.readouterr().out

    def refused(*argv: str) -> str:
        with pytest.raises(SystemExit) as stopped:
            main(list(argv))
        assert stopped.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err
        return err

    assert "--force" in refused("backup", str(tmp_path / "b.db"))  # never overwrites by surprise
    main(["backup", "--force", str(tmp_path / "b.db")])
    (tmp_path / "junk.db").write_bytes(b"not a database")
    assert "not a callboard SQLite database" in refused("restore", str(tmp_path / "junk.db"))
    assert "does not exist" in refused("restore", str(tmp_path / "missing.db"))
    main(["restore", str(tmp_path / "b.db")])
    assert "restored" in capsys.readouterr().out
    # A database file alone, as an earlier release's backup wrote it, restores too.
    backup.backup(f"sqlite+aiosqlite:///{tmp_path / 'live.db'}", tmp_path / "plain.db")
    main(["restore", str(tmp_path / "plain.db")])
    assert "restored" in capsys.readouterr().out
    monkeypatch.setenv("CALLBOARD_DATABASE_URL", "postgresql+asyncpg://root@127.0.0.1:5432/test")
    assert "pg_dump" in refused("backup", str(tmp_path / "pg.db"))


async def _add_user(settings: Any, email: str) -> None:
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            await users.create(uow.session, email=email)
    finally:
        await core.close()


def test_a_backup_carries_the_files_and_the_development_key_to_a_fresh_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Machine A (its own var dir, its generated secret key, a stored file) is backed up with the command;
    machine B, fresh, restores it: the database, the file's bytes and the key come back, so a download link
    signed on A still verifies on B."""
    from callboard_core.blobs.local import LocalBlobStore
    from callboard_core.config import load_settings

    machine_a, machine_b = tmp_path / "a", tmp_path / "b"
    monkeypatch.delenv("CALLBOARD_SECRET_KEY", raising=False)
    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(machine_a))
    monkeypatch.setenv("CALLBOARD_DATABASE_URL", f"sqlite+aiosqlite:///{machine_a / 'callboard.db'}")
    settings_a = load_settings()
    asyncio.run(migrate_and_seed(settings_a))
    asyncio.run(_add_user(settings_a, "owner@example.com"))
    store_a = LocalBlobStore.from_settings(settings_a)
    asyncio.run(store_a.put_bytes("jobs/job_1/inputs/brief.txt", b"the brief", "text/plain"))
    link = store_a.presign_get("jobs/job_1/inputs/brief.txt", filename="brief.txt", content_type="text/plain")
    main(["backup", str(tmp_path / "callboard.backup")])
    said = capsys.readouterr().out
    assert "1 files" in said and "the development secret key" in said, said
    assert _beside(tmp_path / "callboard.backup") == (["callboard.backup"], 0o600)

    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(machine_b))
    monkeypatch.setenv("CALLBOARD_DATABASE_URL", f"sqlite+aiosqlite:///{machine_b / 'callboard.db'}")
    main(["restore", str(tmp_path / "callboard.backup")])
    assert "1 files" in capsys.readouterr().out
    settings_b = load_settings()
    assert settings_b.secret_key == settings_a.secret_key
    assert ((machine_b / "secret_key").stat().st_mode & 0o777) == 0o600
    store_b = LocalBlobStore.from_settings(settings_b)
    grant = store_b.verify_token(link.url.rsplit("/", 1)[1], "get")
    assert asyncio.run(store_b.sha256(grant.key)) == hashlib.sha256(b"the brief").hexdigest()
    assert asyncio.run(_count_users(settings_b.database_url, tmp_path)) == 1  # the database A had
    asyncio.run(migrate_and_seed(settings_b))  # and the service starts on it


def test_a_key_set_by_the_operator_is_not_archived_and_a_differing_one_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("CALLBOARD_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'a' / 'callboard.db'}")
    monkeypatch.delenv("CALLBOARD_SECRET_KEY", raising=False)
    from callboard_core.config import load_settings

    asyncio.run(migrate_and_seed(load_settings()))
    main(["backup", str(tmp_path / "dev.backup")])  # the generated key goes in
    monkeypatch.setenv("CALLBOARD_SECRET_KEY", "k" * 48)
    main(["backup", str(tmp_path / "ops.backup")])
    assert "no secret key" in capsys.readouterr().out.splitlines()[-1]
    main(["restore", str(tmp_path / "dev.backup")])  # into a machine whose operator set another key
    captured = capsys.readouterr()
    assert "another secret key than CALLBOARD_SECRET_KEY" in captured.err
