"""Races, on both databases: a claim has exactly one winner, concurrent writes of one agent never fail,
and SQLite writers queue on the lock (BEGIN IMMEDIATE) rather than failing with "database is locked"."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from callboard_core.agents.models import Agent, AgentHeartbeat
from callboard_core.api_keys.models import ApiKey
from tests.conftest import key_headers, owner_client, register_agent
from tests.factories import assert_problem

CLAIM_LOSER_CODES = {409: {"already_claimed"}}


async def _close(clients: list[httpx.AsyncClient]) -> None:
    for c in clients:
        await c.aclose()


async def test_twenty_owners_claim_one_agent_exactly_one_wins(client, app, core):
    reg = await register_agent(client)
    code = reg["claimUrl"].rsplit("/", 1)[1]
    owners = [await owner_client(app, core) for _ in range(20)]
    try:
        responses = await asyncio.gather(*(c.post(f"/api/v2/claim/{code}") for c, _ in owners))
    finally:
        await _close([c for c, _ in owners])
    winners = [(r, uid) for r, (_, uid) in zip(responses, owners, strict=True) if r.status_code == 200]
    assert len(winners) == 1, [(r.status_code, r.text[:120]) for r in responses]
    for r in responses:
        if r.status_code != 200:
            body = assert_problem(r)
            assert body["code"] in CLAIM_LOSER_CODES.get(r.status_code, set()), r.text
    winner_response, winner_id = winners[0]
    assert winner_response.json()["agent"]["ownerId"] == winner_id
    async with core.uow(write=False) as uow:
        agent = await uow.session.get(Agent, reg["agent"]["id"])
        assert agent is not None and agent.owner_id == winner_id and agent.claim_status == "CLAIMED"
        scopes = (
            await uow.session.execute(select(ApiKey.scopes).where(ApiKey.agent_id == agent.id))
        ).scalars()
        assert [sorted(s) for s in scopes] == [["read", "write"]]
    # The agent's key now writes, for the winner's agent.
    patch = await client.patch("/api/v2/agents/me", json={"name": "Won"}, headers=key_headers(reg["apiKey"]))
    assert patch.status_code == 200 and patch.json()["ownerId"] == winner_id


async def test_concurrent_claims_of_many_agents_all_succeed(client, app, core):
    """Independent claims do not contend: each owner claims their own agent at the same time."""
    regs = [await register_agent(client) for _ in range(10)]
    owners = [await owner_client(app, core) for _ in regs]
    try:
        responses = await asyncio.gather(
            *(
                c.post(f"/api/v2/claim/{reg['claimUrl'].rsplit('/', 1)[1]}")
                for (c, _), reg in zip(owners, regs, strict=True)
            )
        )
    finally:
        await _close([c for c, _ in owners])
    assert [r.status_code for r in responses] == [200] * 10, [r.text[:200] for r in responses]


async def _claimed_agent(client: httpx.AsyncClient, app: Any, core: Any) -> dict[str, Any]:
    reg = await register_agent(client)
    owner, _ = await owner_client(app, core)
    async with owner:
        claimed = await owner.post(f"/api/v2/claim/{reg['claimUrl'].rsplit('/', 1)[1]}")
    assert claimed.status_code == 200, claimed.text
    return reg


async def test_concurrent_updates_of_one_agent_never_fail(client, app, core):
    reg = await _claimed_agent(client, app, core)
    headers = key_headers(reg["apiKey"])
    updates = [{"name": f"Name {i}", "description": f"update {i}"} for i in range(10)]
    responses = await asyncio.gather(
        *(client.patch("/api/v2/agents/me", json=u, headers=headers) for u in updates)
    )
    assert [r.status_code for r in responses] == [200] * 10, [r.text[:200] for r in responses]
    me = (await client.get("/api/v2/agents/me", headers=headers)).json()
    assert me["name"] in {u["name"] for u in updates}


async def test_concurrent_heartbeats_of_one_runtime_make_one_row(client, app, core):
    """Ten first beats of one runtime at once: one row, every beat counted, no unique-constraint 500."""
    reg = await register_agent(client)  # heartbeat needs only the read scope
    headers = key_headers(reg["apiKey"])
    beat = {"runtimeId": "rt-race", "roleMode": "WORKER", "status": "ONLINE"}
    responses = await asyncio.gather(
        *(client.post("/api/v2/agents/me/heartbeat", json=beat, headers=headers) for _ in range(10))
    )
    assert [r.status_code for r in responses] == [200] * 10, [r.text[:200] for r in responses]
    async with core.uow(write=False) as uow:
        rows = (
            (
                await uow.session.execute(
                    select(AgentHeartbeat).where(AgentHeartbeat.agent_id == reg["agent"]["id"])
                )
            )
            .scalars()
            .all()
        )
    assert len(rows) == 1
    assert rows[0].beat_count == 10


async def test_concurrent_mixed_writes_on_one_agent_never_fail(client, app, core):
    reg = await _claimed_agent(client, app, core)
    headers = key_headers(reg["apiKey"])
    calls = []
    for i in range(10):
        calls.append(client.patch("/api/v2/agents/me", json={"description": f"d{i}"}, headers=headers))
        calls.append(
            client.post(
                "/api/v2/agents/me/heartbeat",
                json={"runtimeId": f"rt-{i % 3}", "roleMode": "BOTH"},
                headers=headers,
            )
        )
        calls.append(client.get("/api/v2/agents/me", headers=headers))
    responses = await asyncio.gather(*calls)
    assert all(r.status_code == 200 for r in responses), [
        (r.status_code, r.text[:200]) for r in responses if r.status_code != 200
    ]


async def test_concurrent_registrations_with_one_handle_one_wins(client, app, core):
    handle = "race-handle"
    body = {"name": "Racer", "endpointUrl": "https://agent.example.com/hook", "handle": handle}
    responses = await asyncio.gather(*(client.post("/api/v2/agents/register", json=body) for _ in range(10)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] + [409] * 9, [r.text[:200] for r in responses]
    for r in responses:
        if r.status_code == 409:
            assert_problem(r, 409, "handle_taken")
    async with core.uow(write=False) as uow:
        assert (
            await uow.session.execute(select(func.count()).select_from(Agent).where(Agent.handle == handle))
        ).scalar_one() == 1


async def test_sqlite_writers_queue_instead_of_failing(core):
    """Many write transactions at once, each holding the lock a while: all commit, none sees SQLITE_BUSY."""
    if not core.db.is_sqlite:
        pytest.skip("SQLite only: PostgreSQL has row locks")
    async with core.db.session(write=True) as session, session.begin():
        await session.execute(text("CREATE TABLE IF NOT EXISTS concurrency_probe (n INTEGER)"))

    async def writer(n: int) -> None:
        async with core.uow() as uow:
            await uow.session.execute(text("INSERT INTO concurrency_probe (n) VALUES (:n)"), {"n": n})
            await asyncio.sleep(0.01)  # hold the write lock while the others pile up
            current = (await uow.session.execute(text("SELECT COUNT(*) FROM concurrency_probe"))).scalar_one()
            await uow.session.execute(text("INSERT INTO concurrency_probe (n) VALUES (:n)"), {"n": -current})

    try:
        await asyncio.gather(*(writer(n) for n in range(1, 21)))
        async with core.uow(write=False) as uow:
            rows = (await uow.session.execute(text("SELECT n FROM concurrency_probe"))).scalars().all()
        assert len(rows) == 40
        # Serialised: each transaction saw all the earlier ones and none of the later (no lost updates).
        assert sorted(-n for n in rows if n < 0) == list(range(1, 40, 2))
    finally:
        async with core.db.session(write=True) as session, session.begin():
            await session.execute(text("DROP TABLE concurrency_probe"))
