"""Races in the job lifecycle, on SQLite and PostgreSQL: the last application place, an invitation accepted
while admission closes, admission run twice, two awards at once, a submission racing its work deadline.

Each race fires its requests at once through the real app (`asyncio.gather` over ASGITransport: PostgreSQL
runs them as concurrent transactions on pooled connections, SQLite queues the writers on BEGIN IMMEDIATE), or
runs the deadline sweeper as a concurrent unit of work, and repeats over several rounds so that one lucky
interleaving cannot hide a bug; where one side needs a head start to win now and then, the rounds start it a
few milliseconds late (`_delayed`). The racing clients do not re-raise the app's exceptions: a 500 comes back
as a response and fails the test with its body; a deadlock or serialization failure, which the write pipeline
runs again unseen by the client, fails the test through tests/conftest.py's count of writes run again. The
sweeper swallows and logs a failed step; the tests read its log and accept only a lost compare-and-set there.
Deadlines are exact: the frozen clock is moved onto the work deadline, and `SkewedClock` lets the sweeper read
a microsecond later than the worker's request while both are in flight.

Three of these races failed on PostgreSQL only (SQLite runs write transactions one at a time) until every write
that changes a job's participants took the job row lock first; their docstrings say what went wrong.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import func, select, update

from callboard_core import clock
from callboard_core.agent_notifications.models import AgentNotification
from callboard_core.agents.models import Agent
from callboard_core.container import Core
from callboard_core.errors import Conflict
from callboard_core.jobs import participation
from callboard_core.jobs import service as jobs_service
from callboard_core.jobs.models import (
    Award,
    Job,
    JobApplication,
    JobEvent,
    JobInvitation,
    ParticipationSlot,
    Submission,
)
from callboard_core.jobs.schemas import SubmitBody
from callboard_core.jobs.states import SlotStatus
from callboard_core.jobs.sweeper import sweep
from callboard_core.principals import Actor
from tests.conftest import BASE_URL, ORIGIN
from tests.factories import assert_not_5xx, assert_problem
from tests.jobs_helpers import (
    AgentHandle,
    Owner,
    acknowledged,
    create_published,
    job_body,
    new_agent,
    new_owner,
    postgres_only,
    submit_body,
)

ROUNDS = 5  # on PostgreSQL; SQLite runs whole write transactions one at a time, so fewer orderings exist
LIVE = ("GRANTED", "ACKNOWLEDGED")
T = TypeVar("T")


# --- the market: one requester, workers of other owners ------------------------------------------


@dataclass
class Market:
    owner: Owner  # the requester's owner
    requester: AgentHandle
    workers: list[AgentHandle]  # agents of other owners than the requester's

    def worker(self, agent_id: str) -> AgentHandle:
        return next(w for w in self.workers if w.id == agent_id)


async def _market(app: Any, core: Core, workers: int, owners: int = 4) -> Market:
    alice = await new_owner(app, core)
    requester = await new_agent(alice)
    others = list(await asyncio.gather(*(new_owner(app, core) for _ in range(owners))))
    return Market(
        alice, requester, list(await asyncio.gather(*(new_agent(others[i % owners]) for i in range(workers))))
    )


def _rounds(core: Core, pg: int = ROUNDS, sqlite: int = 3) -> int:
    return sqlite if core.db.is_sqlite else pg


def _racer(app: Any, owner: Owner | None = None) -> httpx.AsyncClient:
    """A client for the racing requests: an app error comes back as a 500 response instead of raising."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    if owner is None:
        return httpx.AsyncClient(transport=transport, base_url=BASE_URL)
    return httpx.AsyncClient(
        transport=transport, base_url=BASE_URL, cookies=owner.client.cookies, headers=ORIGIN
    )


async def _delayed(ms: float, call: Awaitable[T]) -> T:
    """Start a racing call a few milliseconds late: the rounds stagger one side so that the interleavings
    explored vary (a lock-order deadlock needs the second request to land inside a window of a few queries)."""
    await asyncio.sleep(ms / 1000)
    return await call


STAGGER_MS = (0, 4, 8, 2, 12, 6)


def _summary(responses: list[httpx.Response]) -> list[tuple[int, str]]:
    return [(r.status_code, r.text[:300]) for r in responses]


def _no_5xx(responses: list[httpx.Response]) -> None:
    for r in responses:
        assert_not_5xx(r)


