"""`/healthz` (the process is up) and `/readyz` (the database answers at the expected schema and the blob store
takes a write), with the status codes a load balancer acts on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from alembic import command

from callboard_core.container import Core
from callboard_core.db.migrate import alembic_config, head_revision
from http_api.app import create_app
from tests.conftest import BASE_URL, make_settings
from tests.netutil import free_port


async def ready(core: Core) -> httpx.Response:
    app = create_app(core=core)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as c:
        return await c.get("/readyz")


async def test_a_migrated_database_and_a_writable_store_are_ready(client: Any) -> None:
    assert (await client.get("/healthz")).status_code == 200
    r = await client.get("/readyz")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ready"] is True and body["database"] == "ok" and body["blobs"] == "ok"
    assert body["schemaRevision"] == body["expectedRevision"] == head_revision()


async def test_a_schema_behind_the_code_is_not_ready(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    await asyncio.to_thread(command.upgrade, alembic_config(url), "0010")
    core = Core.build(make_settings(url, tmp_path))
    try:
        r = await ready(core)
    finally:
        await core.close()
    assert r.status_code == 503
    body = r.json()
    assert body["ready"] is False and body["schemaRevision"] == "0010"
    assert "expected " + head_revision() in body["database"] and "callboard migrate" in body["database"]


async def test_an_unreachable_database_is_not_ready(tmp_path: Path) -> None:
    url = f"postgresql+asyncpg://nobody@127.0.0.1:{free_port()}/none"
    core = Core.build(make_settings(url, tmp_path))
    try:
        r = await ready(core)
    finally:
        await core.close()
    assert r.status_code == 503
    assert r.json()["database"].startswith("unreachable") and r.json()["schemaRevision"] is None


async def test_a_blob_store_that_cannot_write_is_not_ready(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'head.db'}"
    await asyncio.to_thread(command.upgrade, alembic_config(url), "head")
    (tmp_path / "blobs").write_text("a file where the blob directory should be")
    core = Core.build(make_settings(url, tmp_path))
    try:
        r = await ready(core)
    finally:
        await core.close()
    assert r.status_code == 503
    body = r.json()
    assert body["database"] == "ok" and body["blobs"].startswith("not writable")
