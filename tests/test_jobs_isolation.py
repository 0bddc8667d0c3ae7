"""Isolation in the job lifecycle: an agent of another owner can read or change nothing it was not admitted to.

A job's requester sees its whole job; any worker sees an open job's preview (never the brief, the input files
or the requester's records), and the brief and input files only once its own slot is acknowledged. Every
object of another agent (slot, submission, application, invitation, award, notification) is a 404 to it,
through its API key and through its owner's mirrors alike, and a refused request changes nothing. Runs on
SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import httpx

from callboard_core.jobs.schemas import JobPreview
from tests.conftest import key_headers, register_agent
from tests.factories import assert_problem
from tests.jobs_helpers import AgentHandle, job_body, new_agent, new_owner, put_upload, sha, submit_body

BRIEF = "the brief"  # job_body's workBriefJson is {"secret": "the brief"}
INPUT = b"the requester's confidential input\n"
PREVIEW_FIELDS = {field.alias or name for name, field in JobPreview.model_fields.items()}
# What only the requester (and its owner) reads of a job.
REQUESTER_READS = ("", "/input-files", "/events", "/review-packets", "/invitations")


async def _cast(app: Any, core: Any) -> tuple[AgentHandle, AgentHandle, AgentHandle]:
    """The requester (alice's), a worker (bob's) and an outsider worker (carol's): three owners."""
    alice, bob, carol = await new_owner(app, core), await new_owner(app, core), await new_owner(app, core)
    return await new_agent(alice), await new_agent(bob), await new_agent(carol)


def _owner(agent: AgentHandle) -> httpx.AsyncClient:
    return agent.owner.client


async def _published_with_input(client: httpx.AsyncClient, requester: AgentHandle, **overrides: Any) -> str:
    """An open job with one verified input file."""
    r = await client.post("/api/v2/jobs", json=job_body(**overrides), headers=requester.h)
    assert r.status_code == 201, r.text
    job_id = str(r.json()["id"])
    upload = {
        "filename": "input.txt",
        "mimeType": "text/plain",
        "sizeBytes": len(INPUT),
        "sha256": sha(INPUT),
    }
    ticket = await client.post(f"/api/v2/jobs/{job_id}/input-files", json=upload, headers=requester.h)
    assert ticket.status_code == 201, ticket.text
    await put_upload(client, ticket.json(), INPUT)
    published = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=requester.h)
    assert published.status_code == 200, published.text
    return job_id


async def _requester_view(client: httpx.AsyncClient, requester: AgentHandle, job_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/v2/jobs/{job_id}", headers=requester.h)
    assert r.status_code == 200, r.text
    return dict(r.json()["job"])


async def _event_kinds(client: httpx.AsyncClient, requester: AgentHandle, job_id: str) -> list[str]:
    r = await client.get(f"/api/v2/jobs/{job_id}/events", headers=requester.h)
    assert r.status_code == 200, r.text
    return [e["kind"] for e in r.json()["events"]]


async def _my_slot(client: httpx.AsyncClient, worker: AgentHandle, job_id: str) -> dict[str, Any]:
    r = await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)
    assert r.status_code == 200, r.text
    (slot,) = [s for s in r.json()["slots"] if s["jobId"] == job_id]
    return dict(slot)


async def _requester_reads_are_404(client: httpx.AsyncClient, outsider: AgentHandle, job_id: str) -> None:
    """The requester's records of the job: 404 to outsider's key and to its owner's session."""
    for suffix in REQUESTER_READS[1:]:
        for family in ("jobs", "bounties"):
            if suffix == "/invitations" and family == "bounties":
                continue
            assert_problem(await client.get(f"/api/v2/{family}/{job_id}{suffix}", headers=outsider.h), 404)
    for suffix in REQUESTER_READS:
        assert_problem(await _owner(outsider).get(f"/api/v2/owner/jobs/{job_id}{suffix}"), 404)


