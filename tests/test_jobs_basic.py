"""The job lifecycle's happy path, step by step, over HTTP."""

from __future__ import annotations

from typing import Any

import orjson

from tests.jobs_helpers import (
    create_published,
    job_body,
    new_agent,
    new_owner,
    overbooked,
    submit_body,
    to_review,
    travel,
)


async def test_post_apply_admit_ack_submit_award(app: Any, core: Any, client: Any, frozen_clock: Any) -> None:
    alice, bob = await new_owner(app, core), await new_owner(app, core)
    requester = await new_agent(alice)
    worker = await new_agent(bob)
    job = await create_published(requester, client)
    assert job["status"] == "ADMISSION_OPEN"

    listed = await client.get("/api/v2/jobs", headers=worker.h)
    assert listed.status_code == 200, listed.text
    assert [j["id"] for j in listed.json()["jobs"]] == [job["id"]]
    preview = await client.get(f"/api/v2/jobs/{job['id']}", headers=worker.h)
    assert preview.status_code == 200, preview.text
    assert preview.json()["briefUnlocked"] is False and "workBriefJson" not in preview.json()["job"]

    applied = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=worker.h)
    assert applied.status_code == 201, applied.text
    run = await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    assert run.status_code == 200, run.text
    assert run.json()["status"] == "IN_PROGRESS"
    slots = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)).json()[
        "slots"
    ]
    assert len(slots) == 1 and slots[0]["status"] == "GRANTED"
    slot_id = slots[0]["id"]
    ack = await client.post(f"/api/v2/participation-slots/{slot_id}/acknowledge", headers=worker.h)
    assert ack.status_code == 200, ack.text
    full = (await client.get(f"/api/v2/jobs/{job['id']}", headers=worker.h)).json()
    assert full["briefUnlocked"] is True and full["job"]["workBriefJson"] == {"secret": "the brief"}

    sub = await client.post(
        f"/api/v2/participation-slots/{slot_id}/submit", json=submit_body(), headers=worker.h
    )
    assert sub.status_code == 201, sub.text
    assert sub.json()["jobStatus"] == "IN_REVIEW"
    packets = await client.get(f"/api/v2/jobs/{job['id']}/review-packets", headers=requester.h)
    assert packets.status_code == 200, packets.text
    assert packets.json()["packets"][0]["payloadPreview"]["summary"] == "Done"
    awarded = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": sub.json()["id"]}, headers=requester.h
    )
    assert awarded.status_code == 200, awarded.text
    artifact = await client.get(
        f"/api/v2/awards/{awarded.json()['award']['id']}/released-artifact", headers=requester.h
    )
    assert artifact.status_code == 200, artifact.text
    assert artifact.json()["structuredPayloadJson"]["answer"] == "The full answer."
    status = await client.get(f"/api/v2/submissions/{sub.json()['id']}/status", headers=worker.h)
    assert status.json()["status"] == "AWARDED"
    events = (await client.get(f"/api/v2/jobs/{job['id']}/events", headers=requester.h)).json()["events"]
    assert [e["kind"] for e in events][:3] == ["created", "published", "application_received"]
    assert not any((await travel(core, hours=1)).values())  # the sweeper finds nothing left to move


async def test_search_finds_by_text_on_both_namings(app: Any, core: Any, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    job = await create_published(requester, client, title="Translate the Quarterly memo")
    await create_published(requester, client, title="Something else")
    for path in ("/api/v2/jobs/search", "/api/v2/bounties/search"):
        found = await client.get(path, params={"q": "quarterly"}, headers=worker.h)
        assert found.status_code == 200, found.text
        assert [j["id"] for j in found.json()["jobs"]] == [job["id"]]


async def test_home_is_never_stale(app: Any, core: Any, client: Any) -> None:
    """home is read through the cache on SQLite: every commit must show in the very next read."""
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    job = await create_published(requester, client)
    assert (await client.get("/api/v2/home", headers=worker.h)).json()["obligations"] == []
    await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=worker.h)
    await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    first = (await client.get("/api/v2/home", headers=worker.h)).json()
    assert [o["kind"] for o in first["obligations"]] == ["ACKNOWLEDGE_SLOT"]
    assert first["unreadNotifications"] == 1
    await client.post(first["obligations"][0]["path"], headers=worker.h)
    second = (await client.get("/api/v2/home", headers=worker.h)).json()
    assert [o["kind"] for o in second["obligations"]] == ["SUBMIT_WORK"]
    assert second["obligations"][0]["deadlineAt"] is not None


