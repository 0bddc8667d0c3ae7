"""Test tiers share these fixtures.

Every database test runs on SQLite (a fresh file) and, when PostgreSQL is reachable, on PostgreSQL (a
fresh database made for this run and dropped after it). The schema is made by the Alembic migrations,
as in production. Rows written by a test are removed after it; the seeded taxonomy stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import text

from callboard_core import clock, metrics
from callboard_core.auth import sessions
from callboard_core.bus import HandlerTable
from callboard_core.config import Environment, Settings
from callboard_core.container import Core, open_database
from callboard_core.db.engine import Database
from callboard_core.db.readcache import ReadCache
from callboard_core.ledger import service as ledger
from callboard_core.models import metadata
from callboard_core.security.permissions import Role
from callboard_core.seed import apply_seed, migrate_and_seed
from callboard_core.users import service as users
from http_api import request_log
from http_api.app import create_app
from tests.netutil import free_port

# httpx's ASGITransport asks for sniffio on every request (is_running_trio); it is not installed, so each
# request searched sys.path for it and failed (~0.2 ms, in every test request). Known absent: fail at once.
sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

BASE_URL = "http://testserver"
ORIGIN = {"Origin": BASE_URL}
PG_ADMIN_URL = os.environ.get("CALLBOARD_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("CALLBOARD_TEST_REQUIRE_POSTGRES") == "1"
SEEDED_TABLES = {"capability_categories", "capability_tags", "job_types", "alembic_version"}


def _pg_reachable() -> bool:
    import asyncpg

    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(PG_ADMIN_URL, timeout=3)
        except (TimeoutError, OSError, asyncpg.PostgresError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


PG_AVAILABLE = _pg_reachable()
if REQUIRE_PG and not PG_AVAILABLE:
    raise RuntimeError(f"CALLBOARD_TEST_REQUIRE_POSTGRES=1 but PostgreSQL is not reachable at {PG_ADMIN_URL}")


def _backends() -> list[Any]:
    params: list[Any] = ["sqlite"]
    params.append(
        pytest.param(
            "postgres", marks=pytest.mark.skipif(not PG_AVAILABLE, reason="PostgreSQL not reachable")
        )
    )
    return params


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that spawn processes (marked `slow`: seconds to minutes each) go first, so they start at once
    and the run ends on tests of milliseconds (the order within each group is kept). See
    `pytest_xdist_make_scheduler` for how they are spread over the workers."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's load scheduling, except that its first hand is dealt one test at a time in turn.

    The stock scheduler gives each worker a run of consecutive tests first (an eighth of the suite each on two
    workers): every long test, collected first, would land on the first worker, which would still be running
    them long after the other ran out of work. Dealt in turn, each worker starts with half of them; the rest
    of the run is scheduled as xdist does."""
    from xdist.scheduler import LoadScheduling

    class DealtFirstHand(LoadScheduling):
        _dealing = False
        _hand: dict[Any, list[int]] | None = None

        def schedule(self) -> None:
            collected = next(iter(self.node2collection.values()), [])
            self._dealing = self.collection is None and len(collected) >= 2 * len(self.nodes)
            try:
                super().schedule()
            finally:
                self._dealing = False

        def _send_tests(self, node: Any, num: int) -> None:
            if not self._dealing:
                super()._send_tests(node, num)
                return
            if self._hand is None:  # the stock first hand: num tests for each node, dealt instead of cut
                count = len(self.nodes)
                batch = self.pending[: num * count]
                del self.pending[: num * count]
                self._hand = {each: batch[i::count] for i, each in enumerate(self.nodes)}
            dealt = self._hand.pop(node, [])
            if dealt:
                self.node2pending[node].extend(dealt)
                node.send_runtest_some(dealt)

    return DealtFirstHand(config, log)