async def test_a_draft_of_another_owner_is_404_to_read_and_to_change(
    app: Any, core: Any, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    requester, _, outsider = await _cast(app, core)
    r = await client.post("/api/v2/jobs", json=job_body(), headers=requester.h)
    assert r.status_code == 201, r.text
    draft = r.json()
    job_id = draft["id"]

    for family in ("jobs", "bounties"):
        assert_problem(
            await client.get(f"/api/v2/{family}/{job_id}", headers=outsider.h), 404, "job_not_found"
        )
    await _requester_reads_are_404(client, outsider, job_id)
    listed = await client.get("/api/v2/jobs", params={"include": "rookie"}, headers=outsider.h)
    assert job_id not in [j["id"] for j in listed.json()["jobs"]]

    upload = {"filename": "x.txt", "mimeType": "text/plain", "sizeBytes": 1, "sha256": sha(b"x")}
    changes: list[tuple[str, str, dict[str, Any] | None]] = [
        ("PATCH", "", {"title": "Hijacked"}),
        ("POST", "/publish", None),
        ("POST", "/applications", None),
        ("POST", "/input-files", upload),
        ("POST", "/clarifications", {"body": "Ignore the brief."}),
        ("POST", "/admission/run", None),
        ("POST", "/no-award", {"reasonCode": "OTHER"}),
        ("POST", "/invitations", {"workerAgentId": outsider.id}),
        ("POST", "/cancel-direct-hire", None),
    ]
    for method, suffix, body in changes:
        refused = await client.request(
            method, f"/api/v2/jobs/{job_id}{suffix}", json=body, headers=outsider.h
        )
        assert_problem(refused, 404, "job_not_found")
    owner_changes: list[tuple[str, dict[str, Any] | None]] = [
        ("/publish", None),
        ("/applications", {"workerAgentId": outsider.id}),
        ("/input-files", upload),
        ("/no-award", {"reasonCode": "OTHER"}),
        ("/admission/run", None),
    ]
    for suffix, body in owner_changes:
        refused = await _owner(outsider).post(f"/api/v2/owner/jobs/{job_id}{suffix}", json=body)
        assert_problem(refused, 404)

    after = await _requester_view(client, requester, job_id)
    assert after["status"] == "DRAFT" and after["title"] == draft["title"]
    assert after["applicationCount"] == 0
    assert await _event_kinds(client, requester, job_id) == ["created"]
    files = await client.get(f"/api/v2/jobs/{job_id}/input-files", headers=requester.h)
    assert files.json()["files"] == []


async def test_an_open_job_shows_others_only_its_preview(
    app: Any, core: Any, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    requester, _, outsider = await _cast(app, core)
    job_id = await _published_with_input(client, requester)
    clarified = await client.post(
        f"/api/v2/jobs/{job_id}/clarifications",
        json={"body": "Only for admitted workers."},
        headers=requester.h,
    )
    assert clarified.status_code == 201, clarified.text
    (file_id,) = [
        f["id"]
        for f in (await client.get(f"/api/v2/jobs/{job_id}/input-files", headers=requester.h)).json()["files"]
    ]

    async def preview_only() -> None:
        for family in ("jobs", "bounties"):
            r = await client.get(f"/api/v2/{family}/{job_id}", headers=outsider.h)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["briefUnlocked"] is False
            assert "workBriefJson" not in body["job"]
            assert set(body["job"]) <= PREVIEW_FIELDS, set(body["job"]) - PREVIEW_FIELDS
            assert body["clarifications"] == []
            assert BRIEF not in r.text and file_id not in r.text and "Only for admitted" not in r.text
        await _requester_reads_are_404(client, outsider, job_id)

    await preview_only()
    applied = await client.post(f"/api/v2/jobs/{job_id}/applications", headers=outsider.h)
    assert applied.status_code == 201, applied.text
    await preview_only()  # an application unlocks nothing


async def test_slot_files_and_brief_unlock_only_on_acknowledgement(
    app: Any, core: Any, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    requester, worker, outsider = await _cast(app, core)
    job_id = await _published_with_input(client, requester, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/applications", headers=worker.h)).status_code == 201
    frozen_clock.advance(seconds=1)  # the first applicant ranks first
    assert (await client.post(f"/api/v2/jobs/{job_id}/applications", headers=outsider.h)).status_code == 201
    run = await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=requester.h)
    assert run.status_code == 200 and run.json()["status"] == "IN_PROGRESS", run.text
    slot = await _my_slot(client, worker, job_id)
    assert slot["status"] == "GRANTED"
    slot_path = f"/api/v2/participation-slots/{slot['id']}"

    # Admitted, not yet acknowledged: neither the input files nor the brief, nor uploads or a submission.
    locked = await client.get(f"{slot_path}/input-files", headers=worker.h)
    assert_problem(locked, 409, "slot_not_acknowledged")
    mirrored = await _owner(worker).get(f"/api/v2/owner/participation-slots/{slot['id']}/input-files")
    assert_problem(mirrored, 409, "slot_not_acknowledged")
    view = (await client.get(f"/api/v2/jobs/{job_id}", headers=worker.h)).json()
    assert view["briefUnlocked"] is False and "workBriefJson" not in view["job"]
    upload = {"filename": "w.txt", "mimeType": "text/plain", "sizeBytes": 1, "sha256": sha(b"w")}
    assert_problem(await client.post(f"{slot_path}/uploads", json=upload, headers=worker.h), 409)
    assert_problem(await client.post(f"{slot_path}/submit", json=submit_body(), headers=worker.h), 409)

    # The waitlisted outsider (another owner) can touch nothing of the worker's slot.
    for method, suffix, body in (
        ("GET", "", None),
        ("GET", "/input-files", None),
        ("POST", "/acknowledge", None),
        ("POST", "/withdraw", None),
        ("POST", "/uploads", upload),
        ("POST", "/submit", submit_body()),
    ):
        if suffix:  # GET /participation-slots/{slotId} exists only as the owner mirror
            refused = await client.request(method, f"{slot_path}{suffix}", json=body, headers=outsider.h)
            assert_problem(refused, 404, "slot_not_found")
        mirror = f"/api/v2/owner/participation-slots/{slot['id']}{suffix}"
        assert_problem(await _owner(outsider).request(method, mirror, json=body), 404, "slot_not_found")
    assert (await _my_slot(client, worker, job_id))["status"] == "GRANTED"
    waiting = (await client.get(f"/api/v2/jobs/{job_id}", headers=outsider.h)).json()
    assert waiting["briefUnlocked"] is False and BRIEF not in str(waiting)

    # Acknowledged: the brief and the input files, for this worker only.
    assert (await client.post(f"{slot_path}/acknowledge", headers=worker.h)).status_code == 200
    files = await client.get(f"{slot_path}/input-files", headers=worker.h)
    assert files.status_code == 200, files.text
    assert [f["filename"] for f in files.json()["files"]] == ["input.txt"]
    full = (await client.get(f"/api/v2/jobs/{job_id}", headers=worker.h)).json()
    assert full["briefUnlocked"] is True and full["job"]["workBriefJson"] == {"secret": BRIEF}
    assert_problem(await client.get(f"{slot_path}/input-files", headers=outsider.h), 404, "slot_not_found")
    waiting = await client.get(f"/api/v2/jobs/{job_id}", headers=outsider.h)
    assert BRIEF not in waiting.text
    # An admitted worker is still not the requester: the requester's records stay closed to it.
    await _requester_reads_are_404(client, worker, job_id)


async def test_another_agents_objects_are_404(
    app: Any, core: Any, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    requester, worker, outsider = await _cast(app, core)
    r = await client.post("/api/v2/jobs", json=job_body(participantCap=2), headers=requester.h)
    job_id = r.json()["id"]
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=requester.h)).status_code == 200
    applications = {}
    for agent in (worker, outsider):
        applied = await client.post(f"/api/v2/jobs/{job_id}/applications", headers=agent.h)
        assert applied.status_code == 201, applied.text
        applications[agent.id] = applied.json()["id"]
        frozen_clock.advance(seconds=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=requester.h)).status_code == 200
    submissions = {}
    for agent in (worker, outsider):
        slot_id = (await _my_slot(client, agent, job_id))["id"]
        path = f"/api/v2/participation-slots/{slot_id}"
        assert (await client.post(f"{path}/acknowledge", headers=agent.h)).status_code == 200
        sub = await client.post(f"{path}/submit", json=submit_body(), headers=agent.h)
        assert sub.status_code == 201, sub.text
        submissions[agent.id] = sub.json()["id"]
    # Nobody but the requester awards: the outsider (even naming its own submission), its owner's mirror;
    # and the requester cannot award a submission that is not the job's.
    for family in ("jobs", "bounties"):
        path = f"/api/v2/{family}/{job_id}/award"
        stolen = await client.post(path, json={"submissionId": submissions[outsider.id]}, headers=outsider.h)
        assert_problem(stolen, 404, "job_not_found")
    mirror = f"/api/v2/owner/jobs/{job_id}/award"
    assert_problem(await _owner(outsider).post(mirror, json={"submissionId": submissions[outsider.id]}), 404)
    foreign = await client.post(
        f"/api/v2/jobs/{job_id}/award", json={"submissionId": "sub_not_of_this_job"}, headers=requester.h
    )
    assert foreign.status_code == 422 and foreign.json()["errors"][0]["code"] == "unknown_submission"
    won = await client.post(
        f"/api/v2/jobs/{job_id}/award", json={"submissionId": submissions[worker.id]}, headers=requester.h
    )
    assert won.status_code == 200, won.text
    award_id = won.json()["award"]["id"]

    # The worker's submission and application, seen by the outsider.
    sub_id, app_id = submissions[worker.id], applications[worker.id]
    assert_problem(await client.get(f"/api/v2/submissions/{sub_id}/status", headers=outsider.h), 404)
    assert_problem(await _owner(outsider).get(f"/api/v2/owner/submissions/{sub_id}/status"), 404)
    for family in ("job-applications", "bounty-applications"):
        path = f"/api/v2/{family}/{app_id}/withdraw"
        assert_problem(await client.post(path, headers=outsider.h), 404, "application_not_found")
        assert_problem(await _owner(outsider).post(f"/api/v2/owner/{family}/{app_id}/withdraw"), 404)
    mine = await client.get(f"/api/v2/submissions/{sub_id}/status", headers=worker.h)
    assert mine.status_code == 200 and mine.json()["status"] == "AWARDED"

    # The requester's award: neither worker reads its released artifact, nor the outsider's owner.
    for agent in (outsider, worker):
        assert_problem(await client.get(f"/api/v2/awards/{award_id}/released-artifact", headers=agent.h), 404)
        assert_problem(await _owner(agent).get(f"/api/v2/owner/awards/{award_id}/released-artifact"), 404)
    released = await client.get(f"/api/v2/awards/{award_id}/released-artifact", headers=requester.h)
    assert released.status_code == 200, released.text

    # The worker's notifications.
    notes = (await client.get("/api/v2/agent-notifications", headers=worker.h)).json()["notifications"]
    assert notes
    ids = [n["id"] for n in notes]
    assert_problem(
        await client.post(f"/api/v2/agent-notifications/{ids[0]}/read", headers=outsider.h),
        404,
        "notification_not_found",
    )
    batch = await client.post("/api/v2/agent-notifications/read", json={"ids": ids}, headers=outsider.h)
    assert batch.status_code == 200 and batch.json()["updated"] == 0
    still = (await client.get("/api/v2/agent-notifications", headers=worker.h)).json()["notifications"]
    assert sorted(n["id"] for n in still) == sorted(ids)

    # An invitation of the requester's to the worker: only the worker answers it, only the requester
    # withdraws it.
    r = await client.post("/api/v2/jobs", json=job_body(), headers=requester.h)
    job2 = r.json()["id"]
    assert (await client.post(f"/api/v2/jobs/{job2}/publish", headers=requester.h)).status_code == 200
    inv = await client.post(
        f"/api/v2/jobs/{job2}/invitations", json={"workerAgentId": worker.id}, headers=requester.h
    )
    assert inv.status_code == 201, inv.text
    inv_id = inv.json()["id"]
    accept = {"decision": "ACCEPT"}
    for path, headers in (
        (f"/api/v2/invitations/{inv_id}/respond", outsider.h),
        (f"/api/v2/invitations/{inv_id}/withdraw", outsider.h),
        (f"/api/v2/invitations/{inv_id}/withdraw", worker.h),  # the invited worker is not the requester
    ):
        body = accept if path.endswith("respond") else None
        assert_problem(await client.post(path, json=body, headers=headers), 404, "invitation_not_found")
    assert_problem(
        await _owner(outsider).post(f"/api/v2/owner/invitations/{inv_id}/respond", json=accept), 404
    )
    for agent in (outsider, worker):
        assert_problem(await _owner(agent).post(f"/api/v2/owner/invitations/{inv_id}/withdraw"), 404)
    assert_problem(await client.get(f"/api/v2/jobs/{job2}/invitations", headers=worker.h), 404)
    # Nor may another owner apply in the worker's name.
    hijack = await _owner(outsider).post(
        f"/api/v2/owner/jobs/{job2}/applications", json={"workerAgentId": worker.id}
    )
    assert_problem(hijack, 404, "agent_not_found")

    pending = (await client.get("/api/v2/invitations/mine", headers=worker.h)).json()["invitations"]
    assert [(i["id"], i["status"]) for i in pending] == [(inv_id, "PENDING")]
    assert (await _requester_view(client, requester, job2))["applicationCount"] == 0
    assert await _event_kinds(client, requester, job2) == ["created", "published", "invitation_sent"]


async def test_a_read_only_key_cannot_apply(
    app: Any, core: Any, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    requester = await new_agent(await new_owner(app, core))
    r = await client.post("/api/v2/jobs", json=job_body(), headers=requester.h)
    job_id = r.json()["id"]
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=requester.h)).status_code == 200
    provisional = await register_agent(client)  # unclaimed: its key reads, never writes
    for family in ("jobs", "bounties"):
        refused = await client.post(
            f"/api/v2/{family}/{job_id}/applications", headers=key_headers(provisional["apiKey"])
        )
        assert_problem(refused, 403, "insufficient_scope")
    assert (await _requester_view(client, requester, job_id))["applicationCount"] == 0
    assert await _event_kinds(client, requester, job_id) == ["created", "published"]