def _sweeper_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Sweeper steps that failed for another reason than losing a compare-and-set (a 409 Conflict)."""
    return [
        rec
        for rec in caplog.records
        if rec.name == "callboard.sweeper" and rec.exc_info and not isinstance(rec.exc_info[1], Conflict)
    ]


# --- reading the database ------------------------------------------------------------------------


async def _all(core: Core, stmt: Any) -> list[Any]:
    async with core.uow(write=False) as uow:
        return list((await uow.session.scalars(stmt)).all())


async def _count(core: Core, model: Any, *where: Any) -> int:
    async with core.uow(write=False) as uow:
        return int(
            (await uow.session.execute(select(func.count()).select_from(model).where(*where))).scalar_one()
        )


async def _job(core: Core, job_id: str) -> Job:
    async with core.uow(write=False) as uow:
        job = await uow.session.get(Job, job_id)
        assert job is not None
        return job


async def _slots(core: Core, job_id: str) -> list[ParticipationSlot]:
    return await _all(core, select(ParticipationSlot).where(ParticipationSlot.job_id == job_id))


async def _events(core: Core, job_id: str, kind: str) -> int:
    return await _count(core, JobEvent, JobEvent.job_id == job_id, JobEvent.kind == kind)


async def _owner_view(m: Market, job_id: str) -> dict[str, Any]:
    r = await m.owner.client.get(f"/api/v2/owner/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _places_add_up(core: Core, job_id: str) -> None:
    """reservedParticipants counts live or submitted slots plus pending invitations, and stays within the cap."""
    async with core.uow(write=False) as uow:
        job = await uow.session.get(Job, job_id)
        assert job is not None
        slots = Counter(
            (
                await uow.session.scalars(
                    select(ParticipationSlot.status).where(ParticipationSlot.job_id == job_id)
                )
            ).all()
        )
        pending = len(
            (
                await uow.session.scalars(
                    select(JobInvitation.id).where(
                        JobInvitation.job_id == job_id, JobInvitation.status == "PENDING"
                    )
                )
            ).all()
        )
    live, held = (
        slots["GRANTED"] + slots["ACKNOWLEDGED"],
        slots["GRANTED"] + slots["ACKNOWLEDGED"] + slots["SUBMITTED"],
    )
    assert live <= job.participant_cap, (live, job.participant_cap)
    assert job.reserved_participants == held + pending, (job.reserved_participants, held, pending)
    assert job.reserved_participants <= job.participant_cap, (job.reserved_participants, job.participant_cap)


# --- building jobs up to the moment of the race --------------------------------------------------


async def _apply(client: httpx.AsyncClient, job_id: str, *workers: AgentHandle) -> None:
    """Setup, not a race under test: the workers apply (at once, to save time) and all get a place."""
    responses = await asyncio.gather(
        *(client.post(f"/api/v2/jobs/{job_id}/applications", headers=w.h) for w in workers)
    )
    assert [r.status_code for r in responses] == [201] * len(workers), _summary(list(responses))


async def _run_admission(client: httpx.AsyncClient, m: Market, job_id: str) -> None:
    r = await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=m.requester.h)
    assert r.status_code == 200, r.text


async def _acknowledge(client: httpx.AsyncClient, worker: AgentHandle, slot_id: str) -> dict[str, Any]:
    r = await client.post(f"/api/v2/participation-slots/{slot_id}/acknowledge", headers=worker.h)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _acknowledged(
    client: httpx.AsyncClient,
    core: Core,
    m: Market,
    *workers: AgentHandle,
    participant_cap: int | None = None,
) -> tuple[str, list[ParticipationSlot]]:
    """A job whose admission ran with these applicants, every granted slot acknowledged: (job id, slots)."""
    job = await create_published(
        m.requester, client, participantCap=participant_cap or len(workers), applicationCap=10
    )
    await _apply(client, job["id"], *workers)
    await _run_admission(client, m, job["id"])
    slots = await _slots(core, job["id"])
    await asyncio.gather(*(_acknowledge(client, m.worker(s.worker_agent_id), s.id) for s in slots))
    return job["id"], slots


async def _submit_as(client: httpx.AsyncClient, worker: AgentHandle, slot_id: str) -> httpx.Response:
    return await client.post(
        f"/api/v2/participation-slots/{slot_id}/submit", json=submit_body(), headers=worker.h
    )


async def _in_review(
    client: httpx.AsyncClient, core: Core, m: Market, a: AgentHandle, b: AgentHandle
) -> tuple[str, dict[str, str]]:
    """A job IN_REVIEW with one submission each from a and b: (job id, {worker id: submission id}). The two
    submit one after the other (two at once is its own race, below)."""
    job_id, slots = await _acknowledged(client, core, m, a, b)
    subs: dict[str, str] = {}
    statuses: list[str] = []
    for slot in slots:
        r = await _submit_as(client, m.worker(slot.worker_agent_id), slot.id)
        assert r.status_code == 201, r.text
        subs[slot.worker_agent_id] = r.json()["id"]
        statuses.append(r.json()["jobStatus"])
    assert sorted(subs) == sorted([a.id, b.id]), subs
    # The first leaves the job working (the other slot is live), the last starts its review.
    assert statuses == ["IN_PROGRESS", "IN_REVIEW"], statuses
    return job_id, subs


# --- 1. applications -----------------------------------------------------------------------------


async def test_twenty_workers_race_for_the_last_application_place(app: Any, core: Core, client: Any) -> None:
    """applicationCap N with N-1 applications (N = 1..5 over the rounds): of 20 workers applying at once,
    exactly one gets the last place (201), 19 get 409 application_cap_reached; the job counts N
    applications and holds N rows."""
    rounds = _rounds(core)
    m = await _market(app, core, workers=20 + rounds - 1)
    early, racers = m.workers[20:], m.workers[:20]
    async with _racer(app) as racer:
        for cap in range(1, rounds + 1):
            job = await create_published(m.requester, client, applicationCap=cap, participantCap=1)
            await _apply(client, job["id"], *early[: cap - 1])
            responses = list(
                await asyncio.gather(
                    *(racer.post(f"/api/v2/jobs/{job['id']}/applications", headers=w.h) for w in racers)
                )
            )
            _no_5xx(responses)
            won = [i for i, r in enumerate(responses) if r.status_code == 201]
            assert len(won) == 1, (cap, _summary(responses))
            for i, r in enumerate(responses):
                if i != won[0]:
                    assert_problem(r, 409, "application_cap_reached")
            winner = racers[won[0]]
            assert responses[won[0]].json()["workerAgentId"] == winner.id
            assert (await _owner_view(m, job["id"]))["applicationCount"] == cap
            rows = await _all(
                core, select(JobApplication.worker_agent_id).where(JobApplication.job_id == job["id"])
            )
            assert sorted(rows) == sorted([w.id for w in early[: cap - 1]] + [winner.id]), (cap, rows)
            assert await _events(core, job["id"], "application_received") == cap


async def test_one_worker_applying_five_times_at_once_gets_one_application(
    app: Any, core: Core, client: Any
) -> None:
    """The same worker applies five times at once (three with its key, two through its owner's mirror):
    one 201, four 409 already_applied, one row, one counted application."""
    m = await _market(app, core, workers=_rounds(core))
    for w in m.workers:
        job = await create_published(m.requester, client, applicationCap=10, participantCap=2)
        async with _racer(app) as agent, _racer(app, w.owner) as owner:
            calls = [agent.post(f"/api/v2/jobs/{job['id']}/applications", headers=w.h) for _ in range(2)]
            calls.append(agent.post(f"/api/v2/bounties/{job['id']}/applications", headers=w.h))
            calls += [
                owner.post(f"/api/v2/owner/jobs/{job['id']}/applications", json={"workerAgentId": w.id})
                for _ in range(2)
            ]
            responses = list(await asyncio.gather(*calls))
        _no_5xx(responses)
        assert sorted(r.status_code for r in responses) == [201, 409, 409, 409, 409], _summary(responses)
        for r in responses:
            if r.status_code == 409:
                assert_problem(r, 409, "already_applied")
        rows = await _all(core, select(JobApplication).where(JobApplication.job_id == job["id"]))
        assert [a.worker_agent_id for a in rows] == [w.id] and rows[0].status == "PENDING"
        assert (await _owner_view(m, job["id"]))["applicationCount"] == 1
        assert await _events(core, job["id"], "application_received") == 1


async def test_applications_racing_admission_close_are_ranked_or_refused(
    app: Any, core: Core, client: Any
) -> None:
    """Four workers apply while the requester runs admission: an accepted application is always ranked (never
    left PENDING on a job whose admission closed); a refused one is 409 admission_closed, or 404 when the
    worker already saw the job closed (a closed job is no longer visible to non-participants)."""
    m = await _market(app, core, workers=5)
    async with _racer(app) as racer:
        for _ in range(_rounds(core)):
            job = await create_published(m.requester, client, applicationCap=10, participantCap=1)
            await _apply(client, job["id"], m.workers[0])
            calls = [racer.post(f"/api/v2/jobs/{job['id']}/applications", headers=w.h) for w in m.workers[1:]]
            calls.insert(2, racer.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=m.requester.h))
            responses = list(await asyncio.gather(*calls))
            _no_5xx(responses)
            run, applied = responses[2], responses[:2] + responses[3:]
            assert run.status_code == 200, run.text
            for r in applied:
                if r.status_code != 201:
                    code = assert_problem(r)["code"]
                    assert (r.status_code, code) in {(409, "admission_closed"), (404, "job_not_found")}, (
                        r.text
                    )
            accepted = {r.json()["workerAgentId"] for r in applied if r.status_code == 201}
            rows = await _all(core, select(JobApplication).where(JobApplication.job_id == job["id"]))
            assert {a.worker_agent_id for a in rows} == accepted | {m.workers[0].id}
            statuses = Counter(a.status for a in rows)
            assert statuses == Counter({"ADMITTED": 1, "WAITLISTED": len(rows) - 1}), statuses
            assert len([s for s in await _slots(core, job["id"]) if s.status in LIVE]) == 1
            assert await _events(core, job["id"], "admission_closed") == 1
            await _places_add_up(core, job["id"])


# --- participant places: invitations and admission -----------------------------------------------


async def _accept_racing_admission(
    app: Any, core: Core, client: Any, *, invitee_applied: bool, rounds: int
) -> Counter[str]:
    """participantCap 1, an invitation holding the place and three applicants: the invitee accepts while the
    requester runs admission (by key or through the owner mirror, on both sides, alternating; the run starts
    0-12 ms after the accept, varying by round). Exactly one live slot; the invitation ACCEPTED (its worker
    holds the slot) or EXPIRED (the accept got 409 invalid_state)."""
    m = await _market(app, core, workers=4)
    outcomes: Counter[str] = Counter()
    for round_ in range(rounds):
        invitee = m.workers[round_ % 4]
        applicants = [w for w in m.workers if w is not invitee] + ([invitee] if invitee_applied else [])
        job = await create_published(m.requester, client, applicationCap=10, participantCap=1)
        await _apply(client, job["id"], *applicants)
        inv = await client.post(
            f"/api/v2/jobs/{job['id']}/invitations", json={"workerAgentId": invitee.id}, headers=m.requester.h
        )
        assert inv.status_code == 201, inv.text
        inv_id = inv.json()["id"]
        by_owner = bool(round_ % 2)
        async with (
            _racer(app) as agent,
            _racer(app, invitee.owner) as worker_owner,
            _racer(app, m.owner) as boss,
        ):
            decision = {"decision": "ACCEPT"}
            accept = (
                worker_owner.post(f"/api/v2/owner/invitations/{inv_id}/respond", json=decision)
                if by_owner
                else agent.post(f"/api/v2/invitations/{inv_id}/respond", json=decision, headers=invitee.h)
            )
            run = (
                agent.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=m.requester.h)
                if by_owner
                else boss.post(f"/api/v2/owner/jobs/{job['id']}/admission/run")
            )
            accepted, ran = await asyncio.gather(accept, _delayed(STAGGER_MS[round_ % len(STAGGER_MS)], run))
        _no_5xx([accepted, ran])
        assert ran.status_code == 200, ran.text
        slots = await _slots(core, job["id"])
        live = [s for s in slots if s.status in LIVE]
        assert len(live) == 1, [(s.worker_agent_id, s.status) for s in slots]
        assert len({s.worker_agent_id for s in slots}) == len(slots)  # nobody holds two slots
        invitation = (await _all(core, select(JobInvitation).where(JobInvitation.id == inv_id)))[0]
        apps = await _all(core, select(JobApplication).where(JobApplication.job_id == job["id"]))
        assert not [a for a in apps if a.status == "PENDING"]
        assert [a.worker_agent_id for a in apps if a.status == "ADMITTED"] == [live[0].worker_agent_id]
        if accepted.status_code == 200:
            outcomes["accept first"] += 1
            assert invitation.status == "ACCEPTED"
            assert live[0].worker_agent_id == invitee.id and live[0].id == accepted.json()["slotId"]
            assert next(a for a in apps if a.status == "ADMITTED").via_invitation_id == inv_id
        else:
            outcomes["admission first"] += 1
            assert_problem(accepted, 409, "invalid_state")
            assert invitation.status == "EXPIRED"
        view = await _owner_view(m, job["id"])
        assert view["status"] == "IN_PROGRESS" and view["reservedParticipants"] == 1, view
        assert await _events(core, job["id"], "admission_closed") == 1
        await _places_add_up(core, job["id"])
    return outcomes


async def test_invitation_accept_racing_admission_close_never_overfills(
    app: Any, core: Core, client: Any
) -> None:
    outcomes = await _accept_racing_admission(app, core, client, invitee_applied=False, rounds=_rounds(core))
    print("invitation accept vs admission close:", dict(outcomes))


async def test_applicant_accepting_invitation_racing_admission_close(
    app: Any, core: Core, client: Any
) -> None:
    """As above, but the invitee has a PENDING application too (accepting turns it into the admitted one).
    Found on PostgreSQL: the accept locked the invitation and then the job row (application_count), admission
    the job row and then the invitations: 'deadlock detected', a 500 on either side. Both now lock the job
    row first (`jobs.service.lock`)."""
    outcomes = await _accept_racing_admission(
        app, core, client, invitee_applied=True, rounds=_rounds(core, pg=8)
    )
    print("applicant's invitation accept vs admission close:", dict(outcomes))


async def test_invite_racing_admission_close_leaves_no_stray_invitation(
    app: Any, core: Core, client: Any
) -> None:
    """participantCap 2, one applicant; the requester invites a worker while admission runs: the invitation
    either came first (and lapsed with the close: EXPIRED, its place released) or is refused with 409
    invalid_state, never left PENDING on a job whose admission is over. Found on PostgreSQL: the invite
    checked the status in Python and took the place by a cap-only compare-and-set, so after the close it got
    201 and a PENDING invitation holding a place on an IN_PROGRESS job."""
    m = await _market(app, core, workers=2)
    applicant, invitee = m.workers
    outcomes: Counter[str] = Counter()
    async with _racer(app) as racer:
        for _ in range(_rounds(core)):
            job = await create_published(m.requester, client, applicationCap=10, participantCap=2)
            await _apply(client, job["id"], applicant)
            invited, ran = await asyncio.gather(
                racer.post(
                    f"/api/v2/jobs/{job['id']}/invitations",
                    json={"workerAgentId": invitee.id},
                    headers=m.requester.h,
                ),
                racer.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=m.requester.h),
            )
            _no_5xx([invited, ran])
            assert ran.status_code == 200, ran.text
            invitations = [
                i.status
                for i in await _all(core, select(JobInvitation).where(JobInvitation.job_id == job["id"]))
            ]
            outcomes[f"invite {invited.status_code}, invitations {invitations}"] += 1
            if invited.status_code == 201:
                assert invitations == ["EXPIRED"], (invited.text, invitations)
            else:
                assert_problem(invited, 409, "invalid_state")
                assert invitations == []
            assert (await _job(core, job["id"])).reserved_participants == 1
            await _places_add_up(core, job["id"])
    print("invite vs admission close:", dict(outcomes))


async def test_admission_runs_exactly_once(
    app: Any, core: Core, client: Any, frozen_clock: clock.FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Two admission runs at once (by key, through the owner mirror), or one racing the sweeper at the very
    instant admission closes: one set of slots, each application decided and notified once, the losing
    request 409 invalid_state (a losing sweeper step logs its 409 and moves nothing)."""
    caplog.set_level(logging.ERROR, logger="callboard.sweeper")
    m = await _market(app, core, workers=4)
    outcomes: Counter[str] = Counter()
    # (who races, how late the second one starts, in ms): the sweeper needs a head start to win sometimes.
    variants = [
        ("key+key", 0),
        ("key+owner", 4),
        ("sweeper+key", 0),
        ("sweeper+owner", 15),
        ("sweeper+key", 30),
    ]
    for variant, late_ms in variants[: _rounds(core)]:
        job = await create_published(m.requester, client, applicationCap=10, participantCap=2)
        await _apply(client, job["id"], *m.workers)
        async with _racer(app) as agent, _racer(app, m.owner) as boss:
            calls: list[Awaitable[Any]] = []
            for who in variant.split("+"):
                if who == "key":
                    calls.append(agent.post(f"/api/v2/jobs/{job['id']}/admission/run", headers=m.requester.h))
                elif who == "owner":
                    calls.append(boss.post(f"/api/v2/owner/jobs/{job['id']}/admission/run"))
                else:
                    frozen_clock.advance(hours=1)  # exactly admissionClosesAt: the sweeper's job is due
                    calls.append(sweep(core))
            calls[1] = _delayed(late_ms, calls[1])
            results = await asyncio.gather(*calls)
        responses = [r for r in results if isinstance(r, httpx.Response)]
        swept = [r["admission"] for r in results if isinstance(r, dict)]
        _no_5xx(responses)
        assert sum(r.status_code == 200 for r in responses) + sum(swept) == 1, (
            variant,
            _summary(responses),
            swept,
        )
        for r in responses:
            if r.status_code != 200:
                assert_problem(r, 409, "invalid_state")
        outcomes[f"{variant}: {'sweeper' if sum(swept) else 'request'} closed"] += 1
        slots = await _slots(core, job["id"])
        assert len(slots) == 2 and all(s.status == "GRANTED" for s in slots), [s.status for s in slots]
        apps = await _all(core, select(JobApplication).where(JobApplication.job_id == job["id"]))
        assert Counter(a.status for a in apps) == Counter({"ADMITTED": 2, "WAITLISTED": 2})
        assert {s.application_id for s in slots} == {a.id for a in apps if a.status == "ADMITTED"}
        assert await _events(core, job["id"], "admission_closed") == 1
        assert await _events(core, job["id"], "slot_granted") == 2
        notes = await _all(
            core, select(AgentNotification.agent_id).where(AgentNotification.job_id == job["id"])
        )
        assert sorted(notes) == sorted(w.id for w in m.workers), notes  # one admission notice per applicant
        view = await _owner_view(m, job["id"])
        assert view["status"] == "IN_PROGRESS" and view["reservedParticipants"] == 2, view
        await _places_add_up(core, job["id"])
    assert not _sweeper_failures(caplog), [r.getMessage() for r in _sweeper_failures(caplog)]
    print("admission run twice:", dict(outcomes))


async def test_two_sweepers_at_once_move_each_deadline_once(
    app: Any, core: Core, client: Any, frozen_clock: clock.FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """`callboard serve` and `callboard worker` may sweep at the same moment: admissions due, open
    invitations and an unanswered Direct Hire, all due at once, each move exactly once. The sweepers
    overlap on every item (they list the same due rows), so the losing step must find the row moved and do
    nothing: no second event, notification or release of places, and no failed step but a lost
    compare-and-set."""
    caplog.set_level(logging.ERROR, logger="callboard.sweeper")
    m = await _market(app, core, workers=4)
    applicant, *invitees = m.workers
    for _ in range(_rounds(core)):
        jobs = []
        for invitee in invitees[:2]:
            job = await create_published(m.requester, client, applicationCap=10, participantCap=3)
            await _apply(client, job["id"], applicant)
            r = await client.post(
                f"/api/v2/jobs/{job['id']}/invitations",
                json={"workerAgentId": invitee.id},
                headers=m.requester.h,
            )
            assert r.status_code == 201, r.text
            jobs.append(job["id"])
        draft = await client.post(
            "/api/v2/jobs",
            headers=m.requester.h,
            json=job_body(directHireWorkerAgentId=invitees[2].id, participantCap=1),
        )
        assert draft.status_code == 201, draft.text
        direct = await client.post(f"/api/v2/jobs/{draft.json()['id']}/publish", headers=m.requester.h)
        assert direct.json()["status"] == "PENDING_ACCEPTANCE", direct.text

        frozen_clock.advance(hours=1)  # exactly admissionClosesAt and every invitation's expiry
        first, second = await asyncio.gather(sweep(core), sweep(core))
        assert first["admission"] + second["admission"] == len(jobs), (first, second)
        for job_id in jobs:
            assert await _events(core, job_id, "admission_closed") == 1
            invitation = (await _all(core, select(JobInvitation).where(JobInvitation.job_id == job_id)))[0]
            assert invitation.status == "EXPIRED"
            view = await _owner_view(m, job_id)
            assert view["status"] == "IN_PROGRESS" and view["reservedParticipants"] == 1, view
            await _places_add_up(core, job_id)
        direct_id = direct.json()["id"]
        assert (await _job(core, direct_id)).status == "CANCELLED"
        assert await _events(core, direct_id, "invitation_expired") == 1
        assert all([await _events(core, j, "invitation_expired") <= 1 for j in jobs])
        assert await _events(core, direct_id, "cancelled") == 1
        assert not any((await sweep(core)).values())  # nothing left for a third pass
    assert not _sweeper_failures(caplog), [r.getMessage() for r in _sweeper_failures(caplog)]


# --- 2. awards -----------------------------------------------------------------------------------


async def test_two_concurrent_awards_make_exactly_one(app: Any, core: Core, client: Any) -> None:
    """A job IN_REVIEW with two submissions; two awards at once (of different submissions, or of the same
    one; by the requester's key or its owner's mirror): one 200, one 409 (already_awarded or invalid_state),
    one award row, one AWARDED submission (the winner's), the job's awardedSubmissionId, and the workers'
    totals moved once."""
    m = await _market(app, core, workers=2)
    a, b = m.workers
    expected = {w.id: {"total": 0, "wins": 0} for w in m.workers}
    variants = [
        ("different", "key", "owner"),
        ("same", "key", "key"),
        ("different", "key", "key"),
        ("same", "owner", "key"),
        ("different", "owner", "owner"),
        ("same", "key", "owner"),
    ]
    outcomes: Counter[str] = Counter()
    for target, first, second in variants[: _rounds(core, sqlite=4)]:
        job_id, subs = await _in_review(client, core, m, a, b)
        picks = [subs[a.id], subs[b.id]] if target == "different" else [subs[a.id], subs[a.id]]
        async with _racer(app) as agent, _racer(app, m.owner) as boss:
            responses = list(
                await asyncio.gather(
                    *(
                        agent.post(
                            f"/api/v2/jobs/{job_id}/award", json={"submissionId": sub}, headers=m.requester.h
                        )
                        if who == "key"
                        else boss.post(f"/api/v2/owner/jobs/{job_id}/award", json={"submissionId": sub})
                        for who, sub in zip((first, second), picks, strict=True)
                    )
                )
            )
        _no_5xx(responses)
        assert sorted(r.status_code for r in responses) == [200, 409], (target, _summary(responses))
        won = next(r for r in responses if r.status_code == 200)
        code = assert_problem(next(r for r in responses if r.status_code == 409), 409)["code"]
        assert code in {"already_awarded", "invalid_state"}, code
        outcomes[f"{target}: loser {code}"] += 1
        winner_sub = won.json()["award"]["submissionId"]
        assert winner_sub in picks and won.json()["job"]["awardedSubmissionId"] == winner_sub
        awards = await _all(core, select(Award).where(Award.job_id == job_id))
        assert [(x.submission_id, x.worker_agent_id) for x in awards] == [
            (winner_sub, next(w for w, s in subs.items() if s == winner_sub))
        ]
        statuses = {
            x.id: x.status for x in await _all(core, select(Submission).where(Submission.job_id == job_id))
        }
        assert statuses == {s: ("AWARDED" if s == winner_sub else "NOT_AWARDED") for s in subs.values()}, (
            statuses
        )
        view = await _owner_view(m, job_id)
        assert view["status"] == "AWARDED" and view["awardedSubmissionId"] == winner_sub, view
        assert await _events(core, job_id, "awarded") == 1
        for worker_id, sub in subs.items():
            expected[worker_id]["total"] += 1
            expected[worker_id]["wins"] += int(sub == winner_sub)
        agents = await _all(core, select(Agent).where(Agent.id.in_(list(expected))))
        assert {x.id: {"total": x.total_tasks, "wins": x.win_count} for x in agents} == expected
    print("two awards:", dict(outcomes))


async def test_award_racing_no_award_closes_the_job_once(app: Any, core: Core, client: Any) -> None:
    """An award and a no-award of the same job at once: one 200, one 409 invalid_state; the job is either
    AWARDED with one award row, or NO_AWARD with none and no submission AWARDED."""
    m = await _market(app, core, workers=2)
    a, b = m.workers
    outcomes: Counter[str] = Counter()
    body = {"reasonCode": "NO_ACCEPTABLE_SUBMISSIONS"}
    for round_ in range(_rounds(core, pg=4, sqlite=2)):
        job_id, subs = await _in_review(client, core, m, a, b)
        async with _racer(app) as agent, _racer(app, m.owner) as boss:
            award = agent.post(
                f"/api/v2/jobs/{job_id}/award", json={"submissionId": subs[b.id]}, headers=m.requester.h
            )
            close = (
                boss.post(f"/api/v2/owner/jobs/{job_id}/no-award", json=body)
                if round_ % 2
                else agent.post(f"/api/v2/jobs/{job_id}/no-award", json=body, headers=m.requester.h)
            )
            awarded, closed = await asyncio.gather(award, close)
        _no_5xx([awarded, closed])
        assert sorted([awarded.status_code, closed.status_code]) == [200, 409], _summary([awarded, closed])
        assert_problem(awarded if awarded.status_code == 409 else closed, 409, "invalid_state")
        awards = await _all(core, select(Award.submission_id).where(Award.job_id == job_id))
        statuses = sorted(await _all(core, select(Submission.status).where(Submission.job_id == job_id)))
        view = await _owner_view(m, job_id)
        if awarded.status_code == 200:
            outcomes["award first"] += 1
            assert view["status"] == "AWARDED" and view["awardedSubmissionId"] == subs[b.id]
            assert awards == [subs[b.id]] and statuses == ["AWARDED", "NOT_AWARDED"]
        else:
            outcomes["no-award first"] += 1
            assert view["status"] == "NO_AWARD" and view["awardedSubmissionId"] is None
            assert awards == [] and statuses == ["NOT_AWARDED", "NOT_AWARDED"]
    print("award vs no-award:", dict(outcomes))


# --- 3. submissions: at once, and racing the work deadline ---------------------------------------


async def test_last_two_submissions_at_once_start_the_review(app: Any, core: Core, client: Any) -> None:
    """Both participants of a job submit at once: both 201, two submissions, and the job moves to IN_REVIEW
    (exactly one review_started event), as it does when they submit one after the other. Found on PostgreSQL
    (write skew): each submit counted the other's slot still ACKNOWLEDGED, neither moved the job, and it stayed
    IN_PROGRESS until the sweeper settled it at latestSubmissionDeadlineAt."""
    m = await _market(app, core, workers=2)
    outcomes: Counter[str] = Counter()
    async with _racer(app) as racer:
        for _ in range(_rounds(core)):
            job_id, slots = await _acknowledged(client, core, m, *m.workers)
            responses = list(
                await asyncio.gather(*(_submit_as(racer, m.worker(s.worker_agent_id), s.id) for s in slots))
            )
            _no_5xx(responses)
            assert [r.status_code for r in responses] == [201, 201], _summary(responses)
            assert await _count(core, Submission, Submission.job_id == job_id) == 2
            status = (await _owner_view(m, job_id))["status"]
            outcomes[status] += 1
            assert status == "IN_REVIEW", [r.json()["jobStatus"] for r in responses]
            assert await _events(core, job_id, "review_started") == 1
    print("two submissions at once:", dict(outcomes))


SUBMIT_LATE_MS = (0, 10, 20, 5, 30, 15)
_SKEW: ContextVar[timedelta] = ContextVar("race_clock_skew", default=timedelta(0))


class SkewedClock(clock.FrozenClock):
    """A frozen clock that reads later in a task that asks it to: the sweeper's pass a microsecond after the
    worker's request, both in flight at once in one process."""

    def now(self) -> datetime:
        return super().now() + _SKEW.get()


@pytest.fixture
def skewed_clock() -> Iterator[SkewedClock]:
    frozen = SkewedClock()
    previous = clock.set_clock(frozen)
    try:
        yield frozen
    finally:
        clock.set_clock(previous)


async def _later(by: timedelta, step: Callable[[], Awaitable[T]]) -> T:
    _SKEW.set(by)  # this task's context only
    return await step()


@dataclass
class AtDeadline:
    job_id: str
    slot_id: str
    worker: AgentHandle
    waiting: AgentHandle | None  # a waitlisted applicant the freed place would be re-offered to


async def _acknowledged_at_deadline(
    client: httpx.AsyncClient, core: Core, m: Market, frozen: clock.FrozenClock, *, with_waitlist: bool
) -> AtDeadline:
    """participantCap 1: a slot ACKNOWLEDGED, the clock moved to exactly its work deadline."""
    applicants = m.workers[:2] if with_waitlist else m.workers[:1]
    job_id, (slot,) = await _acknowledged(client, core, m, *applicants, participant_cap=1)
    async with core.uow(write=False) as uow:
        row = await uow.session.get(ParticipationSlot, slot.id)
        assert row is not None
        deadline = clock.as_utc(row.work_deadline_at)
    assert deadline is not None and deadline > clock.now()
    frozen.advance(microseconds=(deadline - clock.now()) // timedelta(microseconds=1))
    assert clock.now() == deadline
    worker = m.worker(slot.worker_agent_id)
    return AtDeadline(job_id, slot.id, worker, next((w for w in applicants if w is not worker), None))


async def _check_one_outcome(
    core: Core, at: AtDeadline, submitted: httpx.Response, swept: dict[str, int]
) -> str:
    """Either the submission exists and the slot is SUBMITTED (job IN_REVIEW), or the slot EXPIRED and there
    is no submission (the place re-offered to the waitlisted worker, else the job NO_AWARD): never both,
    never neither."""
    assert_not_5xx(submitted)
    slot = (await _all(core, select(ParticipationSlot).where(ParticipationSlot.id == at.slot_id)))[0]
    subs = await _all(core, select(Submission).where(Submission.slot_id == at.slot_id))
    job = await _job(core, at.job_id)
    others = [s for s in await _slots(core, at.job_id) if s.id != at.slot_id]
    if submitted.status_code == 201:
        assert slot.status == "SUBMITTED" and [s.id for s in subs] == [submitted.json()["id"]], slot.status
        assert swept["work"] == 0, swept
        assert job.status == "IN_REVIEW" and others == [], (job.status, others)
        outcome = "submitted"
    else:
        code = assert_problem(submitted, 409)["code"]
        assert code in {"work_deadline_passed", "invalid_state"}, submitted.text
        assert slot.status == "EXPIRED" and slot.end_reason == "work_deadline_missed", slot.status
        assert subs == [] and swept["work"] == 1, (subs, swept)
        if at.waiting is not None:
            assert job.status == "IN_PROGRESS", job.status
            assert [(s.worker_agent_id, s.status) for s in others] == [(at.waiting.id, "GRANTED")]
        else:
            assert job.status == "NO_AWARD" and others == [], (job.status, others)
        outcome = f"expired ({code})"
    await _places_add_up(core, at.job_id)
    return outcome


async def test_submit_at_and_just_after_its_deadline(
    app: Any, core: Core, client: Any, frozen_clock: clock.FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """At exactly the work deadline the submission is on time (work_deadline_at >= now) and the sweeper, running
    at the same instant, leaves the slot alone (work_deadline_at < now is false): 201, IN_REVIEW. A microsecond
    later it is late: alone, 409 work_deadline_passed and the slot stays ACKNOWLEDGED until the sweeper expires
    it; racing the sweeper, 409 too and the slot EXPIRED with no submission."""
    caplog.set_level(logging.ERROR, logger="callboard.sweeper")
    m = await _market(app, core, workers=2)
    outcomes: Counter[str] = Counter()
    variants = ["at deadline + sweeper", "after, alone", "after + sweeper"] * 2
    async with _racer(app) as racer:
        for round_, variant in enumerate(variants[: _rounds(core, pg=6)]):
            at = await _acknowledged_at_deadline(
                client, core, m, frozen_clock, with_waitlist=bool(round_ % 2)
            )
            if variant.startswith("after"):
                frozen_clock.advance(microseconds=1)
            if variant == "after, alone":
                submitted = await _submit_as(racer, at.worker, at.slot_id)
                assert_problem(submitted, 409, "work_deadline_passed")
                slot = (
                    await _all(core, select(ParticipationSlot).where(ParticipationSlot.id == at.slot_id))
                )[0]
                assert slot.status == "ACKNOWLEDGED"
                assert await _count(core, Submission, Submission.slot_id == at.slot_id) == 0
                swept = await sweep(core)
            else:
                submitted, swept = await asyncio.gather(_submit_as(racer, at.worker, at.slot_id), sweep(core))
            outcome = await _check_one_outcome(core, at, submitted, swept)
            assert (outcome == "submitted") if variant.startswith("at") else outcome.startswith("expired"), (
                outcome
            )
            outcomes[f"{variant}: {outcome}"] += 1
    assert not _sweeper_failures(caplog), [r.getMessage() for r in _sweeper_failures(caplog)]
    print("submit at / after the deadline:", dict(outcomes))


async def test_submit_racing_the_sweeper_has_exactly_one_outcome(
    app: Any, core: Core, client: Any, skewed_clock: SkewedClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker submits at its deadline while the sweeper, a microsecond later, expires overdue slots: both
    are entitled to the slot, one compare-and-set wins. Submitted (IN_REVIEW) or expired (re-offered or
    NO_AWARD), never both, never neither."""
    caplog.set_level(logging.ERROR, logger="callboard.sweeper")
    m = await _market(app, core, workers=2)
    outcomes: Counter[str] = Counter()
    async with _racer(app) as racer:
        for round_ in range(_rounds(core, pg=6)):
            at = await _acknowledged_at_deadline(
                client, core, m, skewed_clock, with_waitlist=bool(round_ % 2)
            )
            # The sweeper lists what is due before it moves anything: the submit starts 0-30 ms late, varying by
            # round, so that either side reaches the slot first.
            submitted, swept = await asyncio.gather(
                _delayed(
                    SUBMIT_LATE_MS[round_ % len(SUBMIT_LATE_MS)], _submit_as(racer, at.worker, at.slot_id)
                ),
                _later(timedelta(microseconds=1), lambda: sweep(core)),
            )
            outcomes[await _check_one_outcome(core, at, submitted, swept)] += 1
    assert not _sweeper_failures(caplog), [r.getMessage() for r in _sweeper_failures(caplog)]
    print("submit vs sweeper:", dict(outcomes))


# PostgreSQL: a submit's one read locks the job, then the slot (`participation.slot_with_job`).
HELD = 0.3  # how long a held-open transaction keeps the lock before it goes on
NOT_BLOCKED = 5.0  # far longer than any write here; a deadlock is found after PostgreSQL's 1 s


async def _submitting(app: Any, core: Core, client: Any) -> tuple[AgentHandle, str]:
    """A worker's acknowledged slot (its job has that one place)."""
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    job = await create_published(requester, client, participantCap=1)
    (slot_id,) = await acknowledged(client, job["id"], requester, [worker])
    return worker, slot_id


async def test_a_submit_waiting_for_another_reads_the_slot_as_it_was_left(
    app: Any, core: Core, client: Any
) -> None:
    """A second submit of one slot waits for the first's locks, then reads the slot as the first left it: 409
    `already_submitted` naming the first's submission. (A read that locked only the job would see the slot as
    its snapshot had it before the wait, pass its checks, lose the compare-and-set and answer a bare
    `invalid_state`.)"""
    postgres_only(core, "SQLite runs one write transaction at a time: the submits cannot overlap")
    worker, slot_id = await _submitting(app, core, client)
    path = f"/api/v2/participation-slots/{slot_id}/submit"
    async with core.uow() as uow:  # the first submit, held open before its commit
        first = await participation.submit(
            uow.session, core.blobs, Actor.agent(worker.id), slot_id, SubmitBody.model_validate(submit_body())
        )
        second = asyncio.create_task(client.post(path, headers=worker.h, json=submit_body()))
        await asyncio.sleep(HELD)
        assert not second.done(), "the second submit did not wait for the first"
    r = await asyncio.wait_for(second, NOT_BLOCKED)
    assert r.status_code == 409 and r.json()["code"] == "already_submitted", r.text
    assert r.json()["submissionId"] == first.id


async def test_a_submit_takes_the_jobs_lock_before_the_slots(app: Any, core: Core, client: Any) -> None:
    """A writer holding the job's lock that then changes the slot (as every writer of a job's slots does: job
    first) goes on while a submit waits: the submit's read took no slot lock before the job's, so no deadlock.
    The submit then sees the slot withdrawn: 409 `invalid_state`."""
    postgres_only(core, "SQLite runs one write transaction at a time: the writes cannot overlap")
    worker, slot_id = await _submitting(app, core, client)
    async with core.uow() as uow:
        job = (
            await uow.session.scalars(select(ParticipationSlot.job_id).where(ParticipationSlot.id == slot_id))
        ).one()
        await jobs_service.lock(uow.session, job)
        submit = asyncio.create_task(
            client.post(f"/api/v2/participation-slots/{slot_id}/submit", headers=worker.h, json=submit_body())
        )
        await asyncio.sleep(HELD)
        assert not submit.done(), "the submit did not wait for the job's lock"
        await asyncio.wait_for(
            uow.session.execute(
                update(ParticipationSlot)
                .where(ParticipationSlot.id == slot_id)
                .values(status=SlotStatus.WITHDRAWN, end_reason="withdrawn_by_worker")
            ),
            NOT_BLOCKED,
        )
    r = await asyncio.wait_for(submit, NOT_BLOCKED)
    assert r.status_code == 409 and r.json()["code"] == "invalid_state", r.text
    assert r.json()["currentState"] == SlotStatus.WITHDRAWN