@pytest.fixture(scope="session", autouse=True)
def _quiet_request_log() -> Iterator[None]:
    """The in-process apps' request lines go nowhere (the writer thread would print them past pytest's
    capture); tests/test_request_log.py reads them from a stream of its own."""
    with open(os.devnull, "w") as sink:
        request_log.WRITER.stream = sink
        yield
        request_log.WRITER.flush()
        request_log.WRITER.stream = None


def write_retries() -> float:
    """Write actions run again so far in this process (`pipeline.run_write`: a deadlock or a serialization
    failure the database undid)."""
    sample = metrics.REGISTRY.get_sample_value
    return sum(
        sample("callboard_write_retries_total", {"reason": r}) or 0.0 for r in ("deadlock", "serialization")
    )


@pytest.fixture(autouse=True)
def _no_write_run_again(request: pytest.FixtureRequest) -> Iterator[None]:
    """A write the database undid to break a deadlock runs again unseen by its client (`pipeline.run_write`),
    where it used to answer 503: a test fails when any of its writes needed that, unless it is marked
    `write_retries`, so a lock-order regression still fails the race tests (tests/test_jobs_races.py)."""
    before = write_retries()
    yield
    if request.node.get_closest_marker("write_retries") is None:
        assert write_retries() == before, (
            "a write was undone by a deadlock or serialization failure and run again"
        )


@pytest.fixture(scope="session")
def tmp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("callboard")


@pytest.fixture(scope="session")
def sqlite_url(tmp_root: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_root / 'test.db'}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    import asyncpg

    name = f"callboard_test_{uuid.uuid4().hex[:12]}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(PG_ADMIN_URL)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    yield f"{base}/{name}"
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


_migrated: set[str] = set()


def make_settings(database_url: str, tmp_root: Path, **overrides: Any) -> Settings:
    """A test's settings, with a secret key of its own."""
    if overrides:
        return Settings(**{**_test_values(database_url, tmp_root), **overrides})
    # Reading the environment and validating ~60 fields costs milliseconds a test; a copy of the settings made
    # once for this database costs microseconds.
    return _settings_for(database_url, tmp_root).model_copy(
        update={"secret_key": secrets.token_urlsafe(32)}, deep=True
    )


def _test_values(database_url: str, tmp_root: Path) -> dict[str, Any]:
    return dict(
        env=Environment.TEST,
        database_url=database_url,
        base_url=BASE_URL,
        secret_key=secrets.token_urlsafe(32),
        var_dir=tmp_root,
        rate_limit_public="10000/minute",
        rate_limit_signin="10000/minute",
        rate_limit_public_read="100000/minute",
        rate_limit_bug_report="10000/minute",
    )


@functools.lru_cache(maxsize=16)
def _settings_for(database_url: str, tmp_root: Path) -> Settings:
    return Settings(**_test_values(database_url, tmp_root))


@pytest.fixture(params=_backends())
def database_url(request: pytest.FixtureRequest, tmp_root: Path) -> str:
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))


@dataclass
class _Shared:
    db: Database
    read_cache: ReadCache


@pytest.fixture(scope="session")
async def _shared_per_database() -> AsyncIterator[dict[str, _Shared]]:
    """One Database (its engines and their pooled connections) and one read cache (on PostgreSQL, its change
    feed's listening connection) per database URL for all of a worker's `core` tests, as a server keeps them
    for all its requests. Built per test, they opened new connections for each: on PostgreSQL new backends
    (~7 ms each) whose catalog caches start cold, ~50 ms a test in all. The cache is emptied before each
    test. A test that needs other pool settings builds a core of its own (make_settings with overrides)."""
    shared: dict[str, _Shared] = {}
    yield shared
    for each in shared.values():  # PostgreSQL's test database may be gone already (dropped WITH FORCE)
        with contextlib.suppress(Exception):
            await each.read_cache.aclose()
        with contextlib.suppress(Exception):
            await each.db.dispose()


