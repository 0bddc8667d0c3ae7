"""The whole loop over HTTP with two owners and three agents: an expired slot re-offered to a rookie who
wins and earns the tag, an invitation, a Direct Hire, owner mirrors and the bounty naming. Runs on SQLite
and PostgreSQL; time moves with the frozen clock and the sweeper, as the background worker would move it."""

from __future__ import annotations

from typing import Any

from tests.jobs_helpers import create_published, job_body, new_agent, new_owner, submit_body, travel


async def _slot_of(client: Any, worker: Any, job_id: str) -> dict[str, Any]:
    slots = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)).json()[
        "slots"
    ]
    mine = [s for s in slots if s["jobId"] == job_id]
    assert mine, slots
    return dict(mine[0])


async def test_whole_loop(app: Any, core: Any, client: Any, frozen_clock: Any) -> None:
    alice, bob = await new_owner(app, core), await new_owner(app, core)
    requester = await new_agent(alice, capabilities=["python"])
    tagged = await new_agent(bob, capabilities=["python"])
    rookie = await new_agent(bob, capabilities=["translation"])

    # --- job A: one place; the tagged worker is admitted, misses its acknowledgement; the rookie gets it ---
    job = await create_published(requester, client, participantCap=1)
    default_view = (await client.get("/api/v2/jobs", headers=rookie.h)).json()["jobs"]
    assert job["id"] not in [j["id"] for j in default_view]  # outside the rookie's tags
    rookie_view = (await client.get("/api/v2/bounties?include=rookie", headers=rookie.h)).json()["jobs"]
    assert [j["rookie"] for j in rookie_view if j["id"] == job["id"]] == [True]
    assert (
        await client.post(f"/api/v2/bounties/{job['id']}/applications", headers=rookie.h)
    ).status_code == 201
    assert (await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=tagged.h)).status_code == 201
    # The requester's own owner cannot apply with another of its agents.
    own = await new_agent(alice)
    refused = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=own.h)
    assert refused.status_code == 403 and refused.json()["code"] == "own_job"

    moved = await travel(core, hours=1, seconds=1)  # admission closes by itself
    assert moved["admission"] == 1
    first = await _slot_of(client, tagged, job["id"])
    assert first["status"] == "GRANTED"
    apps = (await client.get("/api/v2/worker-agents/me/applications", headers=rookie.h)).json()[
        "applications"
    ]
    assert apps[0]["status"] == "WAITLISTED" and apps[0]["rookie"] is True
    home = (await client.get("/api/v2/home", headers=tagged.h)).json()
    assert home["obligations"][0]["kind"] == "ACKNOWLEDGE_SLOT"
    assert home["obligations"][0]["path"] == f"/api/v2/participation-slots/{first['id']}/acknowledge"

    moved = await travel(core, hours=1, seconds=1)  # the tagged worker never acknowledges
    assert moved["acknowledgement"] == 1
    assert (await _slot_of(client, tagged, job["id"]))["status"] == "EXPIRED"
    second = await _slot_of(client, rookie, job["id"])
    assert second["status"] == "GRANTED"
    late = await client.post(f"/api/v2/participation-slots/{first['id']}/acknowledge", headers=tagged.h)
    assert late.status_code == 409
    ack = await client.post(f"/api/v2/participation-slots/{second['id']}/acknowledge", headers=rookie.h)
    assert ack.status_code == 200, ack.text
    bad = await client.post(
        f"/api/v2/participation-slots/{second['id']}/submit",
        json=submit_body(structuredPayloadJson={"summary": "no answer"}),
        headers=rookie.h,
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "structuredPayloadJson.answer"
    sub = await client.post(
        f"/api/v2/participation-slots/{second['id']}/submit", json=submit_body(), headers=rookie.h
    )
    assert sub.status_code == 201, sub.text
    assert sub.json()["jobStatus"] == "IN_REVIEW"
    # The owner mirror sees the same packets and awards for the requester.
    packets = (await alice.client.get(f"/api/v2/owner/bounties/{job['id']}/review-packets")).json()["packets"]
    assert [p["rookie"] for p in packets] == [True]
    won = await alice.client.post(
        f"/api/v2/owner/jobs/{job['id']}/award", json={"submissionId": sub.json()["id"]}
    )
    assert won.status_code == 200, won.text
    again = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": sub.json()["id"]}, headers=requester.h
    )
    assert again.status_code == 409
    me = (await client.get("/api/v2/agents/me", headers=rookie.h)).json()
    assert "python" in me["capabilities"] and me["totalTasks"] == 1  # the rookie's win earned the tag
    outcomes = (await bob.client.get(f"/api/v2/owner/worker-agents/{rookie.id}/outcomes")).json()["outcomes"]
    assert outcomes[0]["outcome"] == "WON"

    # --- job B: an invitation holds a place; the invited worker accepts, submits; no award ---
    job_b = await create_published(requester, client, participantCap=1)
    inv = await client.post(
        f"/api/v2/jobs/{job_b['id']}/invitations", json={"workerAgentId": tagged.id}, headers=requester.h
    )
    assert inv.status_code == 201, inv.text
    full = await client.post(
        f"/api/v2/jobs/{job_b['id']}/invitations", json={"workerAgentId": rookie.id}, headers=requester.h
    )
    assert full.status_code == 409 and full.json()["code"] == "participant_cap_reached"
    mine = (await client.get("/api/v2/invitations/mine", headers=tagged.h)).json()["invitations"]
    assert [i["id"] for i in mine] == [inv.json()["id"]]
    accepted = await client.post(
        f"/api/v2/invitations/{inv.json()['id']}/respond", json={"decision": "ACCEPT"}, headers=tagged.h
    )
    assert accepted.status_code == 200, accepted.text
    slot_b = accepted.json()["slotId"]
    await client.post(f"/api/v2/jobs/{job_b['id']}/admission/run", headers=requester.h)
    assert (
        await client.post(f"/api/v2/participation-slots/{slot_b}/acknowledge", headers=tagged.h)
    ).status_code == 200
    assert (
        await client.post(
            f"/api/v2/participation-slots/{slot_b}/submit", json=submit_body(), headers=tagged.h
        )
    ).status_code == 201
    closed = await client.post(
        f"/api/v2/jobs/{job_b['id']}/no-award",
        json={"reasonCode": "NO_ACCEPTABLE_SUBMISSIONS"},
        headers=requester.h,
    )
    assert closed.status_code == 200 and closed.json()["status"] == "NO_AWARD"

    # --- job C: a Direct Hire, accepted by its named worker ---
    r = await client.post(
        "/api/v2/jobs",
        json=job_body(directHireWorkerAgentId=rookie.id, participantCap=1),
        headers=requester.h,
    )
    assert r.status_code == 201, r.text
    hire = await client.post(f"/api/v2/jobs/{r.json()['id']}/publish", headers=requester.h)
    assert hire.json()["status"] == "PENDING_ACCEPTANCE"
    assert hire.json()["id"] not in [
        j["id"] for j in (await client.get("/api/v2/jobs?include=rookie", headers=tagged.h)).json()["jobs"]
    ]
    offer = (await client.get("/api/v2/invitations/mine", headers=rookie.h)).json()["invitations"][0]
    yes = await bob.client.post(
        f"/api/v2/owner/invitations/{offer['id']}/respond", json={"decision": "ACCEPT"}
    )
    assert yes.status_code == 200, yes.text
    job_c = (await client.get(f"/api/v2/jobs/{hire.json()['id']}", headers=requester.h)).json()["job"]
    assert job_c["status"] == "IN_PROGRESS"

    # --- job D: a Direct Hire cancelled before acceptance ---
    r = await client.post(
        "/api/v2/jobs",
        json=job_body(directHireWorkerAgentId=tagged.id, participantCap=1),
        headers=requester.h,
    )
    await client.post(f"/api/v2/jobs/{r.json()['id']}/publish", headers=requester.h)
    cancelled = await client.post(f"/api/v2/jobs/{r.json()['id']}/cancel-direct-hire", headers=requester.h)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    assert (await client.get("/api/v2/invitations/mine", headers=tagged.h)).json()["invitations"] == []

    # Notifications reached the agents the events concerned.
    notes = (await client.get("/api/v2/agent-notifications", headers=rookie.h)).json()
    kinds = {n["type"] for n in notes["notifications"]}
    assert {"slot_reoffered", "awarded", "invitation_sent"} <= kinds
    marked = await client.post(
        "/api/v2/agent-notifications/read",
        json={"ids": [n["id"] for n in notes["notifications"]] + ["ntf_not_mine"]},
        headers=rookie.h,
    )
    assert marked.json()["updated"] == len(notes["notifications"])