async def test_discovery_follows_a_change_of_capabilities_at_once(app: Any, core: Any, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core), capabilities=["python"])
    job = await create_published(requester, client, capabilitySlug="translation")
    assert (await client.get("/api/v2/jobs", headers=worker.h)).json()["jobs"] == []
    r = await client.patch(
        "/api/v2/agents/me", json={"capabilities": ["python", "translation"]}, headers=worker.h
    )
    assert r.status_code == 200, r.text
    listed = (await client.get("/api/v2/jobs", headers=worker.h)).json()["jobs"]
    assert [(j["id"], j["rookie"]) for j in listed] == [(job["id"], False)]


async def test_discovery_pages_merge_every_tag_newest_first(app: Any, core: Any, client: Any) -> None:
    """Each of the worker's tags is read as its own index range and merged: the pages, followed by cursor, give
    exactly the jobs in its tags and the untagged ones, newest first, each once; rookie mode adds the rest."""
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core), capabilities=["python", "translation"])
    posted = []
    for slug in ["python", "rust", "translation", None, "python", "go", "translation", "python", None]:
        posted.append((slug, (await create_published(requester, client, capabilitySlug=slug))["id"]))
    mine = [job_id for slug, job_id in reversed(posted) if slug in ("python", "translation", None)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/api/v2/jobs", params=params, headers=worker.h)).json()
        assert len(page["jobs"]) <= 2 and all(not j["rookie"] for j in page["jobs"])
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == mine
    everything = (
        await client.get("/api/v2/jobs", params={"include": "rookie", "limit": 50}, headers=worker.h)
    ).json()["jobs"]
    assert [(j["id"], j["rookie"]) for j in everything] == [
        (job_id, slug in ("rust", "go")) for slug, job_id in reversed(posted)
    ]
    one_tag = (
        await client.get("/api/v2/jobs", params={"capability": "translation"}, headers=worker.h)
    ).json()
    assert [j["id"] for j in one_tag["jobs"]] == [
        job_id for slug, job_id in reversed(posted) if slug == "translation"
    ]


async def test_discovery_page_is_the_models_own_json(app: Any, core: Any, client: Any) -> None:
    """The page is assembled from each preview's memoised JSON: byte for byte what the JobList model gives."""
    from callboard_core.guidance import rendering
    from callboard_core.jobs import schemas as js
    from http_api.guidance import HTTP

    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core), capabilities=["python"])
    for slug in ["python", "rust", None]:
        await create_published(
            requester, client, capabilitySlug=slug, previewJson={"pages": 3, "ü": [1.5, None]}
        )
    for params in ({"limit": 1}, {"include": "rookie"}):
        raw = await client.get("/api/v2/jobs", params=params, headers=worker.h)
        assert raw.status_code == 200 and raw.headers["content-type"] == "application/json"
        data = orjson.loads(raw.content)
        for job in data["jobs"]:  # each names its apply route; read back in the core's neutral terms
            action = job["nextAction"]
            assert (action["method"], action["path"]) == ("POST", f"/api/v2/jobs/{job['id']}/applications")
            job["nextAction"] = {
                "act": "APPLY",
                "args": {"job_id": job["id"]},
                "description": action["description"],
            }
        model = js.JobList.model_validate(data)
        with rendering(HTTP):
            assert raw.content == js.JobList.__pydantic_serializer__.to_json(model, by_alias=True)
        assert model.jobs and (model.next_cursor is not None) == ("limit" in params)


