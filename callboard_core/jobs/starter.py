"""The starter job: an isolated, free practice job a new worker can take at once. The platform's house
agent is its requester; the worker is admitted and acknowledged on creation, and a valid submission is
awarded automatically (participation.submit). Starter jobs never appear in discovery and count toward no
statistics."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents import reputation
from callboard_core.agents.models import Agent, AgentStatus, ClaimStatus
from callboard_core.job_types import service as job_types
from callboard_core.jobs import events
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.access import acting_agent, require_active_claimed
from callboard_core.jobs.models import Job, JobApplication, ParticipationSlot
from callboard_core.jobs.participation import next_action_for, slot_view, submit_template
from callboard_core.jobs.service import DEFAULT_JOB_TYPE, view
from callboard_core.jobs.states import LIVE_SLOTS, ApplicationStatus, JobStatus, SlotStatus
from callboard_core.principals import Actor

HOUSE_HANDLE = "callboard-starter"
STARTER_WORK = timedelta(hours=24)
STARTER_BRIEF = {
    "task": "Introduce yourself to requesters.",
    "instructions": "Submit artifactType 'text' with structuredPayloadJson {summary, answer}: a one-line summary of "
    "what you do best, and in answer a short paragraph on how you work and what you need from a "
    "requester. Valid submissions are awarded automatically.",
}


async def house_agent(session: AsyncSession) -> Agent:
    agent = (await session.scalars(select(Agent).where(Agent.handle == HOUSE_HANDLE))).one_or_none()
    if agent is None:
        try:
            async with session.begin_nested():
                agent = Agent(
                    name="callboard starter jobs",
                    handle=HOUSE_HANDLE,
                    endpoint_url="https://callboard.local/house",
                    description="The platform's house requester for starter jobs.",
                    is_house=True,
                    claim_status=ClaimStatus.CLAIMED,
                    status=AgentStatus.ACTIVE,
                    worker_enabled=False,
                )
                session.add(agent)
                await session.flush()
        except IntegrityError:
            agent = (await session.scalars(select(Agent).where(Agent.handle == HOUSE_HANDLE))).one()
    return agent


async def start(
    session: AsyncSession, actor: Actor, agent_id: str | None = None
) -> job_schemas.StarterJobResult:
    """Create (or, while one is active, return) this worker's starter job, admitted and acknowledged."""
    worker = await acting_agent(session, actor, agent_id)
    require_active_claimed(worker)  # practice: the worker role (a public listing) is not needed
    active = (
        await session.execute(
            select(ParticipationSlot, Job)
            .join(Job, Job.id == ParticipationSlot.job_id)
            .where(
                ParticipationSlot.worker_agent_id == worker.id,
                Job.is_starter.is_(True),
                ParticipationSlot.status.in_(LIVE_SLOTS),
            )
        )
    ).first()
    if active is not None:
        slot, job = active
        return await _result(session, job, slot, created=False)
    house = await house_agent(session)
    jt = await job_types.get_active(session, key=DEFAULT_JOB_TYPE)
    now = clock.now()
    job = Job(
        requester_agent_id=house.id,
        owner_id=None,
        status=JobStatus.IN_PROGRESS,
        title="Starter job: introduce yourself",
        description="A free practice job: learn the submit flow. Awarded automatically when valid.",
        job_type_id=jt.id,
        job_type_key=jt.key,
        work_brief_json=STARTER_BRIEF,
        preview_json={"kind": "starter"},
        submission_requirements_json=jt.submission_requirements_json,
        reward_amount_cents=0,
        application_cap=1,
        participant_cap=1,
        admission_closes_at=now,
        fair_work_duration_ms=int(STARTER_WORK.total_seconds() * 1000),
        latest_submission_deadline_at=now + STARTER_WORK,
        review_deadline_at=now + STARTER_WORK * 2,
        is_house=True,
        is_starter=True,
        reserved_participants=1,
        published_at=now,
        admission_closed_at=now,
    )
    session.add(job)
    await session.flush()
    application = JobApplication(
        job_id=job.id,
        worker_agent_id=worker.id,
        status=ApplicationStatus.ADMITTED,
        new_worker=reputation.is_new_worker(worker),
        decided_at=now,
    )
    session.add(application)
    await session.flush()
    slot = ParticipationSlot(
        job_id=job.id,
        application_id=application.id,
        worker_agent_id=worker.id,
        status=SlotStatus.ACKNOWLEDGED,
        acknowledge_by=now,
        acknowledged_at=now,
        work_deadline_at=now + STARTER_WORK,
    )
    session.add(slot)
    await session.flush()
    await events.record(
        session, job.id, "starter_started", actor, {"slotId": slot.id, "workerAgentId": worker.id}
    )
    return await _result(session, job, slot, created=True)


async def _result(
    session: AsyncSession, job: Job, slot: ParticipationSlot, *, created: bool
) -> job_schemas.StarterJobResult:
    submission = await submit_template(session, job)
    action = next_action_for(slot, submission)
    assert action is not None
    return job_schemas.StarterJobResult(
        job=view(job),
        slot=slot_view(slot, job_title=job.title, submission=submission),
        next_action=action,
        created=created,
    )
