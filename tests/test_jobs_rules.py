"""Job rules a user meets: validation of the job, paid jobs refused, input files verified at publish,
uploads and deliverables withheld until award, the starter job, archive blocked by work in flight."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from callboard_core import clock
from tests.jobs_helpers import (
    create_published,
    iso,
    job_body,
    new_agent,
    new_owner,
    put_upload,
    sha,
    submit_body,
)


async def _admitted(client: Any, requester: Any, worker: Any, **overrides: Any) -> tuple[dict[str, Any], str]:
    job = await create_published(requester, client, **overrides)
    assert (await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=worker.h)).status_code == 201
    assert (
        await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    ).status_code == 200
    slot = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)).json()[
        "slots"
    ][0]
    return job, slot["id"]


async def test_job_validation_names_each_field(app: Any, core: Any, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    now = clock.now()
    r = await client.post(
        "/api/v2/jobs",
        headers=requester.h,
        json=job_body(
            admissionClosesAt=iso(now - timedelta(minutes=1)),
            reviewDeadlineAt=iso(now + timedelta(hours=2)),
            newWorkerReservedSlotCount=5,
            participantCap=2,
        ),
    )
    assert r.status_code == 422
    fields = {e["field"]: e["code"] for e in r.json()["errors"]}
    assert fields == {
        "admissionClosesAt": "in_past",
        "reviewDeadlineAt": "out_of_order",
        "newWorkerReservedSlotCount": "exceeds_cap",
    }
    r = await client.post(
        "/api/v2/jobs", headers=requester.h, json=job_body(fairWorkDurationMs=10 * 3600 * 1000)
    )
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "fairWorkDurationMs"
    r = await client.post("/api/v2/jobs", headers=requester.h, json=job_body(capabilitySlug="no-such-skill"))
    assert r.status_code == 422 and r.json()["errors"][0]["code"] == "unknown_capability"
    bounty = job_body(bountyTypeKey="nope")
    del bounty["jobTypeKey"]
    r = await client.post("/api/v2/bounties", headers=requester.h, json=bounty)
    assert r.status_code == 422 and r.json()["errors"][0]["code"] == "unknown_job_type"
    r = await client.post("/api/v2/jobs", headers=requester.h, json=job_body(participantCap=0, surprise=1))
    assert r.status_code == 422
    assert {e["field"] for e in r.json()["errors"]} >= {"participantCap", "surprise"}
    r = await client.post(
        "/api/v2/jobs", headers=requester.h, json=job_body(admissionClosesAt="2030-01-01T00:00:00")
    )
    assert r.status_code == 422  # a timestamp without a zone is ambiguous
    # Nothing was created by any refused request: the owner's own list (drafts included) is empty.
    owned = await requester.owner.client.get("/api/v2/owner/jobs")
    assert owned.status_code == 200 and owned.json()["jobs"] == []


async def test_unfunded_paid_job_is_refused_at_publish(app: Any, core: Any, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    r = await client.post("/api/v2/jobs", headers=requester.h, json=job_body(rewardAmountCents=5000))
    assert r.status_code == 201
    pub = await client.post(f"/api/v2/jobs/{r.json()['id']}/publish", headers=requester.h)
    assert pub.status_code == 409 and pub.json()["code"] == "payment_not_ready"
    # A new agent may publish nothing paid alone (autoPublishLimitCents 0), and its owner has no card or funds.
    assert pub.json()["missing"] == ["CONFIRMATION", "CARD", "BALANCE"]
    assert (await client.get(f"/api/v2/jobs/{r.json()['id']}", headers=requester.h)).json()["job"][
        "status"
    ] == "DRAFT"


async def test_input_files_verified_at_publish_and_unlocked_by_acknowledgement(
    app: Any, core: Any, client: Any, tmp_root: Path
) -> None:
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    draft = (await client.post("/api/v2/jobs", headers=requester.h, json=job_body())).json()
    data = b"quarterly numbers\n" * 100
    body = {"filename": "report.txt", "mimeType": "text/plain", "sizeBytes": len(data), "sha256": sha(data)}
    ticket = await client.post(f"/api/v2/jobs/{draft['id']}/input-files", headers=requester.h, json=body)
    assert ticket.status_code == 201, ticket.text
    missing = await client.post(f"/api/v2/jobs/{draft['id']}/publish", headers=requester.h)
    assert missing.status_code == 409 and missing.json()["code"] == "file_missing"
    await put_upload(client, ticket.json(), data)
    published = await client.post(f"/api/v2/jobs/{draft['id']}/publish", headers=requester.h)
    assert published.status_code == 200, published.text
    assert (
        await client.post(f"/api/v2/jobs/{draft['id']}/applications", headers=worker.h)
    ).status_code == 201
    await client.post(f"/api/v2/jobs/{draft['id']}/admission/run", headers=requester.h)
    slot = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)).json()[
        "slots"
    ][0]
    locked = await client.get(f"/api/v2/participation-slots/{slot['id']}/input-files", headers=worker.h)
    assert locked.status_code == 409 and locked.json()["code"] == "slot_not_acknowledged"
    await client.post(f"/api/v2/participation-slots/{slot['id']}/acknowledge", headers=worker.h)
    files = (
        await client.get(f"/api/v2/participation-slots/{slot['id']}/input-files", headers=worker.h)
    ).json()["files"]
    assert [f["filename"] for f in files] == ["report.txt"]
    got = await client.get(files[0]["downloadUrl"])
    assert got.status_code == 200 and got.content == data


async def test_changed_input_file_fails_publish(app: Any, core: Any, client: Any, tmp_root: Path) -> None:
    requester = await new_agent(await new_owner(app, core))
    draft = (await client.post("/api/v2/jobs", headers=requester.h, json=job_body())).json()
    data = b"original"
    ticket = (
        await client.post(
            f"/api/v2/jobs/{draft['id']}/input-files",
            headers=requester.h,
            json={"filename": "a.txt", "mimeType": "text/plain", "sizeBytes": len(data), "sha256": sha(data)},
        )
    ).json()
    await put_upload(client, ticket, data)
    # Storage changes behind the service's back (same size, other bytes): the re-hash at publish catches it.
    stored = [
        p
        for p in (Path(core.settings.var_dir) / "blobs").rglob("*")
        if p.is_file() and ticket["fileId"] in str(p)
    ]
    assert stored, "the local store keeps the object under the file's key"
    stored[0].write_bytes(b"tampered")
    r = await client.post(f"/api/v2/jobs/{draft['id']}/publish", headers=requester.h)
    assert r.status_code == 409 and r.json()["code"] == "file_mismatch"


async def test_deliverables_withheld_until_award(app: Any, core: Any, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    job, slot_id = await _admitted(client, requester, worker)
    early = await client.post(
        f"/api/v2/participation-slots/{slot_id}/uploads",
        headers=worker.h,
        json={"filename": "x.txt", "mimeType": "text/plain", "sizeBytes": 1, "sha256": sha(b"x")},
    )
    assert early.status_code == 409  # acknowledge first
    await client.post(f"/api/v2/participation-slots/{slot_id}/acknowledge", headers=worker.h)
    files = {}
    for role, name, data in (
        ("DELIVERABLE", "full.md", b"# the full work\n" * 50),
        ("PREVIEW", "peek.md", b"# peek\n"),
    ):
        t = (
            await client.post(
                f"/api/v2/participation-slots/{slot_id}/uploads",
                headers=worker.h,
                json={
                    "filename": name,
                    "mimeType": "text/markdown",
                    "sizeBytes": len(data),
                    "sha256": sha(data),
                },
            )
        ).json()
        await put_upload(client, t, data)
        files[role] = (t["uploadId"], data)
    sub = await client.post(
        f"/api/v2/participation-slots/{slot_id}/submit",
        headers=worker.h,
        json=submit_body(
            files=[
                {"uploadId": files["DELIVERABLE"][0], "role": "DELIVERABLE"},
                {"uploadId": files["PREVIEW"][0], "role": "PREVIEW"},
            ]
        ),
    )
    assert sub.status_code == 201, sub.text
    packet = (await client.get(f"/api/v2/jobs/{job['id']}/review-packets", headers=requester.h)).json()[
        "packets"
    ][0]
    assert packet["deliverableCount"] == 1
    assert [f["filename"] for f in packet["previewFiles"]] == ["peek.md"]
    assert files["DELIVERABLE"][0] not in str(packet)
    award = (
        await client.post(
            f"/api/v2/jobs/{job['id']}/award", headers=requester.h, json={"submissionId": sub.json()["id"]}
        )
    ).json()["award"]
    released = (
        await client.get(f"/api/v2/awards/{award['id']}/released-artifact", headers=requester.h)
    ).json()
    deliverable = next(f for f in released["files"] if f["role"] == "DELIVERABLE")
    assert (await client.get(deliverable["downloadUrl"])).content == files["DELIVERABLE"][1]
    # The worker cannot read the requester's released artifact.
    assert (
        await client.get(f"/api/v2/awards/{award['id']}/released-artifact", headers=worker.h)
    ).status_code == 404


async def test_starter_job_is_isolated_idempotent_and_auto_awarded(app: Any, core: Any, client: Any) -> None:
    worker = await new_agent(await new_owner(app, core))
    first = await client.post("/api/v2/agents/me/starter-job", headers=worker.h)
    assert first.status_code == 200, first.text
    again = await client.post("/api/v2/agents/me/starter-job", headers=worker.h)
    assert again.json()["job"]["id"] == first.json()["job"]["id"] and again.json()["created"] is False
    other = await new_agent(await new_owner(app, core))
    assert (await client.get("/api/v2/jobs?include=rookie", headers=other.h)).json()["jobs"] == []
    action = first.json()["nextAction"]
    done = await client.post(action["path"], headers=worker.h, json=submit_body())
    assert done.status_code == 201, done.text
    assert (await client.get(f"/api/v2/submissions/{done.json()['id']}/status", headers=worker.h)).json()[
        "status"
    ] == "AWARDED"
    me = (await client.get("/api/v2/agents/me", headers=worker.h)).json()
    assert me["totalTasks"] == 0  # practice counts toward nothing
    fresh = await client.post("/api/v2/agents/me/starter-job", headers=worker.h)
    assert fresh.json()["created"] is True and fresh.json()["job"]["id"] != first.json()["job"]["id"]


async def test_archive_is_blocked_while_work_is_in_flight(app: Any, core: Any, client: Any) -> None:
    owner = await new_owner(app, core)
    requester = await new_agent(owner)
    job = await create_published(requester, client)
    blocked = await owner.client.post(f"/agents/dashboard/{requester.id}/archive")
    assert blocked.status_code == 409
    assert [b["kind"] for b in blocked.json()["blockers"]] == ["ACTIVE_JOBS"]
    await client.post(f"/api/v2/jobs/{job['id']}/no-award", headers=requester.h, json={"reasonCode": "OTHER"})
    assert (await owner.client.post(f"/agents/dashboard/{requester.id}/archive")).status_code == 200
