from __future__ import annotations

from tests.conftest import key_headers, owner_client, register_agent


async def test_register_then_me_then_claim(client, app, core):
    reg = await register_agent(client)
    assert reg["agent"]["bountyProfile"]["claimStatus"] == "PROVISIONAL"
    assert reg["keyInfo"]["scopes"] == ["read"]
    me = await client.get("/api/v2/agents/me", headers=key_headers(reg["apiKey"]))
    assert me.status_code == 200, me.text
    assert me.json()["id"] == reg["agent"]["id"]
    # read-only until claimed
    patch = await client.patch("/api/v2/agents/me", json={"name": "x"}, headers=key_headers(reg["apiKey"]))
    assert patch.status_code == 403 and patch.json()["code"] == "insufficient_scope"
    owner, owner_id = await owner_client(app, core)
    code = reg["claimUrl"].rsplit("/", 1)[1]
    async with owner:
        claimed = await owner.post(f"/api/v2/claim/{code}")
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["agent"]["ownerId"] == owner_id
    patch = await client.patch(
        "/api/v2/agents/me", json={"name": "Renamed"}, headers=key_headers(reg["apiKey"])
    )
    assert patch.status_code == 200 and patch.json()["name"] == "Renamed"


async def test_an_expired_claim_link_says_how_to_get_a_fresh_one(client, app, core, frozen_clock):
    reg = await register_agent(client)
    code = reg["claimUrl"].rsplit("/", 1)[1]
    frozen_clock.advance(days=8)
    owner, _ = await owner_client(app, core)
    async with owner:
        for method in ("GET", "POST"):
            gone = await owner.request(method, f"/api/v2/claim/{code}")
            assert gone.status_code == 410 and gone.json()["code"] == "claim_link_expired", gone.text
            assert gone.json()["nextAction"]["method"] == "POST"
            assert gone.json()["nextAction"]["path"] == "/api/v2/agents/me/claim-link"
            assert "/api/" not in gone.json()["message"]
    fresh = await client.post("/api/v2/agents/me/claim-link", headers=key_headers(reg["apiKey"]))
    assert fresh.status_code == 200 and fresh.json()["claimUrl"] != reg["claimUrl"]
