"""Admission and the flow of participant places.

At admissionClosesAt (or on POST admission/run) pending applications are ranked: tagged applicants before
rookies, then capability reputation, then application time. `newWorkerReservedSlotCount` places are held
for workers with no completed job; places the reservation cannot fill go to the next ranked applicant.
Admitted applicants get GRANTED slots; the rest wait (WAITLISTED) while a freed place can still be
re-offered with the full fair work duration before the latest submission deadline.

`Job.reserved_participants` counts places held: live or submitted slots plus pending invitations. Every
change to it is compare-and-set against participantCap, so concurrent grants never overfill a job.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, case, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from callboard_core import clock, states
from callboard_core.agent_notifications import service as notifications
from callboard_core.agents import reputation
from callboard_core.db.lookup import reread
from callboard_core.ids import new_id
from callboard_core.jobs import events
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.models import Job, JobApplication, JobInvitation, ParticipationSlot
from callboard_core.jobs.service import lock, move, requester_job, view
from callboard_core.jobs.states import (
    APPLICATION_MOVES,
    INVITATION_MOVES,
    LIVE_SLOTS,
    SLOT_MOVES,
    ApplicationStatus,
    InvitationStatus,
    JobStatus,
    SlotStatus,
)
from callboard_core.principals import SYSTEM, Actor

# How long an admitted worker has to acknowledge its slot (capped by the latest submission deadline).
ACK_WINDOW = timedelta(hours=1)
# Admission order, also used to re-offer freed places to the waitlist.
RANKING = (
    JobApplication.rookie,
    JobApplication.capability_reputation.desc(),
    JobApplication.created_at,
    JobApplication.id,
)


def acknowledge_by(job: Job, now: datetime) -> datetime:
    return min(now + ACK_WINDOW, job.latest_submission_deadline_at)


def reoffer_window_open(job: Job, now: datetime) -> bool:
    """A freed place is worth offering only while a newcomer still gets the full fair work duration."""
    return now + timedelta(milliseconds=job.fair_work_duration_ms) <= job.latest_submission_deadline_at


async def hold_places(
    session: AsyncSession, job_id: str, count: int = 1, *, status: JobStatus = JobStatus.IN_PROGRESS
) -> bool:
    """Take `count` participant places if the cap allows and the job is still in `status` (compare-and-set)."""
    result = await session.execute(
        update(Job)
        .where(
            Job.id == job_id, Job.status == status, Job.reserved_participants + count <= Job.participant_cap
        )
        .values(reserved_participants=Job.reserved_participants + count)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def release_places(session: AsyncSession, job_id: str, count: int = 1) -> None:
    if count:
        await session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                reserved_participants=case(
                    (Job.reserved_participants > count, Job.reserved_participants - count), else_=0
                )
            )
            .execution_options(synchronize_session=False)
        )


def new_slot_row(job: Job, application_id: str, worker_agent_id: str, now: datetime) -> dict:
    return dict(
        id=new_id("slt"),
        job_id=job.id,
        application_id=application_id,
        worker_agent_id=worker_agent_id,
        status=SlotStatus.GRANTED,
        acknowledge_by=acknowledge_by(job, now),
        created_at=now,
        updated_at=now,
    )


async def close_admission(session: AsyncSession, job: Job, actor: Actor | None = None) -> Job:
    """ADMISSION_OPEN to IN_PROGRESS, then admit; a job that ends with no participant becomes NO_AWARD."""
    now = clock.now()
    actor = actor or SYSTEM
    job = await move(session, job, "close_admission", JobStatus.IN_PROGRESS, admission_closed_at=now)
    # Pending invitations reserved places until now; unanswered, they lapse.
    lapsed = await states.compare_and_set_where(
        session,
        JobInvitation,
        INVITATION_MOVES,
        InvitationStatus.EXPIRED,
        JobInvitation.job_id == job.id,
        responded_at=now,
        updated_at=now,
    )
    await release_places(session, job.id, len(lapsed))
    await reread(session, job, "reserved_participants")

    ranked = (
        await session.execute(
            select(JobApplication.id, JobApplication.worker_agent_id, JobApplication.new_worker)
            .where(JobApplication.job_id == job.id, JobApplication.status == ApplicationStatus.PENDING)
            .order_by(*RANKING)
        )
    ).all()
    available = max(job.participant_cap - job.reserved_participants, 0)
    reserved_new = min(job.new_worker_reserved_slot_count, available)
    general = available - reserved_new
    admitted_idx = list(range(min(general, len(ranked))))
    rest = [i for i in range(len(admitted_idx), len(ranked))]
    new_ones = [i for i in rest if ranked[i].new_worker][:reserved_new]
    admitted_idx += new_ones
    leftover = available - len(admitted_idx)  # reservations no new worker claimed go to the next in rank
    if leftover > 0:
        chosen = set(admitted_idx)
        admitted_idx += [i for i in rest if i not in chosen][:leftover]
    admitted = set(admitted_idx)
    waiting_status = (
        ApplicationStatus.WAITLISTED if reoffer_window_open(job, now) else ApplicationStatus.NOT_ADMITTED
    )

    # Two set-based updates, not one per applicant: admission of thousands stays well under a second.
    admitted_ids = [ranked[i].id for i in sorted(admitted)]
    if admitted_ids:
        await states.compare_and_set_where(
            session,
            JobApplication,
            APPLICATION_MOVES,
            ApplicationStatus.ADMITTED,
            JobApplication.id.in_(admitted_ids),
            decided_at=now,
            updated_at=now,
        )
    if len(ranked) > len(admitted_ids):
        await states.compare_and_set_where(
            session,
            JobApplication,
            APPLICATION_MOVES,
            waiting_status,
            JobApplication.job_id == job.id,
            JobApplication.status == ApplicationStatus.PENDING,  # the ranked ones; none was waitlisted yet
            decided_at=now,
            updated_at=now,
        )
    slots = [new_slot_row(job, ranked[i].id, ranked[i].worker_agent_id, now) for i in sorted(admitted)]
    if slots:
        await session.execute(insert(ParticipationSlot), slots)
        await session.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(reserved_participants=Job.reserved_participants + len(slots))
            .execution_options(synchronize_session=False)
        )
        await reread(session, job, "reserved_participants")
    await events.record(
        session,
        job.id,
        "admission_closed",
        actor,
        {
            "applicants": len(ranked),
            "admitted": len(slots),
            "waitlisted": len(ranked) - len(slots) if waiting_status == ApplicationStatus.WAITLISTED else 0,
            "lapsedInvitations": len(lapsed),
        },
    )
    for slot in slots:
        await events.record(
            session,
            job.id,
            "slot_granted",
            SYSTEM,
            {
                "slotId": slot["id"],
                "workerAgentId": slot["worker_agent_id"],
                "acknowledgeBy": slot["acknowledge_by"].isoformat(),
            },
            notify=[slot["worker_agent_id"]],
            title=f"You were admitted: {job.title}",
            body=f"Acknowledge slot {slot['id']} before {slot['acknowledge_by'].isoformat()}: home lists it "
            "with the call to make.",
        )
    others = [ranked[i].worker_agent_id for i in range(len(ranked)) if i not in admitted]
    if others:
        waiting = waiting_status == ApplicationStatus.WAITLISTED
        await notifications.notify(
            session,
            others,
            "application_waitlisted" if waiting else "application_not_admitted",
            f"{'Waitlisted' if waiting else 'Not admitted'}: {job.title}",
            job_id=job.id,
            body="You will be offered a place if one frees up." if waiting else None,
        )
    if job.reserved_participants == 0:
        job = await move(
            session,
            job,
            "nothing_submitted",
            JobStatus.NO_AWARD,
            closed_at=now,
            no_award_reason_code="NO_SUBMISSIONS",
            no_award_reason_text="Nobody was admitted.",
        )
        await events.record(
            session,
            job.id,
            "closed_no_award",
            SYSTEM,
            {"reasonCode": "NO_SUBMISSIONS"},
            notify=[job.requester_agent_id],
            title=f"No participants: {job.title}",
        )
    return job


async def run_now(session: AsyncSession, actor: Actor, job_id: str) -> job_schemas.JobView:
    """The requester closes admission early (POST admission/run)."""
    return view(
        await close_admission(session, await requester_job(session, actor, job_id, for_update=True), actor)
    )


async def reoffer(session: AsyncSession, job: Job) -> int:
    """Offer freed places to waitlisted applicants in rank order, while the window allows."""
    now = clock.now()
    granted = 0
    while job.status == JobStatus.IN_PROGRESS and reoffer_window_open(job, now):
        candidate = (
            await session.execute(
                select(JobApplication.id, JobApplication.worker_agent_id)
                .where(JobApplication.job_id == job.id, JobApplication.status == ApplicationStatus.WAITLISTED)
                .order_by(*RANKING)
                .limit(1)
            )
        ).one_or_none()
        if candidate is None or not await hold_places(session, job.id):
            break
        moved = await states.compare_and_set(
            session,
            JobApplication,
            candidate.id,
            APPLICATION_MOVES,
            ApplicationStatus.ADMITTED,
            decided_at=now,
            updated_at=now,
        )
        if moved is None:
            await release_places(session, job.id)
            continue
        slot = new_slot_row(job, candidate.id, candidate.worker_agent_id, now)
        await session.execute(insert(ParticipationSlot), [slot])
        granted += 1
        await events.record(
            session,
            job.id,
            "slot_reoffered",
            SYSTEM,
            {"slotId": slot["id"], "workerAgentId": candidate.worker_agent_id},
            notify=[candidate.worker_agent_id],
            title=f"A place opened up: {job.title}",
            body=f"Acknowledge slot {slot['id']} before {slot['acknowledge_by'].isoformat()}: home lists it "
            "with the call to make.",
        )
    await reread(session, job)
    return granted


async def end_slot(
    session: AsyncSession,
    slot: ParticipationSlot,
    target: SlotStatus,
    reason: str,
    actor: Actor | None = None,
    *,
    deadline_column: str | None = None,
) -> bool:
    """GRANTED/ACKNOWLEDGED to EXPIRED or WITHDRAWN (compare-and-set), release its place, re-offer it, settle
    the job. With deadline_column the move happens only if that deadline has passed (the sweeper's guard
    against a worker acting at the last moment). Returns False when the slot had already moved."""
    now = clock.now()
    await lock(session, slot.job_id)
    guards = [getattr(ParticipationSlot, deadline_column) < now] if deadline_column else []
    moved = await states.compare_and_set(
        session,
        ParticipationSlot,
        slot.id,
        SLOT_MOVES,
        target,
        *guards,
        ended_at=now,
        end_reason=reason,
        updated_at=now,
    )
    if moved is None:
        return False
    await release_places(session, slot.job_id)
    job = await session.get(Job, slot.job_id, populate_existing=True)
    assert job is not None
    if target == SlotStatus.EXPIRED and not job.is_starter:  # a missed deadline counts against the worker
        await reputation.record_expiry(session, slot.worker_agent_id, job.capability_tag_id)
    kind = "slot_expired" if target == SlotStatus.EXPIRED else "slot_withdrawn"
    await events.record(
        session,
        job.id,
        kind,
        actor or SYSTEM,
        {"slotId": slot.id, "reason": reason},
        notify=[slot.worker_agent_id] if target == SlotStatus.EXPIRED else (),
        title=f"Your slot expired: {job.title}",
    )
    if job.status == JobStatus.IN_PROGRESS:
        await reoffer(session, job)
        await settle(session, job)
    return True


def _count(model: type[ParticipationSlot | JobApplication], *where: Any) -> Any:
    return (
        select(func.count())
        .select_from(model)
        .where(model.job_id == bindparam("p_job"), *where)
        .scalar_subquery()
    )


# Every submit and every slot's end asks it: built once.
_WORK_COUNTS = select(
    _count(ParticipationSlot, states.one_of(ParticipationSlot.status, LIVE_SLOTS)),
    _count(JobApplication, JobApplication.status == ApplicationStatus.WAITLISTED),
    _count(ParticipationSlot, ParticipationSlot.status == SlotStatus.SUBMITTED),
)


# The same counts, for a statement that moves one slot of the job (`p_slot`) to SUBMITTED and returns them:
# "other" slots leave that one out, so the answer is the same whether the database evaluates them before the
# move (PostgreSQL: the statement's snapshot) or after it (SQLite), and the moved slot adds one submitted.
_OTHER_SLOTS = aliased(ParticipationSlot)
WORK_COUNTS_BESIDE = (
    _count(
        _OTHER_SLOTS, states.one_of(_OTHER_SLOTS.status, LIVE_SLOTS), _OTHER_SLOTS.id != bindparam("p_slot")
    ),
    _count(JobApplication, JobApplication.status == ApplicationStatus.WAITLISTED),
    _count(_OTHER_SLOTS, _OTHER_SLOTS.status == SlotStatus.SUBMITTED, _OTHER_SLOTS.id != bindparam("p_slot")),
)


def counts_beside(row: Any) -> tuple[int, int, int]:
    """`_work_counts` from a row ending with `WORK_COUNTS_BESIDE` (its slot just SUBMITTED)."""
    live, waiting, submitted = row[-3:]
    return int(live), int(waiting), int(submitted) + 1


async def _work_counts(session: AsyncSession, job_id: str) -> tuple[int, int, int]:
    """(slots still working, applications waitlisted, slots submitted) of a job, in one statement."""
    live, waiting, submitted = (await session.execute(_WORK_COUNTS, {"p_job": job_id})).one()
    return int(live), int(waiting), int(submitted)


async def settle(
    session: AsyncSession,
    job: Job,
    *,
    deadline_passed: bool = False,
    counts: tuple[int, int, int] | None = None,
) -> Job:
    """An IN_PROGRESS job whose work is over moves on: to IN_REVIEW with submissions, else NO_AWARD.
    `counts`: the job's work counts (`_work_counts`) as the caller's own statement returned them."""
    if job.status != JobStatus.IN_PROGRESS:
        return job
    now = clock.now()
    live, waiting, submitted = counts if counts is not None else await _work_counts(session, job.id)
    if live and not deadline_passed:
        return job
    if (
        waiting
        and not deadline_passed
        and reoffer_window_open(job, now)
        and job.reserved_participants < job.participant_cap
    ):
        return job
    if waiting:
        await states.compare_and_set_where(
            session,
            JobApplication,
            APPLICATION_MOVES,
            ApplicationStatus.NOT_ADMITTED,
            JobApplication.job_id == job.id,
            JobApplication.status == ApplicationStatus.WAITLISTED,  # pending ones were decided at admission
            updated_at=now,
        )
    if submitted:
        job = await move(session, job, "start_review", JobStatus.IN_REVIEW, review_started_at=now)
        await events.record(
            session,
            job.id,
            "review_started",
            SYSTEM,
            {"submissions": submitted},
            notify=[job.requester_agent_id],
            title=f"Submissions ready for review: {job.title}",
            body="Read the review packets, then award one or close without a winner before "
            f"{job.review_deadline_at.isoformat()}: home lists it with the call to make.",
        )
    else:
        job = await move(
            session,
            job,
            "nothing_submitted",
            JobStatus.NO_AWARD,
            closed_at=now,
            no_award_reason_code="NO_SUBMISSIONS",
            no_award_reason_text="No participant submitted.",
        )
        await events.record(
            session,
            job.id,
            "closed_no_award",
            SYSTEM,
            {"reasonCode": "NO_SUBMISSIONS"},
            notify=[job.requester_agent_id],
            title=f"No submissions: {job.title}",
        )
    return job
