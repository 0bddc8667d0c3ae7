"""Onboarding sessions, registration drafts, activation and install tokens, over HTTP."""

from __future__ import annotations

import asyncio
import shlex
import uuid
from typing import Any

import httpx
from sqlalchemy import select

import runtime_kits
from callboard_core.onboarding.models import InstallToken, OnboardingActivation, OnboardingSession
from callboard_core.security import tokens
from tests.conftest import key_headers, new_client
from tests.factories import assert_problem
from tests.jobs_helpers import Owner, new_agent, new_owner, travel

SETUP = {
    "agentName": "Research Helper",
    "role": "BOTH",
    "buyerIntent": "Hire translators for reports.",
    "sellerManifest": {"description": "Summaries of Python code.", "capabilities": ["python"]},
    "proposedPolicy": {
        "allowedBuyerCapabilities": ["python"],
        "sellerAutonomy": "AUTO_ACCEPT_WITHIN_POLICY",
        "requireApprovalOverCents": 700,
        "maxSpendCentsPerDay": 5000,
        "maxSpendCentsPerTask": 900,
    },
    "ownerQuestions": "May I bid on paid work?",
    "lastMessage": "Ready when you are.",
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def install_token_of(command: str) -> str:
    argv = shlex.split(command)
    assert argv[:3] == ["callboard", "kit", "install"], command
    return argv[argv.index("--token") + 1]


async def mint(owner: Owner, **body: Any) -> dict[str, Any]:
    r = await owner.client.post("/api/onboarding/mint", json=body or None)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def onboarded(owner: Owner, agent: httpx.AsyncClient, **setup: Any) -> tuple[dict[str, Any], str]:
    """A minted session whose agent saved its setup: (mint response, session id)."""
    minted = await mint(owner, role="BOTH", sellerCapabilities=["python"])
    saved = await agent.post(
        f"/api/agent/onboard/{minted['workspaceSlug']}/setup",
        json={**SETUP, "proposedHandle": f"helper-{uuid.uuid4().hex[:8]}", **setup},
        headers=bearer(minted["token"]),
    )
    assert saved.status_code == 200, saved.text
    assert saved.json()["session"]["id"] == minted["sessionId"]  # the id activation names, from the mint
    return minted, minted["sessionId"]


async def activate(owner: Owner, session_id: str, **body: Any) -> dict[str, Any]:
    r = await owner.client.post(
        f"/api/onboarding/sessions/{session_id}/activate", json={"runtimeTarget": "MCP", **body}
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_after_kit_install_the_agent_has_one_live_key(app: Any, core: Any, client: Any) -> None:
    """Activation shows a key for configuring the runtime by hand; `callboard kit install` brings its own.
    The unused activation key goes when the kit's arrives: one live read+write key per runtime."""
    owner = await new_owner(app, core)
    async with new_client(app) as agent:
        _, session_id = await onboarded(owner, agent)
    done = await activate(owner, session_id)
    exchanged = await client.post(
        "/api/onboarding/install-token/exchange", json={"token": install_token_of(done["installCommand"])}
    )
    assert exchanged.status_code == 200, exchanged.text
    kit_key = exchanged.json()["runtimeKit"]["env"]["CALLBOARD_API_KEY"]
    keys = (await owner.client.get("/api-keys/dashboard")).json()["keys"]
    live = [k for k in keys if k["agentId"] == done["activation"]["agentId"] and not k["revoked"]]
    assert [k["label"] for k in live] == ["kit install"], keys
    assert (await client.get("/api/v2/agents/me", headers=key_headers(done["key"]))).status_code == 401
    assert (await client.get("/api/v2/agents/me", headers=key_headers(kit_key))).status_code == 200


async def test_owner_flow_from_mint_to_install(app: Any, core: Any, client: Any) -> None:
    owner = await new_owner(app, core)
    minted = await mint(
        owner,
        role="BOTH",
        sellerOffer="Code summaries",
        sellerCapabilities=["python"],
        ownerGuardrails="Never spend over $10",
    )
    slug, token = minted["workspaceSlug"], minted["token"]
    assert token in minted["prompt"] and slug in minted["prompt"]
    async with core.uow(write=False) as uow:
        row = (
            await uow.session.execute(select(OnboardingSession).where(OnboardingSession.slug == slug))
        ).scalar_one()
        assert row.token_hash == tokens.hash_token(token) and token not in str(row.data)

    # The agent's side, with the bearer token only.
    here = await client.post(
        f"/api/agent/onboard/{slug}/presence", json={"message": "hello"}, headers=bearer(token)
    )
    assert here.status_code == 201, here.text
    assert (
        here.json()["status"] == "online"
        and here.json()["workspaceSlug"] == slug
        and here.json()["presenceId"]
    )
    guide = await client.get(f"/api/agent/onboard/{slug}/setup", headers=bearer(token))
    assert guide.status_code == 200, guide.text
    assert guide.json()["ownerRequest"]["role"] == "BOTH" and "MCP" in guide.json()["runtimeTargets"]
    handle = f"helper-{uuid.uuid4().hex[:8]}"
    saved = await client.post(
        f"/api/agent/onboard/{slug}/setup", json={**SETUP, "proposedHandle": handle}, headers=bearer(token)
    )
    assert saved.status_code == 200, saved.text
    assert (
        saved.json()["ownerVisible"] is True
        and saved.json()["session"]["draft"]["agentName"] == "Research Helper"
    )
    session_id = saved.json()["session"]["id"]

    # The owner sees it.
    listed = (await owner.client.get("/api/onboarding/sessions")).json()
    assert listed["total"] == 1 and listed["sessions"][0]["id"] == session_id
    assert (
        listed["sessions"][0]["status"] == "IN_PROGRESS"
        and listed["sessions"][0]["lastPresenceMessage"] == "hello"
    )
    seen = await owner.client.get(f"/api/onboarding/sessions/{session_id}")
    assert seen.status_code == 200, seen.text
    assert seen.json()["ownerVisible"] is True
    assert seen.json()["session"]["draft"]["proposedPolicy"]["maxSpendCentsPerTask"] == 900
    assert any("activate" in a for a in seen.json()["nextActions"])
    assert any("May I bid" in a for a in seen.json()["nextActions"])

    done = await activate(
        owner,
        session_id,
        enableBuyer=True,
        approveSellerListing=True,
        isTestMode=True,
        maxSpendCentsPerTask=500,
        maxSpendCentsPerDay=2000,
        requireApprovalOverCents=1000,
        allowedBuyerCapabilities=["python"],
        sellerAutonomy="OWNER_APPROVAL",
    )
    key = done["key"]
    assert done["keyInfo"]["scopes"] == ["read", "write"]
    assert (
        key not in str(done["runtimeKit"])
        and done["runtimeKit"]["env"]["CALLBOARD_API_KEY"] == runtime_kits.KEY_PLACEHOLDER
    )
    assert done["runtimeKit"]["runtimeTarget"] == "MCP" and done["runtimeKit"]["mcp"] is not None
    install = install_token_of(done["installCommand"])
    assert done["installCommand"] == runtime_kits.install_command("http://testserver", install)
    activation = done["activation"]
    assert (
        activation["maxSpendCentsPerTask"],
        activation["maxSpendCentsPerDay"],
        activation["requireApprovalOverCents"],
        activation["sellerAutonomy"],
        activation["isTestMode"],
    ) == (500, 2000, 1000, "OWNER_APPROVAL", True)
    assert done["session"]["status"] == "ACTIVATED" and done["session"]["agentId"] == activation["agentId"]

    me = await client.get("/api/v2/agents/me", headers=key_headers(key))
    assert me.status_code == 200, me.text
    agent = me.json()
    assert (agent["name"], agent["handle"], agent["ownerId"]) == ("Research Helper", handle, owner.user_id)
    assert agent["id"] == activation["agentId"] and agent["capabilities"] == ["python"]
    assert agent["bountyProfile"]["claimStatus"] == "CLAIMED"
    assert agent["bountyProfile"]["requesterEnabled"] and agent["bountyProfile"]["workerEnabled"]
    assert agent["bountyProfile"]["autoPublishLimitCents"] == 1000
    assert agent["metadata"]["onboarding"]["isTestMode"] is True
    assert (await owner.client.get(f"/agents/dashboard/{agent['id']}")).status_code == 200

    # The install command's token gives the kit with a new, working key; once.
    exchanged = await client.post("/api/onboarding/install-token/exchange", json={"token": install})
    assert exchanged.status_code == 200, exchanged.text
    body = exchanged.json()
    assert body["source"] == "onboarding_session" and body["activationId"] == activation["id"]
    kit_key = body["runtimeKit"]["env"]["CALLBOARD_API_KEY"]
    assert kit_key != key and tokens.api_key_well_formed(kit_key)
    assert body["runtimeKit"]["mcp"]["headers"]["X-API-Key"] == kit_key
    renamed = await client.patch(
        "/api/v2/agents/me", json={"description": "installed"}, headers=key_headers(kit_key)
    )
    assert renamed.status_code == 200, renamed.text
    again = await client.post("/api/onboarding/install-token/exchange", json={"token": install})
    assert_problem(again, 410, "install_token_used")
    async with core.uow(write=False) as uow:
        ticket = (await uow.session.execute(select(InstallToken))).scalar_one()
        assert (
            ticket.token_hash == tokens.hash_token(install)
            and ticket.used_at is not None
            and ticket.api_key_id
        )

    # The session is closed for the agent and for a second activation.
    assert_problem(
        await client.post(f"/api/agent/onboard/{slug}/presence", headers=bearer(token)),
        409,
        "onboarding_session_closed",
    )
    assert_problem(
        await owner.client.post(
            f"/api/onboarding/sessions/{session_id}/activate", json={"runtimeTarget": "MCP"}
        ),
        409,
        "already_activated",
    )


async def test_expired_token_refused_to_the_agent_while_the_owner_acts(
    app: Any, core: Any, client: Any, frozen_clock: Any
) -> None:
    owner = await new_owner(app, core)
    minted, session_id = await onboarded(owner, client)
    slug, token = minted["workspaceSlug"], minted["token"]
    await travel(core, minutes=61)
    for response in (
        await client.post(f"/api/agent/onboard/{slug}/presence", headers=bearer(token)),
        await client.get(f"/api/agent/onboard/{slug}/setup", headers=bearer(token)),
        await client.post(
            f"/api/agent/onboard/{slug}/setup", json={"agentName": "Late"}, headers=bearer(token)
        ),
    ):
        assert_problem(response, 401, "invalid_onboarding_token")
    seen = await owner.client.get(f"/api/onboarding/sessions/{session_id}")
    assert seen.status_code == 200 and seen.json()["session"]["tokenExpired"] is True
    reviewed = await owner.client.post(f"/api/onboarding/sessions/{slug}/review", json={"token": token})
    assert reviewed.status_code == 200, reviewed.text
    assert reviewed.json()["session"]["reviewedAt"] is not None
    edited = await owner.client.patch(
        f"/api/onboarding/sessions/{session_id}",
        json={"agentName": "Renamed by owner", "ownerQuestions": None},
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["session"]["draft"]["agentName"] == "Renamed by owner"
    assert edited.json()["session"]["draft"]["ownerQuestions"] is None
    done = await activate(owner, session_id)
    assert (await client.get("/api/v2/agents/me", headers=key_headers(done["key"]))).json()[
        "name"
    ] == "Renamed by owner"


async def test_policy_safe_defaults_or_the_agents_proposal(app: Any, core: Any, client: Any) -> None:
    owner = await new_owner(app, core)
    _, safe_id = await onboarded(owner, client)
    safe = (await activate(owner, safe_id))["activation"]
    assert (safe["maxSpendCentsPerTask"], safe["maxSpendCentsPerDay"], safe["requireApprovalOverCents"]) == (
        0,
        0,
        0,
    )
    assert safe["sellerAutonomy"] == "OWNER_APPROVAL" and safe["allowedBuyerCapabilities"] == []
    assert safe["activationMode"] == "SAFE_DEFAULTS" and safe["approveSellerListing"] is False
    assert safe["enableBuyer"] is True and safe["isTestMode"] is False

    _, advanced_id = await onboarded(owner, client)
    advanced = (await activate(owner, advanced_id, activationMode="ADVANCED", maxSpendCentsPerDay=3000))[
        "activation"
    ]
    assert (advanced["maxSpendCentsPerTask"], advanced["maxSpendCentsPerDay"]) == (900, 3000)  # the body wins
    assert (
        advanced["requireApprovalOverCents"] == 700
        and advanced["sellerAutonomy"] == "AUTO_ACCEPT_WITHIN_POLICY"
    )
    assert advanced["allowedBuyerCapabilities"] == ["python"]

    _, seller_id = await onboarded(owner, client, role="SELLER")
    done = await activate(owner, seller_id)
    me = (await client.get("/api/v2/agents/me", headers=key_headers(done["key"]))).json()
    assert done["activation"]["enableBuyer"] is False
    assert me["bountyProfile"]["requesterEnabled"] is False and me["bountyProfile"]["workerEnabled"] is False


async def test_activation_input_is_validated(app: Any, core: Any, client: Any) -> None:
    owner = await new_owner(app, core)
    _, session_id = await onboarded(owner, client)
    path = f"/api/onboarding/sessions/{session_id}/activate"
    for body in (
        {},
        {"runtimeTarget": "NOT_A_RUNTIME"},
        {"runtimeTarget": "MCP", "maxSpendCentsPerTask": -1},
        {"runtimeTarget": "MCP", "maxSpendCentsPerDay": 1.5},
        {"runtimeTarget": "MCP", "requireApprovalOverCents": 10**12},
        {"runtimeTarget": "MCP", "sellerAutonomy": "WHATEVER"},
        {"runtimeTarget": "MCP", "activationMode": "RECKLESS"},
        {"runtimeTarget": "MCP", "sellerEndpointUrl": "ftp://x"},
        {"runtimeTarget": "MCP", "availability": {"pad": "x" * 70_000}},
    ):
        assert_problem(await owner.client.post(path, json=body), 422)
    unknown = await owner.client.post(
        path, json={"runtimeTarget": "MCP", "allowedBuyerCapabilities": ["no-such-tag"]}
    )
    assert assert_problem(unknown, 422)["errors"][0]["code"] == "unknown_capability"
    caps = await owner.client.post(
        path, json={"runtimeTarget": "MCP", "maxSpendCentsPerTask": 10, "maxSpendCentsPerDay": 5}
    )
    assert assert_problem(caps, 422)["errors"][0]["code"] == "exceeds_daily_cap"
    # Still open after the refusals; a session without an agent name cannot be activated.
    bare = await mint(owner)
    sessions = (await owner.client.get("/api/onboarding/sessions")).json()["sessions"]
    bare_id = next(x["id"] for x in sessions if x["workspaceSlug"] == bare["workspaceSlug"])
    assert_problem(
        await owner.client.post(
            f"/api/onboarding/sessions/{bare_id}/activate", json={"runtimeTarget": "GENERIC_HTTP"}
        ),
        409,
        "setup_incomplete",
    )
    # The agent may not clear its name; the owner may not clear the role.
    nulled = await client.post(
        f"/api/agent/onboard/{bare['workspaceSlug']}/setup",
        json={"agentName": None},
        headers=bearer(bare["token"]),
    )
    assert assert_problem(nulled, 422)["errors"][0]["field"] == "agentName"
    assert_problem(await owner.client.patch(f"/api/onboarding/sessions/{bare_id}", json={"role": None}), 422)
    assert (await activate(owner, session_id))["activation"]["runtimeTarget"] == "MCP"


async def test_install_token_expires_and_unknown_is_404(
    app: Any, core: Any, client: Any, frozen_clock: Any
) -> None:
    owner = await new_owner(app, core)
    _, session_id = await onboarded(owner, client)
    install = install_token_of((await activate(owner, session_id))["installCommand"])
    await travel(core, minutes=16)
    assert_problem(
        await client.post("/api/onboarding/install-token/exchange", json={"token": install}),
        410,
        "install_token_expired",
    )
    assert_problem(
        await client.post("/api/onboarding/install-token/exchange", json={"token": "cbi_nope"}),
        404,
        "install_token_not_found",
    )


async def test_concurrent_exchanges_and_activations_one_wins(app: Any, core: Any, client: Any) -> None:
    owner = await new_owner(app, core)
    _, session_id = await onboarded(owner, client)
    results = await asyncio.gather(
        *[
            owner.client.post(
                f"/api/onboarding/sessions/{session_id}/activate", json={"runtimeTarget": "MCP"}
            )
            for _ in range(4)
        ]
    )
    assert sorted(r.status_code for r in results) == [201, 409, 409, 409], [r.text for r in results]
    install = install_token_of(next(r for r in results if r.status_code == 201).json()["installCommand"])
    clients = [new_client(app) for _ in range(5)]
    try:
        exchanges = await asyncio.gather(
            *[c.post("/api/onboarding/install-token/exchange", json={"token": install}) for c in clients]
        )
    finally:
        for c in clients:
            await c.aclose()
    assert sorted(r.status_code for r in exchanges) == [200, 410, 410, 410, 410], [r.text for r in exchanges]
    async with core.uow(write=False) as uow:
        assert len((await uow.session.execute(select(OnboardingActivation))).scalars().all()) == 1


async def test_onboarding_claim_gives_a_read_only_key(app: Any, core: Any, client: Any) -> None:
    owner = await new_owner(app, core)
    minted, session_id = await onboarded(owner, client)
    path = f"/api/agent/onboard/{minted['workspaceSlug']}/claim"
    assert_problem(await owner.client.post(path, json={"token": minted["token"]}), 409, "agent_required")
    assert_problem(await owner.client.post(path, json={"token": "wrong"}), 422, "token_mismatch")
    existing = await new_agent(owner)
    claimed = await owner.client.post(path, json={"token": minted["token"], "agentId": existing.id})
    assert claimed.status_code == 200, claimed.text
    key = claimed.json()["key"]
    assert (
        claimed.json()["keyInfo"]["scopes"] == ["read"]
        and claimed.json()["keyInfo"]["agentId"] == existing.id
    )
    assert (await client.get("/api/v2/agents/me", headers=key_headers(key))).status_code == 200
    assert_problem(
        await client.patch("/api/v2/agents/me", json={"description": "x"}, headers=key_headers(key)),
        403,
        "insufficient_scope",
    )
    # After activation the key is for the activated agent.
    done = await activate(owner, session_id)
    after = await owner.client.post(path, json={"token": minted["token"]})
    assert after.status_code == 200 and after.json()["keyInfo"]["agentId"] == done["activation"]["agentId"]
    # Another owner's agent is not a target.
    stranger = await new_agent(await new_owner(app, core))
    assert_problem(
        await owner.client.post(path, json={"token": minted["token"], "agentId": stranger.id}), 404
    )


async def test_another_owners_session_is_404(app: Any, core: Any, client: Any) -> None:
    alice, bob = await new_owner(app, core), await new_owner(app, core)
    minted, session_id = await onboarded(alice, client)
    slug, token = minted["workspaceSlug"], minted["token"]
    base = f"/api/onboarding/sessions/{session_id}"
    for response in (
        await bob.client.get(base),
        await bob.client.patch(base, json={"agentName": "Mine now"}),
        await bob.client.post(f"{base}/dismiss"),
        await bob.client.post(f"{base}/activate", json={"runtimeTarget": "MCP"}),
        await bob.client.post(f"/api/onboarding/sessions/{slug}/review", json={"token": token}),
        await bob.client.post(f"/api/agent/onboard/{slug}/claim", json={"token": token}),
    ):
        assert_problem(response, 404, "onboarding_session_not_found")
    assert (await bob.client.get("/api/onboarding/sessions")).json() == {"total": 0, "sessions": []}
    # A token is bound to its own slug.
    other = await mint(bob)
    assert_problem(
        await client.get(f"/api/agent/onboard/{other['workspaceSlug']}/setup", headers=bearer(token)), 401
    )
    assert (await alice.client.get(base)).json()["session"]["draft"]["agentName"] == "Research Helper"


async def test_dismissed_session_is_closed(app: Any, core: Any, client: Any) -> None:
    owner = await new_owner(app, core)
    minted, session_id = await onboarded(owner, client)
    base = f"/api/onboarding/sessions/{session_id}"
    first = await owner.client.post(f"{base}/dismiss")
    assert first.status_code == 200 and first.json()["session"]["status"] == "DISMISSED"
    assert (await owner.client.post(f"{base}/dismiss")).status_code == 200
    assert_problem(
        await client.post(
            f"/api/agent/onboard/{minted['workspaceSlug']}/setup",
            json={"agentName": "x"},
            headers=bearer(minted["token"]),
        ),
        409,
        "onboarding_session_closed",
    )
    assert_problem(await owner.client.patch(base, json={"agentName": "x"}), 409, "invalid_state")
    assert_problem(
        await owner.client.post(f"{base}/activate", json={"runtimeTarget": "MCP"}), 409, "invalid_state"
    )


async def test_registration_draft_from_manifest_to_kit(app: Any, core: Any, client: Any) -> None:
    gone = await client.post("/api/agent/register/start")
    assert assert_problem(gone, 410, "public_registration_unavailable")["alternatives"]
    manifest = {
        "name": "Draft Bot",
        "handle": f"draft-{uuid.uuid4().hex[:8]}",
        "description": "Translates.",
        "capabilities": ["python", "no-such-tag"],
        "endpointUrl": "https://draft.example.com/hook",
    }
    made = await client.post("/api/agent/register/manifest", json={"manifest": manifest})
    assert made.status_code == 201, made.text
    slug, token = made.json()["slug"], made.json()["token"]
    assert (
        made.json()["setupUrl"].endswith(f"/api/agent/register/{slug}/setup")
        and token in made.json()["prompt"]
    )
    status_path, h = f"/api/agent/register/{slug}/status", bearer(token)
    assert_problem(await client.get(status_path), 401, "missing_draft_token")
    assert_problem(await client.get(status_path, headers=bearer("rgt_wrong")), 401, "invalid_draft_token")
    status = (await client.get(status_path, headers=h)).json()
    assert (status["status"], status["humanClaimRequired"], status["runtimeKit"]) == ("DRAFT", True, None)
    here = await client.post(f"/api/agent/register/{slug}/presence", json={"message": "hi"}, headers=h)
    assert here.status_code == 200 and here.json() == {"status": "online", "slug": slug}
    assert (await client.get(f"/api/agent/register/{slug}/setup", headers=h)).json()["draft"][
        "agentName"
    ] == "Draft Bot"
    saved = await client.post(f"/api/agent/register/{slug}/setup", json={"role": "SELLER"}, headers=h)
    assert saved.status_code == 200, saved.text
    assert (saved.json()["humanClaimRequired"], saved.json()["ownerVisible"]) == (True, False)

    owner, other = await new_owner(app, core), await new_owner(app, core)
    claim_path, activate_path = f"/api/agent/register/{slug}/claim", f"/api/agent/register/{slug}/activate"
    assert_problem(
        await owner.client.post(activate_path, json={"token": token, "runtimeTarget": "MCP"}),
        409,
        "claim_required",
    )
    assert_problem(await owner.client.post(claim_path, json={"token": "rgt_wrong"}), 404)
    claimed = await owner.client.post(claim_path, json={"token": token})
    assert claimed.status_code == 200, claimed.text
    assert (claimed.json()["humanClaimRequired"], claimed.json()["ownerVisible"]) == (False, True)
    assert (await owner.client.post(claim_path, json={"token": token})).status_code == 200  # again: no-op
    assert_problem(
        await other.client.post(claim_path, json={"token": token}), 404, "registration_draft_not_found"
    )
    # Claimed, under review: no kit, no agent, no credentials yet.
    status = (await client.get(status_path, headers=h)).json()
    assert (status["status"], status["ownerVisible"], status["runtimeKit"]) == ("CLAIMED", True, None)
    assert (await owner.client.get("/agents/dashboard/mine")).json()["total"] == 0

    assert_problem(await other.client.post(activate_path, json={"token": token, "runtimeTarget": "MCP"}), 404)
    assert_problem(
        await owner.client.post(activate_path, json={"token": "rgt_wrong", "runtimeTarget": "MCP"}),
        422,
        "token_mismatch",
    )
    done = await owner.client.post(
        activate_path, json={"token": token, "runtimeTarget": "GENERIC_HTTP", "approveSellerListing": True}
    )
    assert done.status_code == 201, done.text
    body = done.json()
    assert body["draft"]["status"] == "ACTIVATED" and body["activation"]["source"] == "registration_draft"
    assert any("no-such-tag" in a for a in body["nextActions"])
    me = (await client.get("/api/v2/agents/me", headers=key_headers(body["key"]))).json()
    assert (me["name"], me["handle"], me["ownerId"]) == ("Draft Bot", manifest["handle"], owner.user_id)
    assert me["capabilities"] == ["python"] and me["endpointUrl"] == manifest["endpointUrl"]
    assert me["bountyProfile"]["workerEnabled"] is True and me["bountyProfile"]["requesterEnabled"] is False

    status = (await client.get(status_path, headers=h)).json()
    assert status["status"] == "ACTIVATED" and status["agentId"] == me["id"]
    assert status["runtimeKit"]["env"]["CALLBOARD_API_KEY"] == runtime_kits.KEY_PLACEHOLDER
    exchanged = await client.post(
        "/api/onboarding/install-token/exchange", json={"token": install_token_of(body["installCommand"])}
    )
    assert exchanged.status_code == 200, exchanged.text
    assert exchanged.json()["source"] == "registration_draft"
    assert_problem(
        await client.post(f"/api/agent/register/{slug}/setup", json={"role": "BOTH"}, headers=h),
        409,
        "draft_closed",
    )


async def test_draft_claim_can_link_an_existing_agent(app: Any, core: Any, client: Any) -> None:
    made = (await client.post("/api/agent/register/manifest", json={"manifest": {"name": "Linked"}})).json()
    owner = await new_owner(app, core)
    existing = await new_agent(owner)
    claimed = await owner.client.post(
        f"/api/agent/register/{made['slug']}/claim", json={"token": made["token"], "agentId": existing.id}
    )
    assert claimed.status_code == 200 and claimed.json()["draft"]["linkedAgentId"] == existing.id
    done = await owner.client.post(
        f"/api/agent/register/{made['slug']}/activate",
        json={"token": made["token"], "runtimeTarget": "MCP", "enableBuyer": False},
    )
    assert done.status_code == 201, done.text
    assert done.json()["activation"]["agentId"] == existing.id
    me = (await client.get("/api/v2/agents/me", headers=key_headers(done.json()["key"]))).json()
    assert me["id"] == existing.id and me["bountyProfile"]["requesterEnabled"] is False
    assert (await owner.client.get("/agents/dashboard/mine")).json()["total"] == 1


async def test_manifest_must_be_a_bounded_object(client: Any) -> None:
    for body in ({}, {"manifest": "text"}, {"manifest": [1]}, {"manifest": {"pad": "x" * 70_000}}):
        assert_problem(await client.post("/api/agent/register/manifest", json=body), 422)


async def test_spend_caps_are_checked_as_resolved(app: Any, core: Any, client: Any) -> None:
    """The per-task cap may not exceed the daily cap wherever either comes from: a per-task cap alone runs
    into the safe default (0 a day: no spending), and a daily cap below the agent's proposed per-task cap
    (900) is refused on the field the owner sent. Nothing is activated by a refusal."""
    owner = await new_owner(app, core)
    _, session_id = await onboarded(owner, client)
    path = f"/api/onboarding/sessions/{session_id}/activate"
    alone = await owner.client.post(path, json={"runtimeTarget": "MCP", "maxSpendCentsPerTask": 10})
    error = assert_problem(alone, 422)["errors"][0]
    assert (error["field"], error["code"]) == ("maxSpendCentsPerTask", "exceeds_daily_cap")
    assert "by default: no spending" in error["message"]
    below = await owner.client.post(
        path, json={"runtimeTarget": "MCP", "activationMode": "ADVANCED", "maxSpendCentsPerDay": 500}
    )
    error = assert_problem(below, 422)["errors"][0]
    assert (error["field"], error["code"]) == ("maxSpendCentsPerDay", "exceeds_daily_cap")
    assert "agent's proposal" in error["message"]
    done = await activate(owner, session_id, activationMode="ADVANCED", maxSpendCentsPerDay=900)
    assert (done["activation"]["maxSpendCentsPerTask"], done["activation"]["maxSpendCentsPerDay"]) == (
        900,
        900,
    )
