"""The read cache serves hot reads without a query, and never serves anything another connection (or
process) has changed since."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime

import asyncpg
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from callboard_core.db.changefeed import SCOPE_TRIGGER, TRIGGER, asyncpg_dsn
from callboard_core.db.engine import Database
from callboard_core.db.readcache import ReadCache
from callboard_core.db.scopes import CREDENTIALS, SCOPES, OwnCommits
from callboard_core.models import metadata
from tests.conftest import key_headers, owner_client, register_agent
from tests.factories import uid
from tests.jobs_helpers import new_agent, new_owner


async def test_cache_hits_until_any_connection_commits(tmp_path):
    path = tmp_path / "c.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (v INTEGER)")
    writer.execute("INSERT INTO t VALUES (1)")
    cache = ReadCache(f"sqlite+aiosqlite:///{path}", probe_interval=0)  # probe at every lookup
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


async def test_another_process_commit_is_seen_within_the_probe_interval(tmp_path):
    """The change counter is probed at most once per interval, unless this process has committed since:
    its own commits are seen by the very next lookup, another connection's within the interval."""
    path = tmp_path / "p.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    async with db.session(write=True) as session, session.begin():
        await session.execute(text("CREATE TABLE t (v INTEGER)"))
        await session.execute(text("INSERT INTO t VALUES (1)"))
    foreign = sqlite3.connect(path, isolation_level=None)
    cache = ReadCache(f"sqlite+aiosqlite:///{path}", probe_interval=0.2)
    loads = 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        return int(foreign.execute("SELECT v FROM t").fetchone()[0])

    try:
        assert await cache.get_or_load("k", load) == 1
        async with db.session(write=True) as session, session.begin():  # this process commits
            await session.execute(text("UPDATE t SET v = 2"))
        assert await cache.get_or_load("k", load) == 2  # at once, no waiting
        foreign.execute("UPDATE t SET v = 3")  # another process commits
        started = asyncio.get_running_loop().time()
        while (value := await cache.get_or_load("k", load)) != 3:
            assert value == 2 and asyncio.get_running_loop().time() - started < 0.2
            await asyncio.sleep(0.01)
        assert asyncio.get_running_loop().time() - started < 0.3
        assert loads == 3  # one load per change, hits in between
    finally:
        cache.close()
        foreign.close()
        await db.dispose()


async def test_concurrent_misses_share_one_load(tmp_path):
    """After a commit empties the cache, requests missing the same key together send one load to the
    database, not one each; a load that fails or is cancelled leaves the others to load for themselves."""
    path = tmp_path / "c.db"
    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
    cache = ReadCache(f"sqlite+aiosqlite:///{path}")
    calls: list[str] = []
    gate = asyncio.Event()

    def loader(name: str, outcome: str = "ok"):
        async def load() -> str:
            calls.append(name)
            await gate.wait()
            if outcome == "fail":
                raise LookupError(name)
            return f"value from {name}"

        return load

    tasks = [asyncio.create_task(cache.get_or_load("k", loader(f"r{i}"))) for i in range(16)]
    await asyncio.sleep(0.01)
    gate.set()
    assert await asyncio.gather(*tasks) == ["value from r0"] * 16
    assert calls == ["r0"]

    gate.clear()
    calls.clear()
    failing = asyncio.create_task(cache.get_or_load("f", loader("first", "fail")))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(cache.get_or_load("f", loader("second")))
    await asyncio.sleep(0.01)
    gate.set()
    with pytest.raises(LookupError):
        await failing
    assert await waiting == "value from second" and calls == ["first", "second"]

    gate.clear()
    calls.clear()
    cancelled = asyncio.create_task(cache.get_or_load("c", loader("first")))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(cache.get_or_load("c", loader("second")))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the first load's cancellation is not the waiter's
    gate.set()
    assert await waiting == "value from second" and calls == ["first", "second"]
    cache.close()


async def test_postgresql_cache_is_off_until_it_listens():
    cache = ReadCache("postgresql+asyncpg://u@127.0.0.1/db")  # never started: no change feed
    assert not cache.enabled
    calls = 0

    async def load() -> int:
        nonlocal calls
        calls += 1
        return calls

    assert await cache.get_or_load("k", load) == 1
    assert await cache.get_or_load("k", load) == 2


class _Statements:
    """Counts the statements the app sends to the database."""

    def __init__(self, core):
        self.count = 0
        self.texts: list[str] = []
        self._engines = {core.db.read_engine.sync_engine, core.db.write_engine.sync_engine}
        for engine in self._engines:
            event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn, _cursor, statement, *_args):
        self.count += 1
        self.texts.append(statement)

    def close(self):
        for engine in self._engines:
            event.remove(engine, "before_cursor_execute", self._seen)


