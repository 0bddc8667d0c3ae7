"""The owner's agent dashboard: create, view, edit, list, lifecycle (deactivate, archive, delete)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents import lifecycle, reputation
from callboard_core.agents.models import Agent
from callboard_core.agents.schemas import LifecycleBlocker
from callboard_core.audit.models import AuditEvent
from callboard_core.bus import InTransaction
from tests.conftest import key_headers, listening, owner_client, register_agent


def agent_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Agent " + uuid.uuid4().hex[:6],
        "endpointUrl": "https://agent.example.com/hook",
        "capabilities": ["python"],
    }
    body.update(overrides)
    return body


async def create_agent(owner: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    response = await owner.post("/agents/dashboard", json=agent_body(**overrides))
    assert response.status_code == 201, response.text
    return response.json()


async def me_status(client: httpx.AsyncClient, key: str) -> int:
    return (await client.get("/api/v2/agents/me", headers=key_headers(key))).status_code


async def audit_actions(core: Any, agent_id: str) -> list[str]:
    async with core.uow(write=False) as uow:
        rows = await uow.session.execute(
            select(AuditEvent.action).where(AuditEvent.target_id == agent_id).order_by(AuditEvent.created_at)
        )
        return [r[0] for r in rows]


async def set_status(core: Any, agent_id: str, status: str) -> None:
    async with core.uow() as uow:
        await uow.session.execute(update(Agent).where(Agent.id == agent_id).values(status=status))


async def test_create_returns_a_working_read_write_key(client, app, core):
    owner, owner_id = await owner_client(app, core)
    async with owner:
        created = await create_agent(
            owner,
            ownerId="usr_someone_else",
            handle="dash-agent",
            pricingModel="PER_CALL",
            pricePerUnit=2.5,
            currency="EUR",
            metadata={"team": "x"},
        )
    agent = created["agent"]
    assert agent["ownerId"] == owner_id  # the body's ownerId is ignored
    assert agent["handle"] == "dash-agent"
    assert agent["bountyProfile"]["claimStatus"] == "CLAIMED"
    assert agent["status"] == "ACTIVE" and agent["archived"] is False
    assert agent["pricingModel"] == "PER_CALL" and agent["pricePerUnit"] == 2.5 and agent["currency"] == "eur"
    assert agent["metadata"] == {"team": "x"} and agent["capabilities"] == ["python"]
    assert agent["activeKeyCount"] == 1
    assert created["keyInfo"]["scopes"] == ["read", "write"] and created["keyInfo"]["agentId"] == agent["id"]
    assert "hash" not in str(created["keyInfo"]).lower()
    key = created["apiKey"]
    me = await client.get("/api/v2/agents/me", headers=key_headers(key))
    assert me.status_code == 200 and me.json()["id"] == agent["id"]
    patch = await client.patch("/api/v2/agents/me", json={"name": "Written"}, headers=key_headers(key))
    assert patch.status_code == 200, patch.text


async def test_create_validates(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        missing = await owner.post(
            "/agents/dashboard", json={"name": "x", "endpointUrl": "https://a.example"}
        )
        assert missing.status_code == 422
        unknown_tag = await owner.post("/agents/dashboard", json=agent_body(capabilities=["no-such-tag-zz"]))
        assert (
            unknown_tag.status_code == 422 and unknown_tag.json()["errors"][0]["code"] == "unknown_capability"
        )
        await create_agent(owner, handle="taken-handle")
        taken = await owner.post("/agents/dashboard", json=agent_body(handle="taken-handle"))
        assert taken.status_code == 409 and taken.json()["code"] == "handle_taken"


async def test_get_and_update(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        agent = (await create_agent(owner, handle="first-handle"))["agent"]
        await create_agent(owner, handle="other-handle")
        got = await owner.get(f"/agents/dashboard/{agent['id']}")
        assert got.status_code == 200 and got.json()["handle"] == "first-handle"
        assert got.json()["activeKeyCount"] == 1 and got.json()["lastHeartbeatAt"] is None

        put = await owner.put(
            f"/agents/dashboard/{agent['id']}",
            json={
                "name": "Renamed",
                "handle": "new-handle",
                "pricePerUnit": 7,
                "capabilities": [],
                "description": None,
            },
        )
        assert put.status_code == 200, put.text
        body = put.json()
        assert (body["name"], body["handle"], body["pricePerUnit"], body["capabilities"]) == (
            "Renamed",
            "new-handle",
            7,
            [],
        )
        assert (await owner.get(f"/agents/dashboard/{agent['id']}")).json()["handle"] == "new-handle"

        taken = await owner.put(f"/agents/dashboard/{agent['id']}", json={"handle": "other-handle"})
        assert taken.status_code == 409 and taken.json()["code"] == "handle_taken"
        same = await owner.put(f"/agents/dashboard/{agent['id']}", json={"handle": "new-handle"})
        assert same.status_code == 200
        null_name = await owner.put(f"/agents/dashboard/{agent['id']}", json={"name": None})
        assert null_name.status_code == 422
        currency = await owner.put(f"/agents/dashboard/{agent['id']}", json={"currency": "usd"})
        assert currency.status_code == 422  # not part of the update body


async def test_session_rules(client, app, core):
    owner_a, _ = await owner_client(app, core)
    owner_b, _ = await owner_client(app, core)
    async with owner_a, owner_b:
        created = await create_agent(owner_a)
        agent_id, handle = created["agent"]["id"], created["agent"]["handle"]
        # Another owner's agent is a 404 on every route.
        for method, path, body in [
            ("GET", f"/agents/dashboard/{agent_id}", None),
            ("PUT", f"/agents/dashboard/{agent_id}", {"name": "mine now"}),
            ("POST", f"/agents/dashboard/{agent_id}/deactivate", None),
            ("POST", f"/agents/dashboard/{agent_id}/reactivate", None),
            ("POST", f"/agents/dashboard/{agent_id}/archive", None),
            ("POST", f"/agents/dashboard/{agent_id}/unarchive", None),
            ("DELETE", f"/agents/dashboard/{agent_id}", {"confirmHandle": handle}),
            ("GET", f"/agents/dashboard/{agent_id}/lifecycle-blockers", None),
            ("GET", f"/seller-workers/dashboard?sellerAgentId={agent_id}", None),
        ]:
            response = await owner_b.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
        assert (await owner_b.get("/agents/dashboard/mine")).json()["total"] == 0
        # Nothing changed for the real owner.
        still = (await owner_a.get(f"/agents/dashboard/{agent_id}")).json()
        assert still["status"] == "ACTIVE" and still["name"] == created["agent"]["name"]

    # No session: 401. A session but an untrusted Origin on a mutation: 403.
    assert (await client.get("/agents/dashboard/mine")).status_code == 401
    assert (await client.post("/agents/dashboard", json=agent_body())).status_code == 401
    evil, _ = await owner_client(app, core)
    async with evil:
        evil.headers["Origin"] = "https://evil.example"
        refused = await evil.post("/agents/dashboard", json=agent_body())
        assert refused.status_code == 403 and refused.json()["code"] == "untrusted_origin"
        refused = await evil.post(f"/agents/dashboard/{agent_id}/archive")
        assert refused.status_code == 403
        assert (await evil.get("/agents/dashboard/mine")).status_code == 200  # reads need no Origin


async def test_list_filters(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        cheap = (await create_agent(owner, pricePerUnit=1, capabilities=["python"]))["agent"]
        mid = (await create_agent(owner, pricePerUnit=5, capabilities=["python"]))["agent"]
        dear = (await create_agent(owner, pricePerUnit=20, capabilities=[]))["agent"]
        async with core.uow() as uow:
            # A reputation of 80 now, in the stored (forward-decayed) terms (agents/reputation.py).
            score = reputation.stored(80)
            await uow.session.execute(
                update(Agent).where(Agent.id == dear["id"]).values(reputation_score=score)
            )

        async def ids(query: str = "") -> tuple[list[str], int]:
            response = await owner.get("/agents/dashboard/mine" + query)
            assert response.status_code == 200, response.text
            return [a["id"] for a in response.json()["agents"]], response.json()["total"]

        assert await ids() == ([dear["id"], mid["id"], cheap["id"]], 3)  # newest first
        assert await ids("?capability=python") == ([mid["id"], cheap["id"]], 2)
        assert await ids("?minPrice=2&maxPrice=10") == ([mid["id"]], 1)
        assert await ids("?minReputation=50") == ([dear["id"]], 1)
        assert await ids("?limit=1&offset=1") == ([mid["id"]], 3)

        assert (await owner.post(f"/agents/dashboard/{mid['id']}/deactivate")).status_code == 200
        assert await ids("?status=INACTIVE") == ([mid["id"]], 1)
        assert await ids("?status=ACTIVE") == ([dear["id"], cheap["id"]], 2)

        assert (await owner.post(f"/agents/dashboard/{cheap['id']}/archive")).status_code == 200
        assert await ids() == ([dear["id"], mid["id"]], 2)
        assert await ids("?includeArchived=true") == ([dear["id"], mid["id"], cheap["id"]], 3)
        page = (await owner.get("/agents/dashboard/mine?includeArchived=true")).json()
        assert (page["limit"], page["offset"]) == (50, 0)
        assert [a["archived"] for a in page["agents"]] == [False, False, True]

        for bad in ("?limit=201", "?limit=0", "?offset=-1", "?status=GONE", "?colour=red", "?minPrice=abc"):
            assert (await owner.get("/agents/dashboard/mine" + bad)).status_code == 422, bad


async def test_deactivate_keeps_keys_and_reactivate(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        created = await create_agent(owner)
        agent_id, key = created["agent"]["id"], created["apiKey"]
        off = await owner.post(f"/agents/dashboard/{agent_id}/deactivate", json={"reason": "holiday"})
        assert off.status_code == 200 and off.json()["status"] == "INACTIVE"
        assert off.json()["activeKeyCount"] == 1
        assert await me_status(client, key) == 200  # keys stay valid

        again = await owner.post(f"/agents/dashboard/{agent_id}/deactivate")
        assert again.status_code == 409
        assert again.json()["code"] == "invalid_agent_state" and again.json()["currentState"] == "INACTIVE"

        on = await owner.post(f"/agents/dashboard/{agent_id}/reactivate")
        assert on.status_code == 200 and on.json()["status"] == "ACTIVE"
        again = await owner.post(f"/agents/dashboard/{agent_id}/reactivate")
        assert again.status_code == 409 and again.json()["currentState"] == "ACTIVE"
        assert (
            await owner.post(f"/agents/dashboard/{agent_id}/reactivate", json={"x": 1})
        ).status_code == 422
    assert await audit_actions(core, agent_id) == ["agent.deactivated", "agent.reactivated"]


async def test_suspended_agent_stays_suspended(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        agent_id = (await create_agent(owner))["agent"]["id"]
        await set_status(core, agent_id, "SUSPENDED")
        for action in ("reactivate", "deactivate"):
            refused = await owner.post(f"/agents/dashboard/{agent_id}/{action}")
            assert refused.status_code == 409 and refused.json()["currentState"] == "SUSPENDED", action
        # Archive and unarchive cannot launder a suspension.
        assert (await owner.post(f"/agents/dashboard/{agent_id}/archive")).json()["status"] == "SUSPENDED"
        assert (await owner.post(f"/agents/dashboard/{agent_id}/unarchive")).json()["status"] == "SUSPENDED"
        assert (await owner.post(f"/agents/dashboard/{agent_id}/reactivate")).status_code == 409


async def test_archive_revokes_keys_and_unarchive_keeps_them_revoked(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        created = await create_agent(owner)
        agent_id, key = created["agent"]["id"], created["apiKey"]
        second = await owner.post("/api-keys/dashboard", json={"agentId": agent_id, "label": "second"})
        assert second.status_code == 201
        blockers = await owner.get(f"/agents/dashboard/{agent_id}/lifecycle-blockers")
        assert blockers.status_code == 200 and blockers.json() == {"agentId": agent_id, "blockers": []}

        archived = await owner.post(f"/agents/dashboard/{agent_id}/archive", json={"reason": "done"})
        assert archived.status_code == 200, archived.text
        body = archived.json()
        assert body["archived"] is True and body["archivedAt"] and body["status"] == "INACTIVE"
        assert body["activeKeyCount"] == 0
        assert await me_status(client, key) == 401
        assert await me_status(client, second.json()["key"]) == 401

        again = await owner.post(f"/agents/dashboard/{agent_id}/archive")
        assert again.status_code == 409 and again.json()["archived"] is True
        assert (await owner.post(f"/agents/dashboard/{agent_id}/reactivate")).status_code == 409
        minted = await owner.post("/api-keys/dashboard", json={"agentId": agent_id})
        assert minted.status_code == 409 and minted.json()["code"] == "agent_archived"

        back = await owner.post(f"/agents/dashboard/{agent_id}/unarchive")
        assert back.status_code == 200
        assert back.json()["archived"] is False and back.json()["status"] == "INACTIVE"
        assert back.json()["activeKeyCount"] == 0
        assert await me_status(client, key) == 401  # keys stay revoked
        assert (await owner.post(f"/agents/dashboard/{agent_id}/unarchive")).status_code == 409

        fresh = await owner.post("/api-keys/dashboard", json={"agentId": agent_id})
        assert fresh.status_code == 201
        assert await me_status(client, fresh.json()["key"]) == 200
        assert (await owner.post(f"/agents/dashboard/{agent_id}/reactivate")).json()["status"] == "ACTIVE"
    assert await audit_actions(core, agent_id) == ["agent.archived", "agent.unarchived", "agent.reactivated"]


async def test_blocker_provider_blocks_archive_and_delete(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        created = await create_agent(owner)
        agent_id, key, handle = created["agent"]["id"], created["apiKey"], created["agent"]["handle"]

        async def in_flight(session: AsyncSession, question: lifecycle.BlockersOf) -> list[LifecycleBlocker]:
            if question.agent_id != agent_id:
                return []
            return [LifecycleBlocker(kind="job_in_progress", message="A job is running.", ref_ids=["job_1"])]

        with listening(core, {lifecycle.BlockersOf: [InTransaction(in_flight)]}):
            listed = await owner.get(f"/agents/dashboard/{agent_id}/lifecycle-blockers")
            assert listed.json()["blockers"] == [
                {"kind": "job_in_progress", "message": "A job is running.", "count": 1, "refIds": ["job_1"]}
            ]
            refused = await owner.post(f"/agents/dashboard/{agent_id}/archive")
            assert refused.status_code == 409
            assert refused.json()["blockers"][0]["kind"] == "job_in_progress"
            refused = await owner.request(
                "DELETE", f"/agents/dashboard/{agent_id}", json={"confirmHandle": handle}
            )
            assert refused.status_code == 409 and refused.json()["blockers"][0]["refIds"] == ["job_1"]
            # Nothing moved: not archived, not deleted, the key still works.
            got = (await owner.get(f"/agents/dashboard/{agent_id}")).json()
            assert got["archived"] is False and got["status"] == "ACTIVE"
            assert await me_status(client, key) == 200
        assert (await owner.post(f"/agents/dashboard/{agent_id}/archive")).status_code == 200
    assert await audit_actions(core, agent_id) == ["agent.archived"]


async def test_delete_hard_without_history(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        created = await create_agent(owner, handle="short-lived")
        agent_id, key = created["agent"]["id"], created["apiKey"]
        mismatch = await owner.request(
            "DELETE", f"/agents/dashboard/{agent_id}", json={"confirmHandle": "short"}
        )
        assert mismatch.status_code == 422 and mismatch.json()["code"] == "confirm_handle_mismatch"
        assert (await owner.request("DELETE", f"/agents/dashboard/{agent_id}")).status_code == 422
        assert await me_status(client, key) == 200

        deleted = await owner.request(
            "DELETE", f"/agents/dashboard/{agent_id}", json={"confirmHandle": "short-lived"}
        )
        assert deleted.status_code == 200, deleted.text
        assert deleted.json() == {"status": "deleted", "agentId": agent_id, "mode": "HARD"}
        assert (await owner.get(f"/agents/dashboard/{agent_id}")).status_code == 404
        assert await me_status(client, key) == 401
        again = await owner.request(
            "DELETE", f"/agents/dashboard/{agent_id}", json={"confirmHandle": "short-lived"}
        )
        assert again.status_code == 404
        # Removed outright: the handle is free again.
        await create_agent(owner, handle="short-lived")
    async with core.uow(write=False) as uow:
        assert await uow.session.get(Agent, agent_id) is None
    assert await audit_actions(core, agent_id) == ["agent.deleted"]


async def test_delete_soft_with_history(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        created = await create_agent(owner, handle="has-history")
        agent_id, key = created["agent"]["id"], created["apiKey"]

        async def worked(session: AsyncSession, question: lifecycle.HasHistory) -> bool:
            return question.agent_id == agent_id

        with listening(core, {lifecycle.HasHistory: [InTransaction(worked)]}):
            deleted = await owner.request(
                "DELETE", f"/agents/dashboard/{agent_id}", json={"confirmHandle": "has-history"}
            )
        assert deleted.status_code == 200 and deleted.json()["mode"] == "SOFT"
        assert (await owner.get(f"/agents/dashboard/{agent_id}")).status_code == 404
        assert (await owner.get("/agents/dashboard/mine?includeArchived=true")).json()["total"] == 0
        assert await me_status(client, key) == 401
        # The tombstone keeps the handle reserved.
        taken = await owner.post("/agents/dashboard", json=agent_body(handle="has-history"))
        assert taken.status_code == 409 and taken.json()["code"] == "handle_taken"
    async with core.uow(write=False) as uow:
        row = await uow.session.get(Agent, agent_id)
        assert row is not None and row.deleted_at is not None


async def test_concurrent_archive_has_one_winner(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        agent_id = (await create_agent(owner))["agent"]["id"]
        results = await asyncio.gather(
            owner.post(f"/agents/dashboard/{agent_id}/archive"),
            owner.post(f"/agents/dashboard/{agent_id}/archive"),
        )
        assert sorted(r.status_code for r in results) == [200, 409]
        loser = next(r for r in results if r.status_code == 409)
        assert loser.json()["code"] == "invalid_agent_state" and loser.json()["archived"] is True
    assert await audit_actions(core, agent_id) == ["agent.archived"]


async def test_seller_workers(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        created = await create_agent(owner)
        agent_id, key = created["agent"]["id"], created["apiKey"]
        beat = await client.post(
            "/api/v2/agents/me/heartbeat",
            headers=key_headers(key),
            json={
                "runtimeId": "worker-1",
                "roleMode": "WORKER",
                "capabilitiesJson": ["python"],
                "version": "1.2",
            },
        )
        assert beat.status_code == 200, beat.text
        workers = await owner.get(f"/seller-workers/dashboard?sellerAgentId={agent_id}")
        assert workers.status_code == 200, workers.text
        [worker] = workers.json()["workers"]
        assert (worker["sellerAgentId"], worker["workerId"], worker["status"], worker["capabilities"]) == (
            agent_id,
            "worker-1",
            "ONLINE",
            ["python"],
        )
        assert (await owner.get(f"/agents/dashboard/{agent_id}")).json()["lastHeartbeatAt"] is not None
        assert (await owner.get("/seller-workers/dashboard")).status_code == 422


async def test_provisional_agent_is_not_on_the_dashboard(client, app, core):
    reg = await register_agent(client)
    owner, _ = await owner_client(app, core)
    async with owner:
        assert (await owner.get(f"/agents/dashboard/{reg['agent']['id']}")).status_code == 404
        assert (await owner.post(f"/agents/dashboard/{reg['agent']['id']}/archive")).status_code == 404


async def test_policy_limit_past_the_column_is_a_clear_422(app: Any, core: Any) -> None:
    """autoPublishLimitCents is stored in a 32-bit column: a larger value is refused, never a 500."""
    owner, _ = await owner_client(app, core)
    agent = await create_agent(owner)
    path = f"/api/v2/agents/dashboard/{agent['agent']['id']}/policy"
    refused = await owner.patch(path, json={"autoPublishLimitCents": 10_000_000_000})
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "autoPublishLimitCents"
    accepted = await owner.patch(path, json={"autoPublishLimitCents": 2_000_000_000})
    assert accepted.status_code == 200, accepted.text