async def test_sweeper_lapses_invitations_one_by_one(
    app: Any, core: Any, client: Any, frozen_clock: Any
) -> None:
    """At admissionClosesAt unanswered invitations expire: a Direct Hire whose offer lapsed is cancelled and
    its requester told; an ordinary invitation lapses with the close and its worker is told. A second pass
    finds nothing left."""
    requester = await new_agent(await new_owner(app, core))
    hired, invited = await new_agent(await new_owner(app, core)), await new_agent(await new_owner(app, core))
    draft = await client.post(
        "/api/v2/jobs", json=job_body(directHireWorkerAgentId=hired.id, participantCap=1), headers=requester.h
    )
    assert draft.status_code == 201, draft.text
    direct = await client.post(f"/api/v2/jobs/{draft.json()['id']}/publish", headers=requester.h)
    assert direct.json()["status"] == "PENDING_ACCEPTANCE"
    job = await create_published(requester, client)
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/invitations", json={"workerAgentId": invited.id}, headers=requester.h
    )
    assert r.status_code == 201, r.text

    counts = await travel(core, hours=1, minutes=1)
    assert counts["invitations"] == 2 and counts["admission"] == 1, counts
    cancelled = (await client.get(f"/api/v2/jobs/{direct.json()['id']}", headers=requester.h)).json()["job"]
    assert cancelled["status"] == "CANCELLED"
    for worker in (hired, invited):
        mine = (await client.get("/api/v2/invitations/mine", headers=worker.h)).json()["invitations"]
        assert mine == []  # nothing pending is left to answer
        titles = [
            n["title"]
            for n in (await client.get("/api/v2/agent-notifications", headers=worker.h)).json()[
                "notifications"
            ]
        ]
        assert any(t.startswith("Invitation expired") for t in titles), titles
    titles = [
        n["title"]
        for n in (await client.get("/api/v2/agent-notifications", headers=requester.h)).json()[
            "notifications"
        ]
    ]
    assert any(t.startswith("Direct Hire expired") for t in titles), titles
    assert not any((await travel(core, minutes=1)).values())


async def test_inviting_a_worker_twice_is_refused_and_holds_no_second_place(
    app: Any, core: Any, client: Any
) -> None:
    """The second invitation of one worker to one job: 409 already_invited (the unique key decides, no
    savepoint), one invitation, and the place the refused one took is released with its transaction."""
    owner = await new_owner(app, core)
    requester = await new_agent(owner)
    worker = await new_agent(await new_owner(app, core))
    job = await create_published(requester, client, participantCap=3)
    path = f"/api/v2/jobs/{job['id']}/invitations"
    first = await client.post(path, json={"workerAgentId": worker.id}, headers=requester.h)
    assert first.status_code == 201, first.text
    again = await client.post(path, json={"workerAgentId": worker.id}, headers=requester.h)
    assert again.status_code == 409 and again.json()["code"] == "already_invited", again.text
    listed = (await client.get(path, headers=requester.h)).json()
    assert [i["id"] for i in listed["invitations"]] == [first.json()["id"]]
    held = (await owner.client.get(f"/api/v2/owner/jobs/{job['id']}")).json()
    assert held["reservedParticipants"] == 1, held


async def test_an_award_records_whether_the_winner_was_a_rookie_on_the_jobs_capability(
    app: Any, core: Any, client: Any
) -> None:
    """rookieWin: the winner applied without the job's capability tag (read with the submission)."""
    requester = await new_agent(await new_owner(app, core))
    rookie = await new_agent(await new_owner(app, core), capabilities=["sql"])
    seasoned = await new_agent(await new_owner(app, core))  # holds "python", the job's tag
    for worker, expected in ((rookie, True), (seasoned, False)):
        job = await create_published(requester, client)
        submission = await to_review(client, job["id"], requester, worker)
        r = await client.post(
            f"/api/v2/jobs/{job['id']}/award", json={"submissionId": submission}, headers=requester.h
        )
        assert r.status_code == 200, r.text
        assert r.json()["award"]["rookieWin"] is expected, r.json()["award"]


async def test_an_admission_tells_each_applicant_once_whatever_the_outcome(
    app: Any, core: Any, client: Any
) -> None:
    """Two places, three applicants: two admitted, one not; each hears once about this job (the
    transaction's agent notifications are written together at its end)."""
    _, workers, job, _ = await overbooked(app, core, client)
    heard = []
    for worker in workers:
        notes = (await client.get("/api/v2/agent-notifications", headers=worker.h)).json()["notifications"]
        about = [n["title"].split(":")[0] for n in notes if n.get("jobId") == job["id"]]
        assert len(about) == 1, about
        heard += about
    assert sorted(heard) == ["Waitlisted", "You were admitted", "You were admitted"], heard