@pytest.fixture
async def core(
    _shared_per_database: dict[str, _Shared], database_url: str, tmp_root: Path
) -> AsyncIterator[Core]:
    settings = make_settings(database_url, tmp_root)
    if database_url not in _migrated:
        await migrate_and_seed(settings)
        _migrated.add(database_url)
        mark_seeded(database_url)
    shared = _shared_per_database.get(database_url)
    if shared is None:
        shared = _shared_per_database[database_url] = _Shared(
            open_database(settings), ReadCache(database_url)
        )
    shared.read_cache.clear()
    core = Core.build(settings, db=shared.db, read_cache=shared.read_cache)
    # On PostgreSQL the read cache listens for commits, as in the server (again, if a test stopped its feed).
    await core.start()
    try:
        yield core
    finally:
        await core.bus.drain()  # after-commit email deliveries and key touches must not race the wipe
        await core.mailer.drain()
        await _wipe(core)


@functools.cache
def _wiped_tables() -> tuple[list[str], str]:
    """The tables a test may fill (children first) and one query naming those that hold a row."""
    tables = [t.name for t in reversed(metadata.sorted_tables) if t.name not in SEEDED_TABLES]
    probe = " UNION ALL ".join(f"SELECT '{n}' WHERE EXISTS (SELECT 1 FROM \"{n}\")" for n in tables)
    return tables, probe


def _delete_filled(conn: sqlite3.Connection, tables: list[str], probe: str) -> None:
    filled = {name for (name,) in conn.execute(probe)}
    for name in tables:
        if name in filled:
            conn.execute(f'DELETE FROM "{name}"')


async def _wipe(core: Core) -> None:
    """Empties the tables a test filled. A test fills a handful of the 54: asking which (one query, ~0.05 ms)
    and deleting from those is cheaper than a DELETE on every table (~4 ms on SQLite even when empty)."""
    tables, probe = _wiped_tables()
    async with core.db.session(write=True) as session, session.begin():
        raw = (await (await session.connection()).get_raw_connection()).driver_connection
        assert raw is not None
        if core.db.is_sqlite:
            # On the driver's connection in one trip to its thread, past SQLAlchemy's per-statement work.
            await raw._execute(_delete_filled, raw._conn, tables, probe)
        else:
            # DELETE with triggers (the ledger's immutability, foreign keys, the change feed) off for this
            # transaction: about 2 ms where a TRUNCATE of every table took 150 to 450 ms per test.
            filled = {name for (name,) in await raw.fetch(probe)}
            await session.execute(text("SET LOCAL session_replication_role = replica"))
            deletes = [f'DELETE FROM "{n}"' for n in tables if n in filled]
            if deletes:
                await raw.execute("; ".join(deletes))
        # Tags added by a test (staff-created, approved requests) go too; the seeded ones stay.
        t = {"t": _seeded_at.get(core.settings.database_url, _IMPORTED_AT)}
        await session.execute(text("DELETE FROM job_types WHERE created_at > :t"), t)
        await session.execute(text("DELETE FROM capability_tags WHERE created_at > :t"), t)
        await session.execute(
            text(
                "DELETE FROM capability_categories WHERE created_at > :t "
                "AND id NOT IN (SELECT category_id FROM capability_tags)"
            ),
            t,
        )
        # A seeded row a test changed (the contract test's server edits and archives tags, moves a seeded tag
        # into a category of its own) would outlive the test and change what later tests see: the seeded
        # tables are then written again as `callboard migrate` writes them.
        changed = await session.scalar(
            text(
                "SELECT EXISTS (SELECT 1 FROM capability_categories WHERE updated_at > :t) "
                "OR EXISTS (SELECT 1 FROM capability_tags WHERE updated_at > :t) "
                "OR EXISTS (SELECT 1 FROM job_types WHERE updated_at > :t)"
            ),
            t,
        )
        if changed:
            for name in ("job_types", "capability_tags", "capability_categories"):
                await session.execute(text(f'DELETE FROM "{name}"'))
            await apply_seed(session)
    if changed:
        mark_seeded(core.settings.database_url)


