"""The read cache serves hot reads without a query, and never serves anything another connection (or
process) has changed since."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.engine import make_url

from callboard_core.db.readcache import ReadCache
from tests.conftest import key_headers, register_agent


async def test_cache_hits_until_any_connection_commits(tmp_path):
    path = tmp_path / "c.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (v INTEGER)")
    writer.execute("INSERT INTO t VALUES (1)")
    cache = ReadCache(f"sqlite+aiosqlite:///{path}")
    loads = 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        return int(writer.execute("SELECT v FROM t").fetchone()[0])

    assert await cache.get_or_load("k", load) == 1
    assert await cache.get_or_load("k", load) == 1
    assert loads == 1
    writer.execute("UPDATE t SET v = 2")  # another connection commits
    assert await cache.get_or_load("k", load) == 2
    assert loads == 2
    cache.close()
    writer.close()


async def test_cache_is_off_for_postgresql():
    cache = ReadCache("postgresql+asyncpg://u@127.0.0.1/db")
    assert not cache.enabled
    calls = 0

    async def load() -> int:
        nonlocal calls
        calls += 1
        return calls

    assert await cache.get_or_load("k", load) == 1
    assert await cache.get_or_load("k", load) == 2


async def test_key_revoked_by_another_process_is_refused_at_once(client, core):
    if not core.db.is_sqlite:
        pytest.skip("the read cache exists only on SQLite")
    reg = await register_agent(client)
    headers = key_headers(reg["apiKey"])
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200  # served from cache
    # Another process (a second server, an operator's sqlite3 shell) revokes the key.
    other = sqlite3.connect(make_url(core.settings.database_url).database, isolation_level=None)
    other.execute("UPDATE api_keys SET revoked_at = '2020-01-01 00:00:00' WHERE agent_id = ?", (reg["agent"]["id"],))
    other.close()
    refused = await client.get("/api/v2/agents/me", headers=headers)
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_api_key"


async def test_agent_edited_elsewhere_is_seen_at_once(client, core):
    if not core.db.is_sqlite:
        pytest.skip("the read cache exists only on SQLite")
    reg = await register_agent(client)
    headers = key_headers(reg["apiKey"])
    assert (await client.get("/api/v2/agents/me", headers=headers)).json()["name"] == reg["agent"]["name"]
    other = sqlite3.connect(make_url(core.settings.database_url).database, isolation_level=None)
    other.execute("UPDATE agents SET name = 'Edited elsewhere' WHERE id = ?", (reg["agent"]["id"],))
    other.close()
    assert (await client.get("/api/v2/agents/me", headers=headers)).json()["name"] == "Edited elsewhere"
