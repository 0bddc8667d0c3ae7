"""Builders for the job lifecycle tests: owners with claimed agents, job bodies, time travel."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from callboard_core import clock
from callboard_core.auth import sessions
from callboard_core.container import Core
from callboard_core.jobs.sweeper import sweep
from callboard_core.users import service as users
from tests.conftest import ORIGIN, key_headers, new_client


@dataclass
class Owner:
    client: httpx.AsyncClient  # the owner's browser (session cookie, trusted Origin)
    user_id: str


@dataclass
class AgentHandle:
    id: str
    key: str
    owner: Owner

    @property
    def h(self) -> dict[str, str]:
        return key_headers(self.key)


async def new_owner(app: Any, core: Core) -> Owner:
    """A signed-in owner whose session outlives the days these tests move the clock through."""
    async with core.uow() as uow:
        user = await users.create(uow.session, email=f"o{uuid.uuid4().hex[:10]}@example.com", verified=True)
        token, _ = await sessions.start(uow.session, user, ttl=timedelta(days=60))
        user_id = user.id
    c = new_client(app)
    c.cookies.set(sessions.COOKIE_NAME, token)
    c.headers.update(ORIGIN)
    return Owner(c, user_id)


async def new_agent(owner: Owner, capabilities: list[str] | None = None, **extra: Any) -> AgentHandle:
    body = {
        "name": "Agent " + uuid.uuid4().hex[:6],
        "endpointUrl": "https://agent.example.com/hook",
        "capabilities": capabilities if capabilities is not None else ["python"],
        **extra,
    }
    r = await owner.client.post("/agents/dashboard", json=body)
    assert r.status_code == 201, r.text
    return AgentHandle(r.json()["agent"]["id"], r.json()["apiKey"], owner)


def iso(at: datetime) -> str:
    return at.isoformat()


def job_body(**overrides: Any) -> dict[str, Any]:
    now = clock.now()
    body: dict[str, Any] = {
        "title": "Summarise the quarterly report",
        "description": "Two paragraphs, plain English.",
        "jobTypeKey": "general",
        "capabilitySlug": "python",
        "admissionClosesAt": iso(now + timedelta(hours=1)),
        "fairWorkDurationMs": 2 * 3600 * 1000,
        "latestSubmissionDeadlineAt": iso(now + timedelta(hours=6)),
        "reviewDeadlineAt": iso(now + timedelta(hours=12)),
        "participantCap": 2,
        "applicationCap": 10,
        "previewJson": {"pages": 12},
        "workBriefJson": {"secret": "the brief"},
    }
    body.update(overrides)
    return body


def payload(summary: str = "Done", answer: str = "The full answer.") -> dict[str, Any]:
    return {"summary": summary, "answer": answer}


def submit_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"artifactType": "text", "structuredPayloadJson": payload()}
    body.update(overrides)
    return body


async def create_published(
    requester: AgentHandle, client: httpx.AsyncClient, **overrides: Any
) -> dict[str, Any]:
    r = await client.post("/api/v2/jobs", json=job_body(**overrides), headers=requester.h)
    assert r.status_code == 201, r.text
    job = r.json()
    r = await client.post(f"/api/v2/jobs/{job['id']}/publish", headers=requester.h)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def to_review(
    client: httpx.AsyncClient, job_id: str, requester: AgentHandle, worker: AgentHandle
) -> str:
    """A worker applies, is admitted, acknowledges and submits: the job is in review. The submission's id."""
    return (await all_submit(client, job_id, requester, [worker]))[0]


async def acknowledged(
    client: httpx.AsyncClient, job_id: str, requester: AgentHandle, workers: list[AgentHandle]
) -> list[str]:
    """The workers apply, are admitted (the job's cap must take them all) and acknowledge: their slots' ids,
    in the workers' order."""
    for worker in workers:
        assert (await client.post(f"/api/v2/jobs/{job_id}/applications", headers=worker.h)).status_code == 201
    admitted = await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=requester.h)
    assert admitted.status_code == 200, admitted.text
    slot_ids: list[str] = []
    for worker in workers:
        slots = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)).json()[
            "slots"
        ]
        slot = next(s for s in slots if s["jobId"] == job_id)
        ack = await client.post(f"/api/v2/participation-slots/{slot['id']}/acknowledge", headers=worker.h)
        assert ack.status_code == 200, ack.text
        slot_ids.append(str(slot["id"]))
    return slot_ids