async def _write_elsewhere(core, sql: str, *args, scope: str | None = None) -> None:
    """A commit by another process (a second server, an operator's shell): its own connection, not ours.
    On PostgreSQL, return once this process has heard of it (the change feed's notification; with `scope`,
    the scope's own notification too, a separate one that may arrive a moment later)."""
    if core.db.is_sqlite:
        other = sqlite3.connect(make_url(core.settings.database_url).database, isolation_level=None)
        other.execute(sql.replace("$1", "?"), args)
        other.close()
        await asyncio.sleep(core.read_cache.probe_interval * 2)  # the window it may go unseen
        return
    feed = core.read_cache.feed
    before, scope_before = feed.version, feed.scopes.get(scope or "", 0)
    conn = await asyncpg.connect(asyncpg_dsn(core.settings.database_url))
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()
    for _ in range(500):
        if feed.version != before and (scope is None or feed.scopes[scope] != scope_before):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no change notification within 5 s")


async def test_cached_reads_send_no_statement(client, core):
    reg = await register_agent(client)
    headers = key_headers(reg["apiKey"])
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    await asyncio.sleep(0.3)  # the lastUsedAt touch (a commit) and, on PostgreSQL, its notification
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    statements = _Statements(core)
    try:
        assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    finally:
        statements.close()
    assert statements.count == 0


async def test_key_revoked_by_another_process_is_refused(client, core):
    reg = await register_agent(client)
    headers = key_headers(reg["apiKey"])
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200  # served from cache
    await _write_elsewhere(
        core,
        "UPDATE api_keys SET revoked_at = '2020-01-01 00:00:00' WHERE agent_id = $1",
        reg["agent"]["id"],
        scope=CREDENTIALS,
    )
    refused = await client.get("/api/v2/agents/me", headers=headers)
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_api_key"


async def test_agent_edited_elsewhere_is_seen(client, core):
    reg = await register_agent(client)
    headers = key_headers(reg["apiKey"])
    assert (await client.get("/api/v2/agents/me", headers=headers)).json()["name"] == reg["agent"]["name"]
    await _write_elsewhere(
        core, "UPDATE agents SET name = 'Edited elsewhere' WHERE id = $1", reg["agent"]["id"]
    )
    assert (await client.get("/api/v2/agents/me", headers=headers)).json()["name"] == "Edited elsewhere"


async def test_own_commit_is_seen_by_the_next_read_without_waiting(app, client, core):
    agent = await new_agent(await new_owner(app, core))
    headers = key_headers(agent.key)
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200  # cached
    edited = await client.patch("/api/v2/agents/me", headers=headers, json={"name": "Renamed here"})
    assert edited.status_code == 200, edited.text
    assert (await client.get("/api/v2/agents/me", headers=headers)).json()["name"] == "Renamed here"


async def _drop_listeners(core) -> int:
    """Terminate the database's LISTEN connections (as a failover or a restart would); how many."""
    conn = await asyncpg.connect(asyncpg_dsn(core.settings.database_url))
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database() AND query LIKE 'LISTEN%'"
        )
    finally:
        await conn.close()
    return len(rows)


async def _until(condition) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)


async def test_postgresql_cache_goes_off_while_the_feed_is_down(client, core):
    if core.db.is_sqlite:
        pytest.skip("the change feed is PostgreSQL's")
    feed = core.read_cache.feed
    assert core.read_cache.enabled
    await _drop_listeners(core)
    await _until(lambda: not feed.live)
    assert not core.read_cache.enabled  # nothing is served while commits could go unheard
    reg = await register_agent(client)  # requests still work, from the database
    assert (await client.get("/api/v2/agents/me", headers=key_headers(reg["apiKey"]))).status_code == 200
    await _until(lambda: feed.live)
    assert core.read_cache.enabled  # reconnected by itself


async def test_a_core_closed_and_started_again_reconnects_its_feed_after_a_loss(core):
    if core.db.is_sqlite:
        pytest.skip("the change feed is PostgreSQL's")
    await core.close()  # as an app's lifespan ends
    assert not core.read_cache.enabled
    await core.start()  # and the next one begins
    assert core.read_cache.enabled
    feed, before = core.read_cache.feed, core.read_cache.feed.version
    assert await _drop_listeners(core) >= 1
    # The loss and the reconnection each move the version: both happened, whatever the polls saw between.
    await _until(lambda: feed.live and feed.version >= before + 2)
    assert core.read_cache.enabled and feed.version >= before + 2  # a restarted feed reconnects by itself


