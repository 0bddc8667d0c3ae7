"""The public directory, Service Offerings and the reputation that ranks them, on both databases: who is
listed, the deterministic order (presence, reputation, wins, completions, agentId) and its pages, what a
profile shows and never shows, offerings for the agent and its owner, decay, and find_workers over MCP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from callboard_core import clock
from callboard_core.agents import presence, reputation
from callboard_core.agents.models import Agent, AgentCapability
from callboard_core.capabilities.models import CapabilityTag
from tests.jobs_helpers import AgentHandle, job_body, new_agent, new_owner
from tests.mcp_helpers import call, http_client, serving

pytestmark = pytest.mark.db

ENTRY_KEYS = {
    "handle",
    "name",
    "description",
    "capabilities",
    "presence",
    "reputation",
    "wins",
    "completions",
}
PROFILE_KEYS = {
    "handle",
    "name",
    "description",
    "capabilities",
    "offerings",
    "availability",
    "stats",
    "memberSince",
}


async def _directory(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    r = await client.get("/api/v2/directory/agents", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _handles(client: httpx.AsyncClient, **params: Any) -> list[str]:
    return [a["handle"] for a in (await _directory(client, pageSize=100, **params))["agents"]]


async def _record(core: Any, agent: AgentHandle, **values: Any) -> str:
    """Set an agent's track record and presence directly (the stored, forward-decayed figures); its handle."""
    async with core.uow() as uow:
        link_values = {k: v for k, v in values.items() if k in ("presence_rank",)}
        await uow.session.execute(update(Agent).where(Agent.id == agent.id).values(**values))
        if link_values:
            await uow.session.execute(
                update(AgentCapability).where(AgentCapability.agent_id == agent.id).values(**link_values)
            )
        row = await uow.session.get(Agent, agent.id)
        assert row is not None
        return row.handle


async def _beat(client: httpx.AsyncClient, agent: AgentHandle, status: str, runtime: str = "r1") -> None:
    r = await client.post(
        "/api/v2/agents/me/heartbeat",
        json={"runtimeId": runtime, "roleMode": "WORKER", "status": status},
        headers=agent.h,
    )
    assert r.status_code == 200, r.text


async def test_order_is_presence_then_reputation_wins_completions_and_id(
    app: Any, core: Any, client: httpx.AsyncClient
) -> None:
    owner = await new_owner(app, core)
    agents = [await new_agent(owner) for _ in range(6)]
    now = clock.now()
    at = {"presence_seen_at": now}
    # a: ONLINE, no record; b: DEGRADED, best record; c, d: OFFLINE, same reputation, c more wins;
    # e, f: OFFLINE, same reputation and wins, e more completions... then ties on everything go by agentId.
    a = await _record(core, agents[0], presence_rank=3, **at)
    b = await _record(core, agents[1], presence_rank=2, reputation_score=reputation.stored(50), **at)
    nine, two = (
        reputation.stored(9),
        reputation.stored(2),
    )  # equal figures: computed once (they move with time)
    c = await _record(core, agents[2], reputation_score=nine, win_count=3, total_tasks=3)
    d = await _record(core, agents[3], reputation_score=nine, win_count=1, total_tasks=9)
    e = await _record(core, agents[4], reputation_score=two, win_count=0, total_tasks=2)
    f = await _record(core, agents[5], reputation_score=two, win_count=0, total_tasks=1)
    mine = {a, b, c, d, e, f}
    order = [h for h in await _handles(client) if h in mine]
    assert order == [a, b, c, d, e, f]

    # Equal on every figure: agentId decides.
    same = [await new_agent(owner) for _ in range(3)]
    one = reputation.stored(1)
    handles = {await _record(core, s, reputation_score=one, total_tasks=1): s.id for s in same}
    tied = [h for h in await _handles(client) if h in handles]
    assert [handles[h] for h in tied] == sorted(handles.values())

    page = await _directory(client, pageSize=2)
    assert set(page["agents"][0]) == ENTRY_KEYS and page["hasMore"] is True
    first = page["agents"][0]
    assert first["handle"] == a and first["presence"] == "ONLINE"
    assert (await _directory(client, pageSize=100))["agents"][1]["reputation"] == pytest.approx(50, rel=1e-3)


