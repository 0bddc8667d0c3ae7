"""API keys: list, mint and revoke with an API key (/api-keys) and from the dashboard (/api-keys/dashboard)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents import lifecycle
from callboard_core.bus import InTransaction
from tests.conftest import key_headers, listening, owner_client, register_agent


async def create_agent(owner: httpx.AsyncClient) -> tuple[str, str]:
    """(agent id, its read+write runtime key)."""
    response = await owner.post(
        "/agents/dashboard",
        json={
            "name": "Agent " + uuid.uuid4().hex[:6],
            "endpointUrl": "https://agent.example.com/hook",
            "capabilities": ["python"],
        },
    )
    assert response.status_code == 201, response.text
    return response.json()["agent"]["id"], response.json()["apiKey"]


def assert_no_secrets(payload: Any) -> None:
    """Key metadata only: never a hash, and the full key only where the route mints one."""
    text = str(payload).lower()
    assert "hash" not in text


async def works(client: httpx.AsyncClient, key: str) -> int:
    return (await client.get("/api-keys", headers=key_headers(key))).status_code


async def test_agent_key_lists_mints_and_revokes(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        agent_id, key = await create_agent(owner)
        other_agent_id, other_key = await create_agent(owner)

    listed = await client.get("/api-keys", headers=key_headers(key))
    assert listed.status_code == 200, listed.text
    keys = listed.json()["keys"]
    assert {k["agentId"] for k in keys} == {agent_id, other_agent_id}  # every key of the owner
    assert all(
        set(k)
        == {
            "id",
            "keyPrefix",
            "label",
            "agentId",
            "agentHandle",
            "agentName",
            "scopes",
            "lastUsedAt",
            "expiresAt",
            "revoked",
            "createdAt",
        }
        for k in keys
    )
    assert_no_secrets(listed.json())

    minted = await client.post("/api-keys", headers=key_headers(key), json={"label": "ci"})
    assert minted.status_code == 201, minted.text
    info = minted.json()["keyInfo"]
    assert (info["agentId"], info["label"], info["scopes"], info["revoked"]) == (
        agent_id,
        "ci",
        ["read", "write"],
        False,
    )
    assert minted.json()["key"].startswith(info["keyPrefix"])
    assert_no_secrets(info)
    new_key = minted.json()["key"]
    me = await client.get("/api/v2/agents/me", headers=key_headers(new_key))
    assert me.status_code == 200 and me.json()["id"] == agent_id

    # An agent's key manages its own agent's keys only: not a sibling's (the owner's session does that).
    for_other = await client.post("/api-keys", headers=key_headers(key), json={"agentId": other_agent_id})
    assert for_other.status_code == 403 and for_other.json()["code"] == "not_this_agents_key"
    other_key_id = next(k["id"] for k in keys if k["agentId"] == other_agent_id)
    sibling = await client.delete(f"/api-keys/{other_key_id}", headers=key_headers(key))
    assert sibling.status_code == 403 and sibling.json()["code"] == "not_this_agents_key"
    assert await works(client, other_key) == 200
    # With an empty body: defaults apply.
    assert (await client.post("/api-keys", headers=key_headers(key))).status_code == 201

    revoked = await client.delete(f"/api-keys/{info['id']}", headers=key_headers(key))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["status"] == "revoked" and revoked.json()["keyInfo"]["revoked"] is True
    assert (await client.get("/api/v2/agents/me", headers=key_headers(new_key))).status_code == 401  # at once
    again = await client.delete(f"/api-keys/{info['id']}", headers=key_headers(key))
    assert again.status_code == 200 and again.json()["keyInfo"]["revoked"] is True
    relisted = (await client.get("/api-keys", headers=key_headers(other_key))).json()["keys"]
    assert next(k for k in relisted if k["id"] == info["id"])["revoked"] is True

    # A key can revoke itself; the next request with it is refused.
    own_id = next(k["id"] for k in keys if k["agentId"] == agent_id and k["label"] == "runtime")
    assert (await client.delete(f"/api-keys/{own_id}", headers=key_headers(key))).status_code == 200
    assert await works(client, key) == 401
    assert all(k["agentId"] in (agent_id, other_agent_id) for k in relisted)


async def test_read_only_key_and_scope_escalation(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        agent_id, key = await create_agent(owner)
        write_only = await owner.post("/api-keys/dashboard", json={"agentId": agent_id, "scopes": ["write"]})
        assert write_only.status_code == 201 and write_only.json()["keyInfo"]["scopes"] == ["write"]

    read_only = await client.post("/api-keys", headers=key_headers(key), json={"scopes": ["read"]})
    assert read_only.status_code == 201 and read_only.json()["keyInfo"]["scopes"] == ["read"]
    ro = read_only.json()["key"]
    assert await works(client, ro) == 200
    refused = await client.post("/api-keys", headers=key_headers(ro), json={})
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"
    refused = await client.delete(f"/api-keys/{read_only.json()['keyInfo']['id']}", headers=key_headers(ro))
    assert refused.status_code == 403

    # A write-only key may mint, but never more than it holds: the read+write default escalates.
    wo = write_only.json()["key"]
    escalation = await client.post("/api-keys", headers=key_headers(wo), json={})
    assert escalation.status_code == 403 and escalation.json()["code"] == "scope_escalation"
    escalation = await client.post("/api-keys", headers=key_headers(wo), json={"scopes": ["read"]})
    assert escalation.status_code == 403 and escalation.json()["code"] == "scope_escalation"
    ok = await client.post("/api-keys", headers=key_headers(wo), json={"scopes": ["write"]})
    assert ok.status_code == 201 and ok.json()["keyInfo"]["scopes"] == ["write"]
    bad = await client.post("/api-keys", headers=key_headers(key), json={"scopes": ["admin"]})
    assert bad.status_code == 422


async def test_other_owners_agents_and_keys_are_404(client, app, core):
    owner_a, _ = await owner_client(app, core)
    owner_b, _ = await owner_client(app, core)
    async with owner_a, owner_b:
        a_agent, a_key = await create_agent(owner_a)
        b_agent, b_key = await create_agent(owner_b)
        b_key_id = (await client.get("/api-keys", headers=key_headers(b_key))).json()["keys"][0]["id"]

        # API-key routes.
        assert [
            k["agentId"] for k in (await client.get("/api-keys", headers=key_headers(a_key))).json()["keys"]
        ] == [a_agent]
        foreign = await client.post("/api-keys", headers=key_headers(a_key), json={"agentId": b_agent})
        assert foreign.status_code == 404 and foreign.json()["code"] == "agent_not_found"
        foreign = await client.delete(f"/api-keys/{b_key_id}", headers=key_headers(a_key))
        assert foreign.status_code == 404 and foreign.json()["code"] == "api_key_not_found"
        assert (await client.delete("/api-keys/key_nope", headers=key_headers(a_key))).status_code == 404

        # Dashboard routes.
        assert [k["agentId"] for k in (await owner_a.get("/api-keys/dashboard")).json()["keys"]] == [a_agent]
        assert (await owner_a.post("/api-keys/dashboard", json={"agentId": b_agent})).status_code == 404
        assert (await owner_a.delete(f"/api-keys/dashboard/{b_key_id}")).status_code == 404
        assert await works(client, b_key) == 200  # untouched


async def test_dashboard_keys(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        agent_id, runtime_key = await create_agent(owner)
        owner_level = await owner.post("/api-keys/dashboard", json={"label": "ops"})
        assert owner_level.status_code == 201, owner_level.text
        info = owner_level.json()["keyInfo"]
        assert (info["agentId"], info["agentHandle"], info["scopes"]) == (None, None, ["read", "write"])
        assert (await owner.post("/api-keys/dashboard")).status_code == 201  # no body: all defaults
        ro = await owner.post("/api-keys/dashboard", json={"agentId": agent_id, "scopes": ["read"]})
        assert ro.status_code == 201 and ro.json()["keyInfo"]["agentHandle"]

        listed = await owner.get("/api-keys/dashboard")
        assert listed.status_code == 200 and len(listed.json()["keys"]) == 4
        assert_no_secrets(listed.json())
        assert all("key" not in k for k in listed.json()["keys"])

        # The owner-level key sees the owner's keys and mints for the owner's agents, but is no agent.
        ok = owner_level.json()["key"]
        assert len((await client.get("/api-keys", headers=key_headers(ok))).json()["keys"]) == 4
        minted = await client.post("/api-keys", headers=key_headers(ok), json={"agentId": agent_id})
        assert minted.status_code == 201 and minted.json()["keyInfo"]["agentId"] == agent_id
        assert (await client.post("/api-keys", headers=key_headers(ok))).json()["keyInfo"]["agentId"] is None
        me = await client.get("/api/v2/agents/me", headers=key_headers(ok))
        assert me.status_code == 403 and me.json()["code"] == "agent_key_required"

        revoked = await owner.delete(f"/api-keys/dashboard/{info['id']}")
        assert revoked.status_code == 200 and revoked.json()["keyInfo"]["revoked"] is True
        assert await works(client, ok) == 401
        assert await works(client, runtime_key) == 200
        assert (await owner.post("/api-keys/dashboard", json={"agentId": "agt_missing"})).status_code == 404
        assert (await owner.post("/api-keys/dashboard", json={"scopes": []})).json()["keyInfo"]["scopes"] == [
            "read",
            "write",
        ]
        assert (await owner.post("/api-keys/dashboard", json={"keyHash": "x"})).status_code == 422

    # No session: 401; untrusted Origin on a mutation: 403.
    assert (await client.get("/api-keys/dashboard")).status_code == 401
    assert (await client.post("/api-keys/dashboard", json={})).status_code == 401
    assert (await client.get("/api-keys")).status_code == 401
    evil, _ = await owner_client(app, core)
    async with evil:
        evil.headers["Origin"] = "https://evil.example"
        assert (await evil.post("/api-keys/dashboard", json={})).status_code == 403
        assert (await evil.delete(f"/api-keys/dashboard/{info['id']}")).status_code == 403
        assert (await evil.get("/api-keys/dashboard")).status_code == 200


async def test_no_keys_for_archived_or_deleted_agents(client, app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        archived_id, archived_key = await create_agent(owner)
        deleted_id, deleted_key = await create_agent(owner)
        _, live_key = await create_agent(owner)
        assert (await owner.post(f"/agents/dashboard/{archived_id}/archive")).status_code == 200

        async def worked(session: AsyncSession, question: lifecycle.HasHistory) -> bool:
            return question.agent_id == deleted_id

        with listening(core, {lifecycle.HasHistory: [InTransaction(worked)]}):
            handle = (await owner.get(f"/agents/dashboard/{deleted_id}")).json()["handle"]
            gone = await owner.request(
                "DELETE", f"/agents/dashboard/{deleted_id}", json={"confirmHandle": handle}
            )
            assert gone.status_code == 200 and gone.json()["mode"] == "SOFT"

        for agent_id, code in ((archived_id, "agent_archived"), (deleted_id, "agent_deleted")):
            refused = await owner.post("/api-keys/dashboard", json={"agentId": agent_id})
            assert refused.status_code == 409 and refused.json()["code"] == code
            refused = await client.post(
                "/api-keys", headers=key_headers(live_key), json={"agentId": agent_id}
            )
            assert refused.status_code == 409 and refused.json()["code"] == code
        # Their keys stay revoked, and are listed as such.
        assert await works(client, archived_key) == 401 and await works(client, deleted_key) == 401
        listed = (await owner.get("/api-keys/dashboard")).json()["keys"]
        assert all(k["revoked"] for k in listed if k["agentId"] in (archived_id, deleted_id))


async def test_provisional_agent_key_sees_only_its_own_keys(client, app, core):
    reg = await register_agent(client)
    owner, _ = await owner_client(app, core)
    async with owner:
        await create_agent(owner)
    listed = await client.get("/api-keys", headers=key_headers(reg["apiKey"]))
    assert listed.status_code == 200
    assert [k["id"] for k in listed.json()["keys"]] == [reg["keyInfo"]["id"]]
    refused = await client.post("/api-keys", headers=key_headers(reg["apiKey"]), json={})
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"