async def test_every_table_notifies_the_change_feed(core):
    if core.db.is_sqlite:
        pytest.skip("the change feed is PostgreSQL's")
    async with core.db.session(write=False) as session:
        tables = set(
            (
                await session.execute(
                    text(
                        "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname = :name"
                    ),
                    {"name": TRIGGER},
                )
            ).scalars()
        )
    assert {t.name for t in metadata.sorted_tables} <= tables


async def test_a_credential_outlives_commits_that_change_no_credential(app, client, core):
    """A key's cached state depends on its own row only: a commit of this process or of another one that
    changes no credential (an agent edited here and elsewhere) leaves it cached, where it used to send every
    request after any commit back to the database for its key."""
    agent = await new_agent(await new_owner(app, core))
    headers, agent_id = key_headers(agent.key), agent.id
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    await asyncio.sleep(0.3)  # the lastUsedAt touch (a credential's change) and its notification
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    renamed = await client.patch("/api/v2/agents/me", headers=headers, json={"name": "Renamed here"})
    assert renamed.status_code == 200, renamed.text
    await _write_elsewhere(core, "UPDATE agents SET description = 'Edited elsewhere' WHERE id = $1", agent_id)
    statements = _Statements(core)
    try:
        me = await client.get("/api/v2/agents/me", headers=headers)
    finally:
        statements.close()
    assert me.status_code == 200
    assert (me.json()["name"], me.json()["description"]) == ("Renamed here", "Edited elsewhere")
    assert statements.count > 0  # the agent's own record was read again (it changed) ...
    assert not [t for t in statements.texts if "api_keys" in t]  # ... its key was not


async def test_a_credential_changed_by_this_process_is_seen_at_once(app, client, core):
    """A key revoked, or a session ended, by this process is refused by the very next request: on
    PostgreSQL without waiting for the change feed's notification (the write session counts it)."""
    headers = key_headers((await new_agent(await new_owner(app, core))).key)
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    await asyncio.sleep(0.3)
    keys = (await client.get("/api-keys", headers=headers)).json()["keys"]
    before = OwnCommits.by_scope[CREDENTIALS]
    assert (await client.delete(f"/api-keys/{keys[0]['id']}", headers=headers)).status_code == 200
    if not core.db.is_sqlite:
        assert OwnCommits.by_scope[CREDENTIALS] > before  # counted at commit, before any notification
    refused = await client.get("/api/v2/agents/me", headers=headers)
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_api_key"

    owner, _ = await owner_client(app, core)
    async with owner:
        assert (await owner.get("/auth/me")).status_code == 200
        assert (await owner.get("/auth/me")).status_code == 200  # cached
        assert (await owner.post("/auth/logout")).status_code in (200, 204)
        assert (await owner.get("/auth/me")).status_code == 401


async def test_every_scope_table_counts_its_changes(core):
    """The triggers that count a scope's changes cover exactly the tables (and columns) of db/scopes.py:
    SQLite's from migration 0021, PostgreSQL's from changefeed.install_triggers."""
    async with core.db.session(write=False) as session:
        if core.db.is_sqlite:
            rows = (
                await session.execute(
                    text("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'")
                )
            ).all()
            found = {
                (r.tbl_name, r.name.rsplit("_", 1)[1]): r.sql for r in rows if r.name.startswith("cache_")
            }
            for scope, tables in SCOPES.items():
                for table, columns in tables:
                    for kind in ("insert", "update", "delete"):
                        ddl = found.pop((table, kind))
                        assert f"scope = '{scope}'" in ddl
                        if kind == "update" and columns:
                            assert f"UPDATE OF {', '.join(columns)} ON {table}" in ddl
            assert not found  # no trigger for a table the scopes do not name
        else:
            rows = (
                await session.execute(
                    text(
                        "SELECT c.relname, pg_get_triggerdef(t.oid) AS ddl FROM pg_trigger t "
                        "JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname LIKE :name"
                    ),
                    {"name": f"{SCOPE_TRIGGER}_%"},
                )
            ).all()
            found = {r.relname: r.ddl for r in rows}
            for scope, tables in SCOPES.items():
                for table, columns in tables:
                    ddl = found.pop(table)
                    assert f"'{scope}'" in ddl
                    if columns:
                        assert f"UPDATE OF {', '.join(columns)}" in ddl
            assert not found


