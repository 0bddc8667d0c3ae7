"""Rate limits: per client address on the public and sign-in budgets, 429 with Retry-After, and one
shared budget across processes when Redis holds it. Limits are database-independent: SQLite only."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import pytest

from http_api.routes import all_routes
from tests.conftest import BASE_URL
from tests.factories import World, assert_problem, open_world, placeholder_path, route_id, uid

REGISTER = "/api/v2/agents/register"
REDIS_URL = os.environ.get("CALLBOARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
LIMITED = [pytest.param(r, i, id=route_id(r)) for i, r in enumerate(r for r in all_routes() if r.rate_limit)]


def agent_body() -> dict[str, Any]:
    return {"name": f"Limited {uid(6)}", "endpointUrl": "https://agent.example.com/hook"}


def client_at(world: World, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=world.app, client=(address, 4321)), base_url=BASE_URL
    )


@pytest.fixture
async def limited(sqlite_url: str, tmp_root: Any) -> Any:
    async with open_world(
        sqlite_url,
        tmp_root,
        rate_limit_public="3/minute",
        rate_limit_signin="3/minute",
        rate_limit_public_read="3/minute",
        rate_limit_bug_report="3/minute",
    ) as w:
        yield w


def assert_rate_limited(response: httpx.Response) -> None:
    assert_problem(response, 429, "rate_limited")
    retry_after = response.headers.get("retry-after", "")
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 60, retry_after
    assert response.json().get("retryAfter", int(retry_after)) == int(retry_after)


async def test_fourth_registration_from_one_address_is_429(limited: World) -> None:
    async with client_at(limited, "10.1.0.1") as client:
        for _ in range(3):
            assert (await client.post(REGISTER, json=agent_body())).status_code == 201
        assert_rate_limited(await client.post(REGISTER, json=agent_body()))
        # The deprecated aliases spend the same budget.
        assert_rate_limited(await client.post("/api/v2/requester-agents/register", json=agent_body()))
    async with client_at(limited, "10.1.0.2") as other:
        assert (await other.post(REGISTER, json=agent_body())).status_code == 201


async def test_refused_requests_spend_the_budget_too(limited: World) -> None:
    """The limit is checked before anything else, so malformed floods are limited as well."""
    async with client_at(limited, "10.1.1.1") as client:
        for _ in range(3):
            assert_problem(
                await client.post(REGISTER, content=b"{", headers={"Content-Type": "application/json"}), 400
            )
        assert_rate_limited(await client.post(REGISTER, json=agent_body()))


async def test_unlimited_routes_are_not_limited(limited: World) -> None:
    async with client_at(limited, "10.1.2.1") as client:
        for _ in range(3):
            await client.post(REGISTER, json=agent_body())
        for _ in range(10):  # probes and the API's own description are outside the budgets
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/openapi.json")).status_code == 200


@pytest.mark.parametrize(("route", "index"), LIMITED)
async def test_every_rate_limited_route_answers_429_past_its_budget(
    limited: World, route: Any, index: int
) -> None:
    """Generic over the table: the fourth request within a minute from one address is refused, whatever
    its content (a fresh address per route, so budgets shared between routes do not interfere)."""
    address = f"10.2.{index // 250}.{index % 250 + 1}"
    async with client_at(limited, address) as client:
        for _ in range(3):
            response = await client.request(route.method, placeholder_path(route))
            assert response.status_code != 429, response.text
        assert_rate_limited(await client.request(route.method, placeholder_path(route)))


async def test_public_reads_have_a_budget_of_their_own(limited: World) -> None:
    """The directory search and the previews of claim and setup links are metered per address (a scraper
    or a code-guessing loop is refused), apart from the public writes' budget."""
    async with client_at(limited, "10.1.3.1") as client:
        for _ in range(3):
            assert (await client.get("/api/v2/directory/agents", params={"q": "x"})).status_code == 200
        assert_rate_limited(await client.get("/api/v2/setup-links/guess"))
        assert_rate_limited(await client.get("/api/v2/claim/guess"))
        assert (await client.post(REGISTER, json=agent_body())).status_code == 201  # another budget


