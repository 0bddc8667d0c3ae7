"""Idempotency-Key on unsafe routes: a retry replays the stored outcome and never repeats the effect."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select, update

from callboard_core import clock
from callboard_core.agents.models import Agent
from callboard_core.api_keys.models import ApiKey
from callboard_core.idempotency import service as idempotency
from callboard_core.idempotency.models import IdempotencyRecord
from tests.conftest import BASE_URL, key_headers, new_client, owner_client, register_agent
from tests.factories import assert_problem, uid

REGISTER = "/api/v2/agents/register"


def agent_body(**extra: Any) -> dict[str, Any]:
    return {"name": f"Idem {uid(6)}", "endpointUrl": "https://agent.example.com/hook", **extra}


def idem(key: str, **headers: str) -> dict[str, str]:
    return {"Idempotency-Key": key, **headers}


async def count_agents(core: Any, name: str) -> int:
    async with core.uow(write=False) as uow:
        return int(
            (
                await uow.session.execute(select(func.count()).select_from(Agent).where(Agent.name == name))
            ).scalar_one()
        )


async def test_same_key_same_body_replays_without_repeating_the_effect(client, core):
    body = agent_body()
    first = await client.post(REGISTER, json=body, headers=idem("k-replay-1"))
    second = await client.post(REGISTER, json=body, headers=idem("k-replay-1"))
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    assert second.status_code == 201
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["content-type"] == first.headers["content-type"]
    assert second.content == first.content
    assert second.json()["apiKey"] == first.json()["apiKey"]
    assert await count_agents(core, body["name"]) == 1
    # The replayed key is the live one.
    me = await client.get("/api/v2/agents/me", headers=key_headers(second.json()["apiKey"]))
    assert me.status_code == 200 and me.json()["id"] == first.json()["agent"]["id"]
    # Each answer has its own request id.
    assert second.headers["x-request-id"] != first.headers["x-request-id"]


async def test_without_a_key_every_request_has_its_effect(client, core):
    body = agent_body()
    for _ in range(2):
        assert (await client.post(REGISTER, json=body)).status_code == 201
    assert await count_agents(core, body["name"]) == 2


async def test_same_key_different_body_or_path_is_409(client, core):
    body = agent_body()
    assert (await client.post(REGISTER, json=body, headers=idem("k-reuse"))).status_code == 201
    other = await client.post(REGISTER, json={**body, "description": "changed"}, headers=idem("k-reuse"))
    assert_problem(other, 409, "idempotency_key_reused")
    alias = await client.post("/api/v2/requester-agents/register", json=body, headers=idem("k-reuse"))
    assert_problem(alias, 409, "idempotency_key_reused")
    # Byte-for-byte: the same JSON with other whitespace is another request.
    spaced = await client.post(
        REGISTER,
        content=httpx.Request("POST", "/", json=body).content + b" ",
        headers=idem("k-reuse", **{"Content-Type": "application/json"}),
    )
    assert spaced.status_code in (201, 409)
    assert await count_agents(core, body["name"]) == 1


@pytest.mark.parametrize("copies", [2, 5])
async def test_concurrent_duplicates_have_one_effect(app, core, copies):
    body = agent_body()
    clients = [new_client(app) for _ in range(copies)]
    try:
        responses = await asyncio.gather(
            *(c.post(REGISTER, json=body, headers=idem(f"k-race-{copies}")) for c in clients)
        )
    finally:
        for c in clients:
            await c.aclose()
    fresh = [r for r in responses if r.status_code == 201 and "idempotent-replayed" not in r.headers]
    assert len(fresh) == 1, [(r.status_code, r.text[:200]) for r in responses]
    for r in responses:
        if r is fresh[0]:
            continue
        if r.status_code == 409:
            assert_problem(r, 409, "idempotency_request_in_progress")
        else:
            assert r.status_code == 201 and r.headers["idempotent-replayed"] == "true", r.text
            assert r.json()["apiKey"] == fresh[0].json()["apiKey"]
    assert await count_agents(core, body["name"]) == 1


async def test_a_failed_request_is_not_stored(client, core):
    """A 4xx changed nothing: the same request, once its cause is fixed, runs for real."""
    taken = await register_agent(client, handle=f"taken-{uid(6)}")
    body = agent_body(handle=taken["agent"]["handle"])
    refused = await client.post(REGISTER, json=body, headers=idem("k-fail"))
    assert_problem(refused, 409, "handle_taken")
    again = await client.post(REGISTER, json=body, headers=idem("k-fail"))
    assert_problem(again, 409, "handle_taken")  # not a replay of a stored failure, and not "in progress"
    assert "idempotent-replayed" not in again.headers
    async with core.uow() as uow:  # the cause goes away
        await uow.session.execute(
            update(Agent).where(Agent.id == taken["agent"]["id"]).values(handle=f"moved-{uid(6)}")
        )
    ok = await client.post(REGISTER, json=body, headers=idem("k-fail"))
    assert ok.status_code == 201, ok.text
    assert "idempotent-replayed" not in ok.headers
    replay = await client.post(REGISTER, json=body, headers=idem("k-fail"))
    assert replay.headers.get("idempotent-replayed") == "true" and replay.content == ok.content


async def test_invalid_body_is_not_stored(client, core):
    bad = await client.post(REGISTER, json={"name": "x"}, headers=idem("k-invalid"))
    assert_problem(bad, 422)
    async with core.uow(write=False) as uow:
        assert (
            await uow.session.execute(select(IdempotencyRecord).where(IdempotencyRecord.key == "k-invalid"))
        ).first() is None
    assert (await client.post(REGISTER, json=agent_body(), headers=idem("k-invalid"))).status_code == 201


async def test_keys_expire_after_24_hours(client, core):
    body = agent_body()
    frozen = clock.FrozenClock()
    previous = clock.set_clock(frozen)
    try:
        first = await client.post(REGISTER, json=body, headers=idem("k-expiry"))
        assert first.status_code == 201
        frozen.advance(hours=23, minutes=59)
        within = await client.post(REGISTER, json=body, headers=idem("k-expiry"))
        assert within.headers.get("idempotent-replayed") == "true"
        frozen.advance(minutes=2)
        after = await client.post(REGISTER, json=body, headers=idem("k-expiry"))
        assert after.status_code == 201, after.text
        assert "idempotent-replayed" not in after.headers
        assert after.json()["agent"]["id"] != first.json()["agent"]["id"]
        # Past expiry the key is free for another request too.
        frozen.advance(hours=25)
        other = await client.post(REGISTER, json=agent_body(), headers=idem("k-expiry"))
        assert other.status_code == 201 and "idempotent-replayed" not in other.headers
    finally:
        clock.set_clock(previous)
    assert await count_agents(core, body["name"]) == 2


async def test_keys_are_scoped_per_api_key(client, app, core):
    a = await register_agent(client)
    b = await register_agent(client)
    beat = {"runtimeId": "rt-1", "roleMode": "BOTH"}
    ra = await client.post(
        "/api/v2/agents/me/heartbeat", json=beat, headers=idem("shared", **key_headers(a["apiKey"]))
    )
    rb = await client.post(
        "/api/v2/agents/me/heartbeat", json=beat, headers=idem("shared", **key_headers(b["apiKey"]))
    )
    assert ra.status_code == rb.status_code == 200, (ra.text, rb.text)
    assert "idempotent-replayed" not in rb.headers
    assert ra.json()["heartbeat"]["agentId"] == a["agent"]["id"]
    assert rb.json()["heartbeat"]["agentId"] == b["agent"]["id"]


async def test_keys_are_scoped_per_user_session(app, core):
    first, _ = await owner_client(app, core)
    second, _ = await owner_client(app, core)
    async with first, second:
        r1 = await first.post("/api/v2/owner/agent-enroll-tokens", headers=idem("shared-user"))
        r2 = await second.post("/api/v2/owner/agent-enroll-tokens", headers=idem("shared-user"))
        again = await first.post("/api/v2/owner/agent-enroll-tokens", headers=idem("shared-user"))
    assert r1.status_code == r2.status_code == 201
    assert "idempotent-replayed" not in r2.headers
    assert r1.json()["enrollToken"] != r2.json()["enrollToken"]
    assert again.headers.get("idempotent-replayed") == "true" and again.json() == r1.json()


async def test_keys_are_scoped_per_client_address_on_public_routes(app, core):
    body = agent_body()
    responses = []
    for address in ("10.0.0.1", "10.0.0.2"):
        transport = httpx.ASGITransport(app=app, client=(address, 1234))
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
            responses.append(await c.post(REGISTER, json=body, headers=idem("shared-ip")))
    assert [r.status_code for r in responses] == [201, 201]
    assert all("idempotent-replayed" not in r.headers for r in responses)
    assert await count_agents(core, body["name"]) == 2


@pytest.mark.parametrize(
    ("key", "ok"),
    [("k" * 255, True), ("k" * 256, False), ("", False), ("   ", False), ("uuid-like 0f8e-11ee é", True)],
)
async def test_key_length_and_content(client, key, ok):
    response = await client.post(REGISTER, json=agent_body(), headers={"Idempotency-Key": key.encode()})
    if ok:
        assert response.status_code == 201, response.text
    else:
        body = assert_problem(response, 422)
        assert body["errors"][0]["field"] == "Idempotency-Key"


async def test_key_is_ignored_on_safe_methods(client):
    reg = await register_agent(client)
    for _ in range(2):
        me = await client.get("/api/v2/agents/me", headers=idem("k" * 300, **key_headers(reg["apiKey"])))
        assert me.status_code == 200 and "idempotent-replayed" not in me.headers


async def test_rotate_key_retry_returns_the_same_new_key(client, core):
    """rotate-key revokes the very key that calls it: a retry after a lost response (same Idempotency-Key,
    same old key) must still get the stored answer, not a 401, and must not rotate again."""
    reg = await register_agent(client)
    old = key_headers(reg["apiKey"])
    first = await client.post("/api/v2/agents/me/rotate-key", headers=idem("k-rotate", **old))
    assert first.status_code == 200, first.text
    retry = await client.post("/api/v2/agents/me/rotate-key", headers=idem("k-rotate", **old))
    assert retry.status_code == 200, retry.text
    assert retry.headers.get("idempotent-replayed") == "true"
    assert retry.json()["key"] == first.json()["key"]
    async with core.uow(write=False) as uow:
        live = (
            await uow.session.execute(
                select(func.count())
                .select_from(ApiKey)
                .where(ApiKey.agent_id == reg["agent"]["id"], ApiKey.revoked_at.is_(None))
            )
        ).scalar_one()
    assert live == 1
    # The revoked key opens nothing else: no replay without the Idempotency-Key, nor under another one,
    # nor for another route.
    assert_problem(await client.post("/api/v2/agents/me/rotate-key", headers=old), 401, "invalid_api_key")
    assert_problem(await client.post("/api/v2/agents/me/rotate-key", headers=idem("k-other", **old)), 401)
    assert_problem(await client.get("/api/v2/agents/me", headers=idem("k-rotate", **old)), 401)
    assert_problem(await client.post("/api/v2/agents/me/claim-link", headers=idem("k-rotate", **old)), 401)
    # The new key works.
    me = await client.get("/api/v2/agents/me", headers=key_headers(first.json()["key"]))
    assert me.status_code == 200


async def test_replay_after_the_caller_is_gone_is_refused(client, core):
    """A key revoked for any reason other than its own rotation gets no replay: revocation is final."""
    reg = await register_agent(client)
    headers = idem("k-revoked", **key_headers(reg["apiKey"]))
    beat = {"runtimeId": "rt-1", "roleMode": "BOTH"}
    assert (await client.post("/api/v2/agents/me/heartbeat", json=beat, headers=headers)).status_code == 200
    async with core.uow() as uow:
        await uow.session.execute(
            update(ApiKey)
            .where(ApiKey.agent_id == reg["agent"]["id"])
            .values(revoked_at=clock.now(), revoked_reason="owner")
        )
    assert_problem(await client.post("/api/v2/agents/me/heartbeat", json=beat, headers=headers), 401)


async def test_in_progress_reservation_blocks_then_goes_stale(client, core):
    """A request that died after reserving its key (process killed) blocks its key only until the lock
    lapses; then a retry takes the key over and runs."""
    body = agent_body()
    raw = orjson.dumps(body)
    frozen = clock.FrozenClock()
    previous = clock.set_clock(frozen)
    try:
        async with core.uow() as uow:
            uow.session.add(
                IdempotencyRecord(
                    scope="ip:127.0.0.1",
                    key="k-stale",
                    method="POST",
                    path=REGISTER,
                    request_hash=idempotency.request_fingerprint("POST", REGISTER + "?", raw),
                    locked_until=clock.now() + idempotency.LOCK,
                    expires_at=clock.now() + idempotency.RETENTION,
                )
            )
        send = {"content": raw, "headers": idem("k-stale", **{"Content-Type": "application/json"})}
        assert_problem(await client.post(REGISTER, **send), 409, "idempotency_request_in_progress")
        assert_problem(
            await client.post(REGISTER, json=agent_body(), headers=idem("k-stale")),
            409,
            "idempotency_key_reused",
        )
        frozen.advance(seconds=idempotency.LOCK.total_seconds() + 1)
        taken = await client.post(REGISTER, **send)
        assert taken.status_code == 201, taken.text
        replay = await client.post(REGISTER, **send)
        assert replay.headers.get("idempotent-replayed") == "true" and replay.content == taken.content
    finally:
        clock.set_clock(previous)
    assert await count_agents(core, body["name"]) == 1