async def test_a_text_write_or_a_savepoint_never_hides_a_credential_change(core):
    """PostgreSQL's own-commit count: a text statement that writes counts for every scope (its tables are
    unknown); a savepoint rolled back keeps what the transaction wrote before it."""
    if core.db.is_sqlite:
        pytest.skip("SQLite counts a scope's changes by trigger")
    before = OwnCommits.by_scope[CREDENTIALS]
    async with core.db.session(write=True) as session, session.begin():
        await session.execute(text("UPDATE agents SET description = description WHERE false"))
    assert OwnCommits.by_scope[CREDENTIALS] == before + 1
    async with core.db.session(write=True) as session, session.begin():
        await session.execute(text("SELECT 1"))
    assert OwnCommits.by_scope[CREDENTIALS] == before + 1  # a read is no change
    from sqlalchemy import update

    from callboard_core.api_keys.models import ApiKey

    async with core.db.session(write=True) as session, session.begin():
        await session.execute(update(ApiKey).where(ApiKey.id == "none").values(label="x"))
    assert OwnCommits.by_scope[CREDENTIALS] == before + 1  # a column the credential does not hold
    async with core.db.session(write=True) as session, session.begin():
        await session.execute(update(ApiKey).where(ApiKey.id == "none").values(expires_at=None))
        nested = await session.begin_nested()
        await nested.rollback()
    assert OwnCommits.by_scope[CREDENTIALS] == before + 2
    async with core.db.session(write=True) as session:
        await session.begin()
        await session.execute(update(ApiKey).where(ApiKey.id == "none").values(expires_at=None))
        await session.rollback()
        await session.begin()
        await session.execute(text("SELECT 1"))
        await session.commit()
    assert OwnCommits.by_scope[CREDENTIALS] == before + 2  # what was rolled back is not counted


async def test_a_key_used_keeps_its_cached_credential_and_records_its_use_once_a_minute(
    app, client, core, frozen_clock
):
    """A key's use (its lastUsedAt, touched at most once a minute) is no change to its credential: the touch
    leaves the cached state (under many agents, their touches emptied the credentials for everyone), and this
    process does not touch again every request because its cached copy still holds the old use time."""
    agent = await new_agent(await new_owner(app, core))
    headers = key_headers(agent.key)

    async def last_used():
        async with core.db.session(write=False) as session:
            return (
                await session.execute(
                    text("SELECT last_used_at FROM api_keys WHERE agent_id = :a"), {"a": agent.id}
                )
            ).scalar_one()

    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    await core.bus.drain()
    first = await last_used()
    assert first is not None
    await asyncio.sleep(0.2)  # PostgreSQL: the notifications of the setup's commits and the touch arrive
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200  # cached again
    statements = _Statements(core)
    try:
        for _ in range(3):
            assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
            await core.bus.drain()
    finally:
        statements.close()
    # No credential read and no touch (the agent's own record, a whole-cache entry, is read once after the
    # touch's commit).
    assert not [t for t in statements.texts if "api_keys" in t], statements.texts
    frozen_clock.advance(seconds=61)
    assert (await client.get("/api/v2/agents/me", headers=headers)).status_code == 200
    await core.bus.drain()
    assert await last_used() != first  # a minute on, the use is recorded again


async def test_a_write_in_a_data_modifying_cte_counts_for_its_scope(core):
    """PostgreSQL's own-commit count sees the tables of a statement's CTEs (db/rows.py writes several tables'
    rows in one statement): a credential changed there is a change."""
    if core.db.is_sqlite:
        pytest.skip("SQLite counts a scope's changes by trigger; it has no data-modifying CTEs")
    from sqlalchemy import bindparam, insert, update

    from callboard_core.api_keys.models import ApiKey
    from callboard_core.mail.models import OutboxMessage

    def mail(n: int):
        table = OutboxMessage.__table__  # every column named: no default's parameter twice
        return insert(table).values({c.key: bindparam(f"{c.key}{n}") for c in table.c})

    def values(n: int):
        return {
            f"id{n}": f"msg_{uid()}",
            f"kind{n}": "t",
            f"to_address{n}": "a",
            f"subject{n}": "s",
            f"body_text{n}": "b",
            f"status{n}": "SENT",
            f"error{n}": None,
            f"created_at{n}": datetime.now(UTC),
            f"sent_at{n}": None,
        }

    before = OwnCommits.by_scope[CREDENTIALS]
    async with core.db.session(write=True) as session, session.begin():
        await session.execute(mail(0).add_cte(mail(1).cte("w0")), values(0) | values(1))
    assert OwnCommits.by_scope[CREDENTIALS] == before  # mail is no credential
    async with core.db.session(write=True) as session, session.begin():
        touch = update(ApiKey).where(ApiKey.id == "none").values(expires_at=None)
        await session.execute(mail(0).add_cte(touch.cte("w0")), values(0))
    assert OwnCommits.by_scope[CREDENTIALS] == before + 1
