"""An award decides every submission of the job in one statement (jobs.review._DECIDE): the winner AWARDED,
the others NOT_AWARDED, the submitters read from it; a winner its state table refuses is a 409 and nothing
of the award is kept."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from callboard_core.agents import reputation
from callboard_core.agents.models import Agent, AgentCapability
from callboard_core.container import Core
from callboard_core.errors import Conflict
from callboard_core.jobs import review
from callboard_core.jobs import service as job_service
from callboard_core.jobs.models import Award, Job, JobApplication, ParticipationSlot, Submission
from callboard_core.principals import Actor
from tests.jobs_helpers import all_submit, create_published, new_agent, new_owner, overbooked, submit_body


async def _statuses(core: Core, job_id: str) -> dict[str, str]:
    async with core.uow(write=False) as uow:
        rows = await uow.session.execute(
            select(Submission.id, Submission.status).where(Submission.job_id == job_id)
        )
        return {row.id: row.status for row in rows}


async def _in_review(
    app: Any, core: Core, client: httpx.AsyncClient, n: int
) -> tuple[Any, list[Any], Any, list[str]]:
    """A job in review with n submissions: (requester, workers, job, submission ids in the workers' order)."""
    requester = await new_agent(await new_owner(app, core))
    workers = [await new_agent(await new_owner(app, core)) for _ in range(n)]
    job = await create_published(requester, client, participantCap=n)
    return requester, workers, job, await all_submit(client, job["id"], requester, workers)


async def test_the_award_decides_every_submission_and_tells_each_submitter(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    requester, workers, job, (winner, *others) = await _in_review(app, core, client, 3)
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": winner}, headers=requester.h
    )
    assert r.status_code == 200, r.text
    assert await _statuses(core, job["id"]) == {winner: "AWARDED", **{o: "NOT_AWARDED" for o in others}}
    # Every submitter hears the outcome: the winner that it won, the others that they were not awarded.
    for worker, won in zip(workers, (True, False, False), strict=True):
        notes = (await client.get("/api/v2/agent-notifications", headers=worker.h)).json()
        kinds = {n["type"] for n in notes["notifications"]}
        assert ("awarded" in kinds) == won and ("submissions_not_awarded" in kinds) == (not won), kinds


async def test_a_winner_its_table_refuses_is_a_409_and_nothing_is_kept(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    requester, _, job, (winner, other) = await _in_review(app, core, client, 2)
    async with core.uow() as uow:  # a state no award may start from (only reachable by a bug or by hand)
        await uow.session.execute(update(Submission).where(Submission.id == winner).values(status="AWARDED"))
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": winner}, headers=requester.h
    )
    assert r.status_code == 409 and r.json()["code"] == "invalid_state", r.text
    assert r.json()["currentState"] == "AWARDED"
    assert await _statuses(core, job["id"]) == {winner: "AWARDED", other: "SUBMITTED"}
    got = (await client.get(f"/api/v2/jobs/{job['id']}", headers=requester.h)).json()["job"]
    assert got["status"] == "IN_REVIEW"
    async with core.uow(write=False) as uow:
        assert await uow.session.scalar(select(Award.id).where(Award.job_id == job["id"])) is None


async def test_the_award_counts_every_submitters_completion_and_the_winners_win(
    app: Any, core: Core, client: httpx.AsyncClient, frozen_clock: Any
) -> None:
    """The completions are counted in two statements (one on PostgreSQL) for all submitters
    (agents/reputation.py): each has one job done; the winner a win, a success rate of 1 and 1 + 3
    reputation, the others 0 and 1; the job's capability counted under each one's link (every worker here
    declared `python`)."""
    requester, workers, job, (winner, *_) = await _in_review(app, core, client, 3)
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": winner}, headers=requester.h
    )
    assert r.status_code == 200, r.text
    async with core.uow(write=False) as uow:
        for worker, won in zip(workers, (True, False, False), strict=True):
            agent = await uow.session.get(Agent, worker.id)
            link = await uow.session.get(AgentCapability, (worker.id, job["capabilityTagId"]))
            assert agent is not None and link is not None
            assert (agent.total_tasks, agent.win_count, agent.success_rate) == (1, int(won), float(won))
            assert reputation.current(agent.reputation_score) == pytest.approx(4.0 if won else 1.0)
            assert (link.completed_count, link.win_count) == (1, int(won))
            assert reputation.current(link.reputation) == pytest.approx(4.0 if won else 1.0)


