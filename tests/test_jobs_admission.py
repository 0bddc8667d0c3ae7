"""Admission order and the places held for new workers, as applicants see them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from callboard_core.agents.models import Agent, AgentCapability
from tests.jobs_helpers import AgentHandle, create_published, new_agent, new_owner


async def _experienced(core: Any, agent: AgentHandle, reputation: float = 0.0) -> None:
    """Give an agent a completed job (and a reputation under `python`) without running one."""
    async with core.uow() as uow:
        await uow.session.execute(update(Agent).where(Agent.id == agent.id).values(total_tasks=1))
        await uow.session.execute(
            update(AgentCapability).where(AgentCapability.agent_id == agent.id).values(reputation=reputation)
        )


async def _statuses(client: Any, workers: dict[str, AgentHandle], job_id: str) -> dict[str, str]:
    out = {}
    for name, w in workers.items():
        apps = (await client.get("/api/v2/worker-agents/me/applications", headers=w.h)).json()["applications"]
        out[name] = next(a["status"] for a in apps if a["jobId"] == job_id)
    return out


async def test_tagged_before_rookies_then_reputation_with_a_place_for_a_new_worker(
    app: Any, core: Any, client: Any
) -> None:
    requester = await new_agent(await new_owner(app, core))
    others = await new_owner(app, core)
    workers = {
        "veteran": await new_agent(others, ["python"]),
        "regular": await new_agent(others, ["python"]),
        "fresh": await new_agent(others, ["python"]),
        "rookie_vet": await new_agent(others, ["translation"]),
        "rookie_new": await new_agent(others, ["translation"]),
    }
    await _experienced(core, workers["veteran"], reputation=10)
    await _experienced(core, workers["regular"], reputation=1)
    await _experienced(core, workers["rookie_vet"])
    job = await create_published(requester, client, participantCap=3, newWorkerReservedSlotCount=1)
    for name in ("rookie_vet", "rookie_new", "fresh", "regular", "veteran"):  # applying early wins no rank
        r = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=workers[name].h)
        assert r.status_code == 201, (name, r.text)
    await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    # Two open places by rank (veteran, regular: tagged, best reputation), one held for a new worker: the
    # best-ranked new one is `fresh` (tagged) ahead of `rookie_new`.
    assert await _statuses(client, workers, job["id"]) == {
        "veteran": "ADMITTED",
        "regular": "ADMITTED",
        "fresh": "ADMITTED",
        "rookie_vet": "WAITLISTED",
        "rookie_new": "WAITLISTED",
    }


async def test_an_unclaimed_new_worker_place_goes_to_the_next_in_rank(
    app: Any, core: Any, client: Any
) -> None:
    requester = await new_agent(await new_owner(app, core))
    others = await new_owner(app, core)
    a, b = await new_agent(others, ["python"]), await new_agent(others, ["python"])
    await _experienced(core, a, 5)
    await _experienced(core, b, 3)
    job = await create_published(requester, client, participantCap=2, newWorkerReservedSlotCount=1)
    for w in (a, b):
        await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=w.h)
    await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    assert await _statuses(client, {"a": a, "b": b}, job["id"]) == {"a": "ADMITTED", "b": "ADMITTED"}


async def test_application_places_held_for_new_workers(app: Any, core: Any, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    others = await new_owner(app, core)
    vet1, vet2, new = (await new_agent(others), await new_agent(others), await new_agent(others))
    await _experienced(core, vet1)
    await _experienced(core, vet2)
    job = await create_published(requester, client, applicationCap=2, newWorkerReservedApplicationCount=1)
    assert (await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=vet1.h)).status_code == 201
    held = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=vet2.h)
    assert held.status_code == 409 and held.json()["code"] == "application_cap_reached"
    assert (await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=new.h)).status_code == 201
    # Withdrawing frees the place it took.
    mine = (await client.get("/api/v2/worker-agents/me/applications", headers=vet1.h)).json()["applications"][
        0
    ]
    assert (
        await client.post(f"/api/v2/job-applications/{mine['id']}/withdraw", headers=vet1.h)
    ).status_code == 200
    assert (await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=vet2.h)).status_code == 201
    again = await client.post(f"/api/v2/jobs/{job['id']}/applications", headers=vet2.h)
    assert again.status_code == 409 and again.json()["code"] == "already_applied"


async def test_admission_with_no_applicant_closes_the_job(app: Any, core: Any, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    job = await create_published(requester, client)
    closed = await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    assert closed.json()["status"] == "NO_AWARD" and closed.json()["noAwardReasonCode"] == "NO_SUBMISSIONS"
    again = await client.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=requester.h)
    assert again.status_code == 409 and again.json()["currentState"] == "NO_AWARD"