_IMPORTED_AT = clock.now().replace(tzinfo=None)
# When each database's seeded rows were written (a worker has a SQLite file and a PostgreSQL database): rows of
# the seeded tables newer than this are a test's.
_seeded_at: dict[str, datetime] = {}


def mark_seeded(database_url: str) -> None:
    _seeded_at[database_url] = clock.now().replace(tzinfo=None)


@pytest.fixture
def app(core: Core) -> Any:
    return create_app(core=core)


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as c:
        yield c


@contextlib.contextmanager
def listening(core: Core, extra: HandlerTable) -> Iterator[None]:
    """The core's bus with `extra` handlers (after the table's own) while the block runs: how a test hears
    an event, or makes a handler fail, through the real app."""
    before = core.bus
    core.bus = before.extended(extra)
    try:
        yield
    finally:
        core.bus = before


def new_client(app: Any) -> httpx.AsyncClient:
    """Another browser or agent: its own cookie jar."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


async def make_user(
    core: Core,
    *,
    email: str | None = None,
    role: str = Role.USER,
    password: str | None = None,
    verified: bool = True,
) -> tuple[str, str]:
    """A user and a live session token for it: (user_id, session token). Verified by default (as the
    operator's `callboard users create` makes them); `verified=False` for an account nobody vouched for."""
    async with core.uow() as uow:
        return await user_in(uow.session, email=email, role=role, password=password, verified=verified)


async def user_in(
    session: Any,
    *,
    email: str | None = None,
    role: str = Role.USER,
    password: str | None = None,
    verified: bool = True,
) -> tuple[str, str]:
    """`make_user` inside the caller's unit of work."""
    email = email or f"u{uuid.uuid4().hex[:10]}@example.com"
    if password:
        user = await users.create_with_password(
            session, email=email, password=password, role=role, verified=verified
        )
    else:
        user = await users.create(session, email=email, role=role, verified=verified)
    token, _ = await sessions.start(session, user, ttl=timedelta(hours=1))
    return user.id, token


async def owner_client(app: Any, core: Core, *, role: str = Role.USER) -> tuple[httpx.AsyncClient, str]:
    """A signed-in browser: a client carrying a session cookie and a trusted Origin. Returns (client, user_id)."""
    user_id, token = await make_user(core, role=role)
    c = new_client(app)
    c.cookies.set(sessions.COOKIE_NAME, token)
    c.headers.update(ORIGIN)
    return c, user_id


async def register_agent(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    body = {
        "name": "Agent " + uuid.uuid4().hex[:6],
        "endpointUrl": "https://agent.example.com/hook",
        "capabilities": ["python"],
    }
    body.update(overrides)
    response = await client.post("/api/v2/agents/register", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def key_headers(key: str) -> dict[str, str]:
    return {"X-API-Key": key}


@pytest.fixture
async def books_balance(core: Core) -> AsyncIterator[None]:
    """The money tests' check after each test: the ledger verifies clean. A money test module opts in with
    `pytestmark = pytest.mark.usefixtures("books_balance")`."""
    yield
    async with core.uow(write=False) as uow:
        assert await ledger.verify(uow.session) == []


@pytest.fixture
def frozen_clock() -> Iterator[clock.FrozenClock]:
    """Time stands still until the test moves it (deadlines without sleeping)."""
    frozen = clock.FrozenClock()
    previous = clock.set_clock(frozen)
    try:
        yield frozen
    finally:
        clock.set_clock(previous)


# --- a real SMTP server (aiosmtpd) for the mail tests --------------------------------------------


class Collector:
    def __init__(self) -> None:
        self.envelopes: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server() -> Iterator[tuple[Collector, int]]:
    collector = Collector()
    port = free_port()
    controller = Controller(collector, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield collector, port
    finally:
        controller.stop()