async def test_a_job_stopped_early_ends_its_live_slots_and_open_applications_and_counts_its_submitter(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """A job closed without an award while one admitted worker still works and one applicant waits: the live
    slot ends WITHDRAWN (job_closed), the waiting application NOT_ADMITTED, the submission NOT_AWARDED, and
    only the submitter's completion counts (on PostgreSQL the closing moves go in the completions' statement:
    agents/reputation.record_completions, `beside`)."""
    requester, workers, job, slots = await overbooked(app, core, client)
    (submitter, slot), (working, other_slot) = list(slots.items())
    (waiting,) = [w.id for w in workers if w.id not in slots]
    handle = {w.id: w for w in workers}
    for agent_id, slot_id in ((submitter, slot), (working, other_slot)):
        ack = await client.post(
            f"/api/v2/participation-slots/{slot_id}/acknowledge", headers=handle[agent_id].h
        )
        assert ack.status_code == 200, ack.text
    sub = await client.post(
        f"/api/v2/participation-slots/{slot}/submit", json=submit_body(), headers=handle[submitter].h
    )
    assert sub.status_code == 201 and sub.json()["jobStatus"] == "IN_PROGRESS", sub.text

    closed = await client.post(
        f"/api/v2/jobs/{job['id']}/no-award", json={"reasonCode": "OTHER"}, headers=requester.h
    )
    assert closed.status_code == 200 and closed.json()["status"] == "NO_AWARD", closed.text
    async with core.uow(write=False) as uow:
        ended = {
            row.worker_agent_id: (row.status, row.end_reason)
            for row in await uow.session.execute(
                select(
                    ParticipationSlot.worker_agent_id, ParticipationSlot.status, ParticipationSlot.end_reason
                ).where(ParticipationSlot.job_id == job["id"])
            )
        }
        applications = dict(
            (
                await uow.session.execute(
                    select(JobApplication.worker_agent_id, JobApplication.status).where(
                        JobApplication.job_id == job["id"]
                    )
                )
            ).all()
        )
        done = {w.id: (await uow.session.get(Agent, w.id)) for w in workers}
    assert ended == {submitter: ("SUBMITTED", None), working: ("WITHDRAWN", "job_closed")}
    assert applications[waiting] == "NOT_ADMITTED", applications
    assert await _statuses(core, job["id"]) == {sub.json()["id"]: "NOT_AWARDED"}
    assert {agent_id: agent.total_tasks for agent_id, agent in done.items() if agent} == {
        submitter: 1,
        working: 0,
        waiting: 0,
    }


async def test_an_award_ends_a_waiting_application_and_leaves_nothing_open(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """An award ends whatever of the job is still open: an application left waiting ends NOT_ADMITTED. (The
    review's start already closes a waiting application, so a requester's award normally finds nothing
    open; on SQLite its read tells, and a closing move with nothing to move is left out. Here one is open.)"""
    requester, workers, job, slots = await overbooked(app, core, client)
    handle = {w.id: w for w in workers}
    submissions: dict[str, str] = {}
    for worker_id, slot in slots.items():
        worker = handle[worker_id]
        ack = await client.post(f"/api/v2/participation-slots/{slot}/acknowledge", headers=worker.h)
        assert ack.status_code == 200, ack.text
        sub = await client.post(
            f"/api/v2/participation-slots/{slot}/submit", json=submit_body(), headers=worker.h
        )
        assert sub.status_code == 201, sub.text
        submissions[worker_id] = sub.json()["id"]
    assert len(submissions) == 2 and sub.json()["jobStatus"] == "IN_REVIEW", sub.text
    (waiting,) = [w.id for w in workers if w.id not in submissions]
    winner = next(iter(submissions.values()))
    async with core.uow() as uow:  # closed when the review began: open again, as a stray row would be
        await uow.session.execute(
            update(JobApplication)
            .where(JobApplication.job_id == job["id"], JobApplication.worker_agent_id == waiting)
            .values(status="WAITLISTED")
        )
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": winner}, headers=requester.h
    )
    assert r.status_code == 200, r.text
    async with core.uow(write=False) as uow:
        applications = dict(
            (
                await uow.session.execute(
                    select(JobApplication.worker_agent_id, JobApplication.status).where(
                        JobApplication.job_id == job["id"]
                    )
                )
            ).all()
        )
    assert applications[waiting] == "NOT_ADMITTED", applications
    assert sorted(await _statuses(core, job["id"]), key=str) == sorted(submissions.values(), key=str)
    assert (await _statuses(core, job["id"]))[winner] == "AWARDED"


async def test_an_award_whose_job_changed_after_its_read_is_refused_with_the_jobs_state(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """The job's compare-and-set still decides (on PostgreSQL it runs inside the award's closing statement):
    a job that is no longer in review when the award moves it is a 409 naming its state, and nothing of the
    award is kept."""
    requester, _workers, job, (winner, other) = await _in_review(app, core, client, 2)
    with pytest.raises(Conflict) as refused:
        async with core.uow() as uow:
            session = uow.session
            held = await job_service.requester_job(
                session, Actor.agent(requester.id), job["id"], for_update=True
            )
            submission = await session.get(Submission, winner)
            assert submission is not None and held.status == "IN_REVIEW"
            # Another move of the job in this transaction, behind the session's back.
            await session.execute(
                update(Job.__table__).where(Job.__table__.c.id == job["id"]).values(status="NO_AWARD")
            )
            await review.award_submission(session, held, submission, Actor.agent(requester.id))
    assert refused.value.code == "invalid_state"
    assert refused.value.details["current_state"] == "NO_AWARD"
    assert await _statuses(core, job["id"]) == {winner: "SUBMITTED", other: "SUBMITTED"}
    async with core.uow(write=False) as uow:
        assert (await uow.session.get(Job, job["id"])).status == "IN_REVIEW"
        assert await uow.session.scalar(select(Award.id).where(Award.job_id == job["id"])) is None