async def test_pages_are_stable_and_cover_the_list_once(
    app: Any, core: Any, client: httpx.AsyncClient
) -> None:
    owner = await new_owner(app, core)
    scores = [reputation.stored(i) for i in range(3)]
    for i in range(7):  # ties on reputation: pages must still cut the one order
        agent = await new_agent(owner)
        await _record(core, agent, reputation_score=scores[i % 3], total_tasks=i % 2)
    everyone = await _handles(client)
    pages: list[str] = []
    for number in range(1, 10):
        page = await _directory(client, page=number, pageSize=3)
        pages += [x["handle"] for x in page["agents"]]
        if not page["hasMore"]:
            break
    assert pages == everyone and len(set(pages)) == len(pages)
    assert (await _directory(client, page=number + 1, pageSize=3))["agents"] == []
    bad = await client.get("/api/v2/directory/agents", params={"pageSize": 101})
    assert bad.status_code == 422 and bad.json()["code"] == "validation_failed"


async def test_only_claimed_active_workers_are_listed(app: Any, core: Any, client: httpx.AsyncClient) -> None:
    owner = await new_owner(app, core)
    worker = await new_agent(owner)
    requester_only = await new_agent(owner)
    switched_off = await new_agent(owner)
    archived = await new_agent(owner)
    r = await client.patch("/api/v2/agents/me", json={"intent": "REQUESTER"}, headers=requester_only.h)
    assert r.status_code == 200, r.text
    r = await client.patch("/api/v2/agents/me", json={"workerEnabled": False}, headers=switched_off.h)
    assert r.status_code == 200, r.text
    assert (await owner.client.post(f"/agents/dashboard/{archived.id}/archive")).status_code == 200
    provisional = (
        await client.post(
            "/api/v2/agents/register",
            json={"name": "Unclaimed", "endpointUrl": "https://x.example.com", "capabilities": ["python"]},
        )
    ).json()
    listed = set(await _handles(client))
    handles = {a.id: await _record(core, a) for a in (worker, requester_only, switched_off, archived)}
    assert handles[worker.id] in listed
    assert not {handles[requester_only.id], handles[switched_off.id], handles[archived.id]} & listed
    assert provisional["agent"]["handle"] not in listed and "callboard-starter" not in listed
    for hidden in (handles[requester_only.id], provisional["agent"]["handle"], "no-such-agent"):
        r = await client.get(f"/api/v2/directory/agents/{hidden}")
        assert r.status_code == 404 and r.json()["code"] == "agent_not_found"


async def test_a_capability_ranks_by_the_reputation_under_it(
    app: Any, core: Any, client: httpx.AsyncClient
) -> None:
    owner = await new_owner(app, core)
    generalist = await new_agent(owner, capabilities=["python", "rust"])
    specialist = await new_agent(owner, capabilities=["rust"])
    pythonista = await new_agent(owner, capabilities=["python"])
    async with core.uow() as uow:
        rows = (await uow.session.execute(select(CapabilityTag.slug, CapabilityTag.id))).all()
        tags = {slug: tag_id for slug, tag_id in rows}
        await uow.session.execute(update(Agent).where(Agent.id == generalist.id).values(reputation_score=100))
        for agent, slug, score, wins in ((generalist, "rust", 1.0, 0), (specialist, "rust", 8.0, 2)):
            await uow.session.execute(
                update(AgentCapability)
                .where(AgentCapability.agent_id == agent.id, AgentCapability.tag_id == tags[slug])
                .values(reputation=reputation.stored(score), win_count=wins, completed_count=wins)
            )
    handles = {await _record(core, a): a for a in (generalist, specialist, pythonista)}
    rust = [h for h in await _handles(client, capability="rust") if h in handles]
    assert [handles[h].id for h in rust] == [specialist.id, generalist.id]  # pythonista lacks the tag
    entry = next(
        x
        for x in (await _directory(client, capability="rust"))["agents"]
        if handles[x["handle"]] is specialist
    )
    assert entry["reputation"] == pytest.approx(8, rel=1e-3) and entry["wins"] == 2
    overall = [h for h in await _handles(client) if h in handles]
    assert handles[overall[0]] is generalist
    unknown = await client.get("/api/v2/directory/agents", params={"capability": "no-such-tag"})
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["code"] == "unknown_capability"
    name = next(h for h in handles if handles[h] is specialist)
    assert await _handles(client, q=name.upper()) == [name]  # q matches handle, name or description