async def test_disabled_rate_limits(sqlite_url: str, tmp_root: Any) -> None:
    async with open_world(sqlite_url, tmp_root, rate_limit_public="1/minute", rate_limit_enabled=False) as w:
        client = client_at(w, "10.3.0.1")
        async with client:
            for _ in range(3):
                assert (await client.post(REGISTER, json=agent_body())).status_code == 201


# --- Redis: one budget for every process ---------------------------------------------------------


def _redis_reachable() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


async def _prefixed_keys(prefix: str) -> list[Any]:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        return [k async for k in client.scan_iter(match=f"{prefix}*")]
    finally:
        await client.aclose()


@pytest.mark.skipif(not _redis_reachable(), reason=f"Redis not reachable at {REDIS_URL}")
async def test_two_processes_share_one_budget_in_redis(sqlite_url: str, tmp_root: Any) -> None:
    prefix = f"callboard-test-{uid(12)}"
    settings = dict(redis_url=REDIS_URL, rate_limit_key_prefix=prefix, rate_limit_public="3/minute")
    async with (
        open_world(sqlite_url, tmp_root, **settings) as one,
        open_world(sqlite_url, tmp_root, wipe=False, **settings) as two,
    ):
        try:
            async with client_at(one, "10.4.0.1") as c1, client_at(two, "10.4.0.1") as c2:
                assert (await c1.post(REGISTER, json=agent_body())).status_code == 201
                assert (await c2.post(REGISTER, json=agent_body())).status_code == 201
                assert (await c1.post(REGISTER, json=agent_body())).status_code == 201
                assert_rate_limited(await c2.post(REGISTER, json=agent_body()))
                assert_rate_limited(await c1.post(REGISTER, json=agent_body()))
            async with client_at(two, "10.4.0.2") as elsewhere:
                assert (await elsewhere.post(REGISTER, json=agent_body())).status_code == 201
            assert await _prefixed_keys(prefix), "the budget should live under the configured key prefix"
        finally:
            await one.core.rate_limiter.reset()
    assert await _prefixed_keys(prefix) == []


@pytest.mark.skipif(not _redis_reachable(), reason=f"Redis not reachable at {REDIS_URL}")
async def test_concurrent_requests_cannot_overspend_the_redis_budget(sqlite_url: str, tmp_root: Any) -> None:
    prefix = f"callboard-test-{uid(12)}"
    settings = dict(redis_url=REDIS_URL, rate_limit_key_prefix=prefix, rate_limit_public="3/minute")
    async with (
        open_world(sqlite_url, tmp_root, **settings) as one,
        open_world(sqlite_url, tmp_root, wipe=False, **settings) as two,
    ):
        try:
            clients = [client_at(w, "10.5.0.1") for w in (one, two) * 5]
            responses = await asyncio.gather(*(c.post(REGISTER, json=agent_body()) for c in clients))
            for c in clients:
                await c.aclose()
            statuses = sorted(r.status_code for r in responses)
            assert statuses == [201] * 3 + [429] * 7, statuses
        finally:
            await one.core.rate_limiter.reset()


async def test_unreachable_redis_falls_back_to_a_per_process_budget(sqlite_url: str, tmp_root: Any) -> None:
    """Redis down: rate-limited routes stay up (no 500) and are still limited, per process."""
    dead = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    async with open_world(sqlite_url, tmp_root, redis_url=dead, rate_limit_public="3/minute") as w:
        client = client_at(w, "10.6.0.1")
        async with client:
            for _ in range(3):
                response = await client.post(REGISTER, json=agent_body())
                assert response.status_code == 201, response.text
            assert_rate_limited(await client.post(REGISTER, json=agent_body()))