async def overbooked(
    app: Any, core: Core, client: httpx.AsyncClient
) -> tuple[AgentHandle, list[AgentHandle], dict[str, Any], dict[str, str]]:
    """Three applicants for two places, admission run: (requester, workers, job, the admitted workers' slot
    ids by worker id)."""
    requester = await new_agent(await new_owner(app, core))
    workers = [await new_agent(await new_owner(app, core)) for _ in range(3)]
    job = await create_published(requester, client, participantCap=2)
    for worker in workers:
        r = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=worker.h)
        assert r.status_code == 201, r.text
    admitted = await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    assert admitted.status_code == 200, admitted.text
    slots: dict[str, str] = {}
    for worker in workers:
        listed = await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)
        mine = [s for s in listed.json()["slots"] if s["jobId"] == job["id"]]
        if mine:
            slots[worker.id] = mine[0]["id"]
    assert len(slots) == 2, slots
    return requester, workers, job, slots


async def all_submit(
    client: httpx.AsyncClient, job_id: str, requester: AgentHandle, workers: list[AgentHandle]
) -> list[str]:
    """The workers apply, are admitted (the job's cap must take them all), acknowledge and submit: the job is
    in review. The submissions' ids, in the workers' order."""
    submitted: list[dict[str, Any]] = []
    for worker, slot in zip(workers, await acknowledged(client, job_id, requester, workers), strict=True):
        sub = await client.post(
            f"/api/v2/participation-slots/{slot}/submit", json=submit_body(), headers=worker.h
        )
        assert sub.status_code == 201, sub.text
        submitted.append(sub.json())
    assert submitted[-1]["jobStatus"] == "IN_REVIEW", submitted[-1]
    return [str(s["id"]) for s in submitted]


async def travel(core: Core, **delta: float) -> dict[str, int]:
    """Move the clock forward and run one sweeper pass, as the background worker would."""
    c = clock._clock
    assert isinstance(c, clock.FrozenClock), "tests that travel need the frozen_clock fixture"
    c.advance(**delta)
    return await sweep(core)


async def put_upload(client: httpx.AsyncClient, ticket: dict[str, Any], data: bytes) -> None:
    """PUT the bytes to an upload ticket's presigned target, as an agent would; it must be accepted."""
    r = await client.put(ticket["target"]["url"], content=data, headers=ticket["target"]["headers"])
    assert r.status_code in (200, 201, 204), r.text


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def seed_job_and_slot(core: Core, job_id: str, slot_id: str) -> None:
    """A job and a slot with fixed ids, written directly: for tests of the file layer, which needs real rows
    to attach files to but no lifecycle around them."""
    from callboard_core.agents.models import Agent
    from callboard_core.jobs.models import Job, JobApplication, ParticipationSlot

    now = clock.now()
    async with core.uow() as uow:
        s = uow.session
        user = await users.create(s, email=f"f{uuid.uuid4().hex[:10]}@example.com", verified=True)
        requester = Agent(
            name="files requester",
            handle=f"f-{uuid.uuid4().hex[:10]}",
            endpoint_url="https://r.example",
            owner_id=user.id,
        )
        worker = Agent(
            name="files worker", handle=f"f-{uuid.uuid4().hex[:10]}", endpoint_url="https://w.example"
        )
        s.add_all([requester, worker])
        await s.flush()
        s.add(
            Job(
                id=job_id,
                requester_agent_id=requester.id,
                owner_id=user.id,
                status="IN_PROGRESS",
                title="files",
                admission_closes_at=now,
                fair_work_duration_ms=3_600_000,
                latest_submission_deadline_at=now + timedelta(hours=2),
                review_deadline_at=now + timedelta(hours=3),
            )
        )
        await s.flush()
        application = JobApplication(job_id=job_id, worker_agent_id=worker.id, status="ADMITTED")
        s.add(application)
        await s.flush()
        s.add(
            ParticipationSlot(
                id=slot_id,
                job_id=job_id,
                application_id=application.id,
                worker_agent_id=worker.id,
                status="ACKNOWLEDGED",
                acknowledge_by=now,
                acknowledged_at=now,
            )
        )


def postgres_only(core: Core, reason: str) -> None:
    """Skip the calling test on SQLite, saying why (`reason`) the behaviour it checks is PostgreSQL's own."""
    if core.db.is_sqlite:
        pytest.skip(reason)