async def test_presence_comes_from_fresh_heartbeats(
    app: Any, core: Any, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    owner = await new_owner(app, core)
    steady, flaky = await new_agent(owner), await new_agent(owner)
    handles = {await _record(core, a): a for a in (steady, flaky)}
    await _beat(client, flaky, "DEGRADED")
    await _beat(client, steady, "DEGRADED", runtime="old")
    await _beat(client, steady, "ONLINE", runtime="new")

    def shown(page: dict[str, Any]) -> dict[str, str]:
        return {handles[x["handle"]].id: x["presence"] for x in page["agents"] if x["handle"] in handles}

    page = await _directory(client, pageSize=100)
    assert shown(page) == {steady.id: "ONLINE", flaky.id: "DEGRADED"}
    assert [h for h in await _handles(client) if h in handles] == [
        h for h in handles if handles[h] is steady
    ] + [h for h in handles if handles[h] is flaky]

    # Past the freshness window the presence reads OFFLINE at once, and the sweep lowers the stored rank.
    frozen_clock.advance(seconds=presence.PRESENCE_WINDOW.total_seconds() + 1)
    assert set(shown(await _directory(client, pageSize=100)).values()) == {"OFFLINE"}
    async with core.uow() as uow:
        assert await presence.sweep(uow.session) >= 2
    async with core.uow() as uow:
        ranks = {a.id: (await uow.session.get(Agent, a.id)).presence_rank for a in (steady, flaky)}  # type: ignore[union-attr]
    assert ranks == {steady.id: 0, flaky.id: 0}
    profile = (await client.get(f"/api/v2/directory/agents/{next(iter(handles))}")).json()
    assert profile["availability"] == {"presence": "OFFLINE", "lastSeen": "TODAY"}


async def test_reputation_decays_by_half_every_half_life(core: Any, app: Any, frozen_clock: Any) -> None:
    worker = await new_agent(await new_owner(app, core))
    async with core.uow() as uow:
        agent = await uow.session.get(Agent, worker.id)
        assert agent is not None
        await reputation.record_completions(uow.session, [agent.id], winner=agent.id)  # 1 + 3
        await reputation.record_expiry(uow.session, worker.id, None)  # -1
        stored = agent.reputation_score
    assert reputation.current(stored) == pytest.approx(3.0)
    frozen_clock.advance(days=reputation.HALF_LIFE.days)
    assert reputation.current(stored) == pytest.approx(1.5)
    async with core.uow() as uow:
        agent = await uow.session.get(Agent, worker.id)
        assert agent is not None
        await reputation.record_completions(uow.session, [agent.id], winner=None)  # a fresh +1 weighs in full
        assert reputation.current(agent.reputation_score) == pytest.approx(2.5)


async def test_a_profile_shows_public_facts_only(app: Any, core: Any, client: httpx.AsyncClient) -> None:
    owner = await new_owner(app, core)
    worker = await new_agent(owner, metadata={"secret": "s3cr3t-metadata"})
    r = await client.post(
        "/api/v2/agents/me/offerings",
        json={"title": "Code review", "priceCents": 2500, "capabilitySlug": "python", "deliveryHours": 24},
        headers=worker.h,
    )
    assert r.status_code == 201, r.text
    kept = r.json()
    gone = (await client.post("/api/v2/agents/me/offerings", json={"title": "Old"}, headers=worker.h)).json()
    assert gone["priceCents"] is None  # price on request
    assert (
        await client.post(f"/api/v2/agents/me/offerings/{gone['id']}/archive", headers=worker.h)
    ).status_code == 200
    async with core.uow() as uow:
        agent = await uow.session.get(Agent, worker.id)
        assert agent is not None
        await reputation.record_completions(uow.session, [agent.id], winner=agent.id)
        handle = agent.handle
    r = await client.get(f"/api/v2/directory/agents/{handle}")
    assert r.status_code == 200, r.text
    profile = r.json()
    assert set(profile) == PROFILE_KEYS
    assert [o["title"] for o in profile["offerings"]] == ["Code review"]
    assert set(profile["offerings"][0]) == {
        "id",
        "title",
        "description",
        "capabilitySlug",
        "priceCents",
        "currency",
        "deliveryHours",
    }
    assert profile["stats"] == {"completions": 1, "wins": 1, "winRate": 1.0, "reputation": pytest.approx(4.0)}
    assert [c["slug"] for c in profile["capabilities"]] == ["python"]
    text = r.text
    for private in (worker.key, worker.id, owner.user_id, "s3cr3t-metadata", "agent.example.com", "@"):
        assert private not in text, private
    listing = (await client.get("/api/v2/agents/me/offerings", headers=worker.h)).json()["offerings"]
    assert {o["id"]: o["status"] for o in listing} == {kept["id"]: "ACTIVE", gone["id"]: "ARCHIVED"}


async def test_offerings_for_the_agent_and_its_owner(app: Any, core: Any, client: httpx.AsyncClient) -> None:
    owner = await new_owner(app, core)
    other = await new_owner(app, core)
    worker = await new_agent(owner)
    base = f"/api/v2/owner/agents/{worker.id}/offerings"
    made = await owner.client.post(
        base, json={"title": "Data cleaning", "priceCents": 100, "currency": "EUR"}
    )
    assert made.status_code == 201, made.text
    offering = made.json()
    assert offering["currency"] == "eur" and offering["agentId"] == worker.id
    too_cheap = await client.post(
        "/api/v2/agents/me/offerings", json={"title": "x", "priceCents": 99}, headers=worker.h
    )
    assert too_cheap.status_code == 422 and too_cheap.json()["errors"][0]["field"] == "priceCents"
    changed = await client.patch(
        f"/api/v2/agents/me/offerings/{offering['id']}",
        json={"priceCents": None, "title": "Cleaning"},
        headers=worker.h,
    )
    assert (
        changed.status_code == 200
        and changed.json()["priceCents"] is None
        and changed.json()["title"] == "Cleaning"
    )
    cleared = await client.patch(
        f"/api/v2/agents/me/offerings/{offering['id']}", json={"title": None}, headers=worker.h
    )
    assert cleared.status_code == 422
    # Another owner sees neither the agent nor the offering.
    assert (await other.client.get(base)).status_code == 404
    assert (await other.client.post(f"{base}/{offering['id']}/archive")).status_code == 404
    archived = await owner.client.post(f"{base}/{offering['id']}/archive")
    assert archived.status_code == 200 and archived.json()["status"] == "ARCHIVED"
    again = await owner.client.post(f"{base}/{offering['id']}/archive")
    assert again.status_code == 200 and again.json()["archivedAt"] == archived.json()["archivedAt"]
    assert [o["status"] for o in (await owner.client.get(base)).json()["offerings"]] == ["ARCHIVED"]


async def test_find_workers_over_mcp(app: Any, core: Any, client: httpx.AsyncClient) -> None:
    owner = await new_owner(app, core)
    worker = await new_agent(owner, capabilities=["rust"])
    requester = await new_agent(await new_owner(app, core))
    handle = await _record(core, worker, reputation_score=reputation.stored(7), win_count=2, total_tasks=3)
    async with serving(core) as url, http_client(url, requester.key) as mcp:
        found = await call(mcp, "find_workers", capability="rust")
        [entry] = [x for x in found["agents"] if x["handle"] == handle]
        assert set(entry) == ENTRY_KEYS and entry["capabilities"] == ["rust"]
        assert found == await _directory(client, capability="rust")
        made = await call(mcp, "create_offering", offering={"title": "Rust port", "priceCents": 9900})
        assert made["status"] == "ACTIVE"
        assert [o["id"] for o in (await call(mcp, "my_offerings"))["offerings"]] == [made["id"]]


async def test_a_requester_hires_from_an_offering(app: Any, core: Any, client: httpx.AsyncClient) -> None:
    """offeringId on a job: a Direct Hire of the offering's agent, the reward and tag taken from it."""
    worker = await new_agent(await new_owner(app, core), capabilities=["rust"])
    requester = await new_agent(await new_owner(app, core))
    made = await client.post(
        "/api/v2/agents/me/offerings",
        json={"title": "Port to Rust", "priceCents": 4200, "capabilitySlug": "rust"},
        headers=worker.h,
    )
    offering = made.json()
    r = await client.post(
        "/api/v2/jobs", json=job_body(participantCap=1, offeringId=offering["id"]), headers=requester.h
    )
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["directHireWorkerAgentId"] == worker.id and job["offeringId"] == offering["id"]
    assert job["rewardAmountCents"] == 4200 and job["participantCap"] == 1
    free = await client.post(
        "/api/v2/jobs",
        json=job_body(participantCap=1, offeringId=offering["id"], rewardAmountCents=0),
        headers=requester.h,
    )
    assert (
        free.status_code == 201 and free.json()["rewardAmountCents"] == 0
    )  # the requester's own figure wins
    other = await new_agent(await new_owner(app, core))
    clash = await client.post(
        "/api/v2/jobs",
        json=job_body(participantCap=1, offeringId=offering["id"], directHireWorkerAgentId=other.id),
        headers=requester.h,
    )
    assert clash.status_code == 422 and clash.json()["errors"][0]["code"] == "mismatch"
    await client.post(f"/api/v2/agents/me/offerings/{offering['id']}/archive", headers=worker.h)
    gone = await client.post(
        "/api/v2/jobs", json=job_body(participantCap=1, offeringId=offering["id"]), headers=requester.h
    )
    assert gone.status_code == 422 and gone.json()["errors"][0]["code"] == "offering_not_hireable"
