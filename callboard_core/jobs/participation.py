"""Jobs, worker side: apply, withdraw, acknowledge, upload, submit; the worker's views of jobs and slots."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, bindparam, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from callboard_core import clock, states
from callboard_core.agents import reputation
from callboard_core.agents.models import Agent
from callboard_core.blobs import BlobStore
from callboard_core.config import Settings
from callboard_core.db.engine import writes_serialised
from callboard_core.db.lookup import by_pk, note_locked, reread
from callboard_core.db.readcache import ReadCache
from callboard_core.db.rows import insert_at_commit
from callboard_core.db.uow import add_or_conflict
from callboard_core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from callboard_core.files import service as files
from callboard_core.files.models import FileKind
from callboard_core.files.schemas import FileView, UploadRequest, UploadTicket
from callboard_core.guidance import Act, step
from callboard_core.job_types import service as job_types
from callboard_core.jobs import admission, events, review
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.access import (
    ACTS_FOR,
    WITHOUT_CAPABILITIES,
    acting_agent,
    actor_kind,
    may_act_for,
    require_can_work,
    worker_row,
)
from callboard_core.jobs.models import (
    Job,
    JobApplication,
    JobClarification,
    JobInvitation,
    ParticipationSlot,
    Submission,
    SubmissionFile,
)
from callboard_core.jobs.service import get, input_file_list, is_requester, lock, preview, view
from callboard_core.jobs.states import (
    APPLICATION_MOVES,
    ENDED_SLOTS,
    SLOT_MOVES,
    ApplicationStatus,
    JobStatus,
    SlotStatus,
    SubmissionStatus,
)
from callboard_core.principals import SYSTEM, Actor
from callboard_core.schemas import JsonObject

# --- views ---------------------------------------------------------------------------------------


# Deadline guards of a slot's moves, on the table's columns and built once (states.compare_and_set).
_SLOT_COLUMNS = cast(Table, ParticipationSlot.__table__).c
_ACK_IN_TIME = _SLOT_COLUMNS.acknowledge_by >= bindparam("w_now")
_WORK_IN_TIME = or_(
    _SLOT_COLUMNS.work_deadline_at.is_(None), _SLOT_COLUMNS.work_deadline_at >= bindparam("w_now")
)

# A submit's move (as `states.compare_and_set` makes it, within the work deadline), returning the job's work
# counts beside it for `admission.settle`: one statement where the move and the count were two.
_SUBMIT = states.batch_move(
    ParticipationSlot,
    SLOT_MOVES,
    SlotStatus.SUBMITTED,
    _SLOT_COLUMNS.id == bindparam("p_slot"),
    _WORK_IN_TIME,
    submitted_at=bindparam("p_now"),
    updated_at=bindparam("p_now"),
).returning(*admission.WORK_COUNTS_BESIDE)

_APPLICATION_OF = select(JobApplication).where(
    JobApplication.job_id == bindparam("p_job"), JobApplication.worker_agent_id == bindparam("p_worker")
)


def _take_place(new_worker: bool) -> Any:
    """An application's place in the job's pool, by a guarded increment (applicationCap; a seasoned worker
    also leaves the places held for new workers), built once per kind of worker on the table's columns
    (an ORM-enabled UPDATE would compute its cache key on every run: states._moving)."""
    jobs = cast(Table, Job.__table__).c
    cond = [
        jobs.id == bindparam("p_job"),
        jobs.status == JobStatus.ADMISSION_OPEN.value,
        jobs.application_count < jobs.application_cap,
    ]
    if not new_worker:
        cond.append(
            jobs.application_count - jobs.new_worker_application_count
            < jobs.application_cap - jobs.new_worker_reserved_application_count
        )
    return (
        update(cast(Table, Job.__table__))
        .where(*cond)
        .values(
            application_count=jobs.application_count + 1,
            new_worker_application_count=jobs.new_worker_application_count + int(new_worker),
        )
    )


_TAKE_PLACE = {kind: _take_place(kind) for kind in (False, True)}


def application_view(app: JobApplication, slot_id: str | None = None) -> job_schemas.ApplicationView:
    return job_schemas.ApplicationView(
        id=app.id,
        job_id=app.job_id,
        worker_agent_id=app.worker_agent_id,
        status=app.status,
        rookie=app.rookie,
        new_worker=app.new_worker,
        slot_id=slot_id,
        created_at=app.created_at,
        decided_at=app.decided_at,
        withdrawn_at=app.withdrawn_at,
    )


def next_action_for(
    slot: ParticipationSlot, submission: JsonObject | None = None
) -> job_schemas.NextAction | None:
    """The slot's next call; `submission` is the submit body to fill in (submit_template), when known."""
    if slot.status == SlotStatus.GRANTED:
        return job_schemas.NextAction(
            act=Act.ACKNOWLEDGE_SLOT,
            args={"slot_id": slot.id, "job_id": slot.job_id},
            description=f"Acknowledge before {slot.acknowledge_by.isoformat()}: it unlocks the brief and "
            "starts your work clock.",
        )
    if slot.status == SlotStatus.ACKNOWLEDGED:
        deadline = slot.work_deadline_at.isoformat() if slot.work_deadline_at else "the work deadline"
        return job_schemas.NextAction(
            act=Act.SUBMIT_WORK,
            args={"slot_id": slot.id, "job_id": slot.job_id},
            description=f"Read the brief ({{READ_JOB}}), do the work, then submit before {deadline}: fill in "
            "structuredPayloadJson (the job type's artifact schema; the empty strings are yours to write). "
            "Deliverable files go up first ({UPLOAD_FILE}) and are named in files by their uploadId.",
            body=submission or {"artifactType": "text", "structuredPayloadJson": {}, "files": []},
        )
    return None


async def submit_template(session: AsyncSession, job: Job, cache: ReadCache | None = None) -> JsonObject:
    """The submit body a worker fills in: the job's first artifact type and its type's required fields
    (strings empty, to be written). `cache`: the job type's rules come through its taxonomy scope."""
    kinds = (job.submission_requirements_json or {}).get("artifactTypes") or ["text"]
    payload: JsonObject = {}
    if job.job_type_id:
        schema = (await job_types.rules(session, job.job_type_id, cache)).artifact_schema_json or {}
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            payload[name] = "" if (properties.get(name) or {}).get("type") == "string" else None
    return {"artifactType": kinds[0], "structuredPayloadJson": payload, "files": []}


def slot_view(
    slot: ParticipationSlot,
    *,
    submission_id: str | None = None,
    job_title: str | None = None,
    submission: JsonObject | None = None,
) -> job_schemas.SlotView:
    return job_schemas.SlotView(
        id=slot.id,
        job_id=slot.job_id,
        application_id=slot.application_id,
        worker_agent_id=slot.worker_agent_id,
        status=slot.status,
        acknowledge_by=slot.acknowledge_by,
        acknowledged_at=slot.acknowledged_at,
        work_deadline_at=slot.work_deadline_at,
        submitted_at=slot.submitted_at,
        ended_at=slot.ended_at,
        end_reason=slot.end_reason,
        submission_id=submission_id,
        job_title=job_title,
        next_action=next_action_for(slot, submission),
        created_at=slot.created_at,
    )


def submission_view(sub: Submission, job_status: str | None = None) -> job_schemas.SubmissionView:
    return job_schemas.SubmissionView(
        id=sub.id,
        job_id=sub.job_id,
        slot_id=sub.slot_id,
        worker_agent_id=sub.worker_agent_id,
        status=sub.status,
        artifact_type=sub.artifact_type,
        created_at=sub.created_at,
        decided_at=sub.decided_at,
        job_status=job_status,
    )


# --- lookups -------------------------------------------------------------------------------------


async def worker_slot(session: AsyncSession, actor: Actor, slot_id: str) -> tuple[ParticipationSlot, Agent]:
    """The slot, if the actor is its worker (or the worker's owner); else 404."""
    return await worker_row(
        session, actor, ParticipationSlot, slot_id, what="participation slot", code="slot_not_found"
    )


# A slot with its worker and its job, in one read (the job freshly read: `lock` on SQLite, where the write
# transaction is the lock).
_SLOT_WORKER_JOB = (
    select(ParticipationSlot, Agent, Job)
    .join(Agent, Agent.id == ParticipationSlot.worker_agent_id)
    .join(Job, Job.id == ParticipationSlot.job_id)
    .where(ParticipationSlot.id == bindparam("p_id"))
    .options(*WITHOUT_CAPABILITIES)
    .execution_options(populate_existing=True)
)


@functools.cache
def _slot_worker_job_locked(kind: str) -> Any:
    """PostgreSQL: `_SLOT_WORKER_JOB` for a slot whose worker the actor may act for (`ACTS_FOR`, by kind),
    locking the job's row, then the slot's (FOR UPDATE OF in that order, the order every writer of a job's
    slots takes them: the job first). A read that waited for a lock returns both rows as their last writer
    left them (PostgreSQL re-reads a locked row's newest version); the worker as the statement found it. A
    slot that is not the actor's locks nothing."""
    statement = _SLOT_WORKER_JOB.with_for_update(of=(Job, ParticipationSlot))
    return statement if ACTS_FOR[kind] is None else statement.where(ACTS_FOR[kind])


async def slot_with_job(
    session: AsyncSession, actor: Actor, slot_id: str, *, locked: bool = False
) -> tuple[ParticipationSlot, Agent, Job]:
    """The slot, if the actor is its worker (or the worker's owner), with its worker and its job, all read
    now; else 404. `locked`: the job's row is locked, then the slot's (`lock`): both stay as read until the
    transaction ends. One read: where writes are serialised the transaction is the lock; on PostgreSQL the
    read takes both row locks (`_slot_worker_job_locked`)."""
    found = None
    if locked and not writes_serialised(session):
        acting = actor_kind(actor)
        if acting is not None:
            kind, params = acting
            found = (
                await session.execute(_slot_worker_job_locked(kind), {"p_id": slot_id, **params})
            ).first()
    else:
        found = (await session.execute(_SLOT_WORKER_JOB, {"p_id": slot_id})).first()
    if found is None or not may_act_for(actor, found[1]):
        raise NotFound("No such participation slot.", code="slot_not_found")
    if locked:
        # Every writer of a job's slots takes the job's lock first (`lock`): the job and the slot stay as
        # read until the transaction ends (lookup.current).
        note_locked(session, [found[0], found[2]])
    return found[0], found[1], found[2]


async def _submission_id(session: AsyncSession, slot_id: str) -> str | None:
    return (await session.scalars(select(Submission.id).where(Submission.slot_id == slot_id))).one_or_none()


async def _title(session: AsyncSession, job_id: str) -> str | None:
    return (await session.scalars(select(Job.title).where(Job.id == job_id))).one_or_none()


# --- applications --------------------------------------------------------------------------------


async def apply(
    session: AsyncSession, actor: Actor, job_id: str, worker_agent_id: str | None = None
) -> job_schemas.ApplicationView:
    """Apply to an open job: one application per worker and job, within applicationCap (new-worker places
    held back for workers with no completed job), never to a job of the worker's own owner."""
    worker = await acting_agent(session, actor, worker_agent_id)
    require_can_work(worker, role="worker")
    job = await by_pk(session, Job, job_id)
    # Drafts, starter jobs and other workers' Direct Hires are invisible; a closed job says so (409 below).
    if (
        job is None
        or job.is_starter
        or (job.status == JobStatus.DRAFT and not is_requester(actor, job))
        or job.direct_hire_worker_agent_id not in (None, worker.id)
    ):
        raise NotFound("No such job.", code="job_not_found")
    if job.owner_id is not None and job.owner_id == worker.owner_id:
        raise Forbidden("An agent cannot apply to a job of its own owner.", code="own_job")
    existing = (
        await session.scalars(_APPLICATION_OF, {"p_job": job.id, "p_worker": worker.id})
    ).one_or_none()
    if existing is not None:
        raise Conflict(
            "This agent has already applied to this job.",
            code="already_applied",
            application_id=existing.id,
            current_state=existing.status,
            next_action=step(Act.READ_JOB, "Your application and slot on this job.", job_id=job.id),
        )
    if job.status != JobStatus.ADMISSION_OPEN:
        # A job out of admission is visible only to those taking part (worker_job_view): to anyone else
        # it is a 404 here too, never a hint that it exists.
        if job.direct_hire_worker_agent_id != worker.id and not await _invited(session, job.id, worker.id):
            raise NotFound("No such job.", code="job_not_found")
        raise Conflict(
            "Admission to this job is closed.",
            code="admission_closed",
            current_state=job.status,
            next_action=step(Act.FIND_WORK, "Find another open job."),
        )
    standing = await reputation.capability_standing(session, worker.id, job.capability_tag_id)
    new_worker = reputation.is_new_worker(worker)
    taken = await session.execute(_TAKE_PLACE[new_worker], {"p_job": job.id})
    if not taken.rowcount:  # type: ignore[attr-defined]
        await reread(session, job)
        if job.status != JobStatus.ADMISSION_OPEN:
            raise Conflict(
                "Admission to this job is closed.",
                code="admission_closed",
                current_state=job.status,
                next_action=step(Act.FIND_WORK, "Find another open job."),
            )
        raise Conflict(
            "This job has all the applications it accepts."
            + ("" if new_worker else " Some places are held for new workers."),
            code="application_cap_reached",
            application_cap=job.application_cap,
        )
    application = JobApplication(
        job_id=job.id,
        worker_agent_id=worker.id,
        rookie=standing.rookie,
        new_worker=new_worker,
        capability_reputation=standing.reputation,
    )
    await add_or_conflict(
        session, application, Conflict("This agent has already applied to this job.", code="already_applied")
    )
    await events.record(
        session,
        job.id,
        "application_received",
        actor,
        {"applicationId": application.id, "workerAgentId": worker.id, "rookie": standing.rookie},
    )
    return application_view(application)


async def release_application_place(session: AsyncSession, app: JobApplication) -> None:
    """A PENDING application leaves the pool: it no longer counts against applicationCap (nor, for a new
    worker, against the reserved new-worker applications)."""
    await session.execute(
        update(Job)
        .where(Job.id == app.job_id)
        .values(
            application_count=Job.application_count - 1,
            new_worker_application_count=Job.new_worker_application_count - int(app.new_worker),
        )
        .execution_options(synchronize_session=False)
    )


async def withdraw_application(
    session: AsyncSession, actor: Actor, application_id: str
) -> job_schemas.ApplicationView:
    app, _ = await worker_row(
        session, actor, JobApplication, application_id, what="application", code="application_not_found"
    )
    await lock(session, app.job_id)
    await reread(session, app)
    now = clock.now()
    if app.status == ApplicationStatus.ADMITTED:
        slot = (
            await session.scalars(select(ParticipationSlot).where(ParticipationSlot.application_id == app.id))
        ).one_or_none()
        if slot is not None and slot.status == SlotStatus.SUBMITTED:
            raise Conflict(
                "This application's work is already submitted; it can no longer be withdrawn.",
                code="already_submitted",
                current_state=app.status,
            )
    previous = app.status
    moved = await states.compare_and_set(
        session,
        JobApplication,
        app.id,
        APPLICATION_MOVES,
        ApplicationStatus.WITHDRAWN,
        withdrawn_at=now,
        updated_at=now,
    )
    if moved is None:
        await reread(session, app)
        raise Conflict(
            f"This application is {app.status}; it cannot be withdrawn.",
            code="invalid_state",
            current_state=app.status,
        )
    if previous == ApplicationStatus.PENDING:
        await release_application_place(session, app)
    await events.record(session, app.job_id, "application_withdrawn", actor, {"applicationId": app.id})
    if previous == ApplicationStatus.ADMITTED:
        slot = (
            await session.scalars(select(ParticipationSlot).where(ParticipationSlot.application_id == app.id))
        ).one_or_none()
        if slot is not None:
            await admission.end_slot(session, slot, SlotStatus.WITHDRAWN, "application_withdrawn", actor)
    return application_view(app)


async def my_applications(
    session: AsyncSession, actor: Actor, agent_id: str | None = None
) -> job_schemas.ApplicationList:
    worker = await acting_agent(session, actor, agent_id)
    rows = (
        await session.execute(
            select(JobApplication, ParticipationSlot.id)
            .outerjoin(ParticipationSlot, ParticipationSlot.application_id == JobApplication.id)
            .where(JobApplication.worker_agent_id == worker.id)
            .order_by(JobApplication.created_at.desc(), JobApplication.id.desc())
            .limit(200)
        )
    ).all()
    return job_schemas.ApplicationList(applications=[application_view(app, slot_id) for app, slot_id in rows])


async def my_slots(session: AsyncSession, actor: Actor, agent_id: str | None = None) -> job_schemas.SlotList:
    worker = await acting_agent(session, actor, agent_id)
    rows = (
        await session.execute(
            select(ParticipationSlot, Job.title, Submission.id)
            .join(Job, Job.id == ParticipationSlot.job_id)
            .outerjoin(Submission, Submission.slot_id == ParticipationSlot.id)
            .where(ParticipationSlot.worker_agent_id == worker.id)
            .order_by(ParticipationSlot.created_at.desc(), ParticipationSlot.id.desc())
            .limit(200)
        )
    ).all()
    return job_schemas.SlotList(
        slots=[slot_view(slot, submission_id=sub_id, job_title=title) for slot, title, sub_id in rows]
    )


async def get_slot(session: AsyncSession, actor: Actor, slot_id: str) -> job_schemas.SlotView:
    slot, _ = await worker_slot(session, actor, slot_id)
    return slot_view(
        slot,
        submission_id=await _submission_id(session, slot.id),
        job_title=await _title(session, slot.job_id),
    )


# --- the job as a worker sees it -----------------------------------------------------------------


async def _invited(session: AsyncSession, job_id: str, agent_id: str) -> bool:
    found = await session.scalars(
        select(JobInvitation.id).where(
            JobInvitation.job_id == job_id, JobInvitation.worker_agent_id == agent_id
        )
    )
    return found.first() is not None


async def worker_job_view(session: AsyncSession, actor: Actor, job_id: str) -> job_schemas.WorkerJobView:
    """The preview for any open job; the whole job (brief included) once the caller acknowledged a slot.
    The requester sees its whole job. Anything else is a 404."""
    job = await get(session, job_id)
    if is_requester(actor, job):
        return job_schemas.WorkerJobView(
            job=view(job), brief_unlocked=True, clarifications=await _clarifications(session, job.id)
        )
    agent_id = actor.agent_id
    application = slot = None
    if agent_id is not None:
        application = (
            await session.scalars(
                select(JobApplication).where(
                    JobApplication.job_id == job.id, JobApplication.worker_agent_id == agent_id
                )
            )
        ).one_or_none()
        slot = (
            await session.scalars(
                select(ParticipationSlot)
                .where(ParticipationSlot.job_id == job.id, ParticipationSlot.worker_agent_id == agent_id)
                .order_by(ParticipationSlot.created_at.desc())
                .limit(1)
            )
        ).one_or_none()
    invited = agent_id is not None and await _invited(session, job.id, agent_id)
    discoverable = (
        job.status == JobStatus.ADMISSION_OPEN
        and not job.is_starter
        and job.direct_hire_worker_agent_id is None
    )
    if not (discoverable or application or slot or invited):
        raise NotFound("No such job.", code="job_not_found")
    unlocked = slot is not None and slot.status in (SlotStatus.ACKNOWLEDGED, SlotStatus.SUBMITTED)
    rookie = (
        agent_id is not None
        and (await reputation.capability_standing(session, agent_id, job.capability_tag_id)).rookie
    )
    return job_schemas.WorkerJobView(
        job=view(job) if unlocked else preview(job, rookie=rookie),
        brief_unlocked=unlocked,
        my_application=application_view(application, slot.id if slot else None) if application else None,
        my_slot=slot_view(slot, submission_id=await _submission_id(session, slot.id)) if slot else None,
        clarifications=await _clarifications(session, job.id) if slot is not None else [],
    )


async def _clarifications(session: AsyncSession, job_id: str) -> list[job_schemas.ClarificationView]:
    rows = (
        await session.scalars(
            select(JobClarification)
            .where(JobClarification.job_id == job_id)
            .order_by(JobClarification.created_at, JobClarification.id)
        )
    ).all()
    return [
        job_schemas.ClarificationView(id=c.id, job_id=c.job_id, body=c.body, created_at=c.created_at)
        for c in rows
    ]


# --- acknowledge, files, submit, withdraw --------------------------------------------------------


async def acknowledge(
    session: AsyncSession, actor: Actor, slot_id: str, cache: ReadCache | None = None
) -> job_schemas.SlotView:
    """GRANTED to ACKNOWLEDGED before the acknowledgement deadline; starts the work clock: the work deadline is
    the earlier of now + fairWorkDurationMs and the job's latest submission deadline. `cache`: the read
    cache, for the job type the answer's submit template names."""
    slot, _, job = await slot_with_job(session, actor, slot_id)
    now = clock.now()
    deadline = min(now + timedelta(milliseconds=job.fair_work_duration_ms), job.latest_submission_deadline_at)
    moved = await states.compare_and_set(
        session,
        ParticipationSlot,
        slot.id,
        SLOT_MOVES,
        SlotStatus.ACKNOWLEDGED,
        _ACK_IN_TIME,
        where_params={"w_now": now},
        acknowledged_at=now,
        work_deadline_at=deadline,
        updated_at=now,
    )
    if moved is None:
        await reread(session, slot)
        if slot.status in SLOT_MOVES[SlotStatus.ACKNOWLEDGED]:  # still could move: the deadline said no
            raise Conflict(
                "The acknowledgement deadline has passed; the slot is expiring.",
                code="acknowledgement_deadline_passed",
                next_action=step(Act.HOME, "See what is still open for you."),
                current_state=slot.status,
                acknowledge_by=slot.acknowledge_by.isoformat(),
            )
        if slot.status == SlotStatus.ACKNOWLEDGED:
            # A retried acknowledgement changes nothing.
            return slot_view(slot, job_title=job.title, submission=await submit_template(session, job, cache))
        raise Conflict(f"This slot is {slot.status}.", code="invalid_state", current_state=slot.status)
    await events.record(
        session,
        job.id,
        "slot_acknowledged",
        actor,
        {"slotId": slot.id, "workDeadlineAt": deadline.isoformat()},
    )
    return slot_view(slot, job_title=job.title, submission=await submit_template(session, job, cache))


def _unlocked(slot: ParticipationSlot) -> None:
    if slot.status not in (SlotStatus.ACKNOWLEDGED, SlotStatus.SUBMITTED):
        raise Conflict(
            "Acknowledge the slot first: the brief and input files unlock on acknowledgement.",
            code="slot_not_acknowledged",
            next_action=step(
                Act.ACKNOWLEDGE_SLOT, "Acknowledge your slot.", slot_id=slot.id, job_id=slot.job_id
            )
            if slot.status == SlotStatus.GRANTED
            else None,
            current_state=slot.status,
        )


async def slot_input_files(
    session: AsyncSession, blobs: BlobStore, actor: Actor, slot_id: str
) -> job_schemas.InputFileList:
    slot, _ = await worker_slot(session, actor, slot_id)
    _unlocked(slot)
    return input_file_list(blobs, await files.list_for_job(session, slot.job_id))


async def request_upload(
    session: AsyncSession,
    blobs: BlobStore,
    settings: Settings,
    actor: Actor,
    slot_id: str,
    body: UploadRequest,
) -> UploadTicket:
    slot, agent = await worker_slot(session, actor, slot_id)
    if slot.status != SlotStatus.ACKNOWLEDGED:
        raise Conflict(
            "Uploads are for an acknowledged slot that has not submitted yet.",
            code="invalid_state",
            current_state=slot.status,
        )
    if slot.work_deadline_at is not None and slot.work_deadline_at < clock.now():
        raise Conflict(
            "The work deadline has passed.",
            code="work_deadline_passed",
            next_action=step(Act.HOME, "See what is still open for you."),
            work_deadline_at=slot.work_deadline_at.isoformat(),
        )
    return await files.request_upload(
        session,
        blobs,
        settings,
        kind=FileKind.SLOT_UPLOAD,
        job_id=slot.job_id,
        slot_id=slot.id,
        agent_id=agent.id,
        body=body,
    )


INLINE_UPLOAD_MAX_BYTES = 1024 * 1024  # base64 in a JSON message: bigger files take the presigned PUT


async def upload_inline(
    session: AsyncSession,
    blobs: BlobStore,
    settings: Settings,
    actor: Actor,
    slot_id: str,
    body: UploadRequest,
    data: bytes,
) -> FileView:
    """Upload a small file's bytes in the call itself, for agents that cannot PUT to a URL: the same rules as
    `request_upload`, then the bytes are checked against the declared size and SHA-256, stored and verified.
    ValidationFailed `inline_upload_too_large` past INLINE_UPLOAD_MAX_BYTES."""
    if len(data) > INLINE_UPLOAD_MAX_BYTES:
        raise ValidationFailed(
            f"Inline uploads are at most {INLINE_UPLOAD_MAX_BYTES} bytes; request an upload URL "
            "and PUT larger files.",
            code="inline_upload_too_large",
            max_bytes=INLINE_UPLOAD_MAX_BYTES,
            received=len(data),
        )
    ticket = await request_upload(session, blobs, settings, actor, slot_id, body)
    file = await files.get(session, ticket.file_id, slot_id=slot_id)
    await files.put_inline(session, blobs, file, data)
    return files.view(file)


async def hash_submission_files(
    session: AsyncSession, blobs: BlobStore, actor: Actor, slot_id: str, body: job_schemas.SubmitBody
) -> files.Hashed:
    """submit's slow part, run before its write transaction: re-hash the slot's uploads the body names
    (nothing to read for a submission without files)."""
    if not body.files:
        return files.NOT_HASHED
    slot, _ = await worker_slot(session, actor, slot_id)
    if slot.status not in SLOT_MOVES[SlotStatus.SUBMITTED]:
        return files.NOT_HASHED  # submit refuses it without looking at the files
    found = []
    for item in body.files or []:
        try:
            found.append(await files.get(session, item.upload_id, slot_id=slot.id, kind=FileKind.SLOT_UPLOAD))
        except NotFound:
            continue  # submit names the bad upload
    return await files.prehash(blobs, found)


async def submit(
    session: AsyncSession,
    blobs: BlobStore,
    actor: Actor,
    slot_id: str,
    body: job_schemas.SubmitBody,
    hashed: files.Hashed = files.NOT_HASHED,
    cache: ReadCache | None = None,
) -> job_schemas.SubmissionView:
    """Submit the slot's artifact by its work deadline: the payload is validated against the job type, every
    file must be one of this slot's uploads and is re-hashed now (unless `hash_submission_files` matched it
    just before). One submission per slot."""
    slot, _, job = await slot_with_job(session, actor, slot_id, locked=True)
    if slot.status == SlotStatus.SUBMITTED:
        raise Conflict(
            "This slot has already submitted.",
            code="already_submitted",
            current_state=slot.status,
            submission_id=(submitted := await _submission_id(session, slot.id)),
            next_action=step(Act.SUBMISSION_STATUS, "Your submission's state.", submission_id=submitted),
        )
    if slot.status not in SLOT_MOVES[SlotStatus.SUBMITTED]:
        raise Conflict(
            f"This slot is {slot.status}; only an acknowledged slot can submit.",
            code="invalid_state",
            current_state=slot.status,
        )
    attached = []
    for index, item in enumerate(body.files or []):
        try:
            f = await files.get(session, item.upload_id, slot_id=slot.id, kind=FileKind.SLOT_UPLOAD)
        except NotFound:
            raise ValidationFailed(
                "A file is not one of this slot's uploads.",
                errors=[
                    {
                        "field": f"files.{index}.uploadId",
                        "in": "body",
                        "code": "unknown_upload",
                        "message": f"{item.upload_id} is not an upload of slot {slot.id}",
                    }
                ],
            ) from None
        attached.append((item.role, f))
    if len({f.id for _, f in attached}) != len(attached):
        raise ValidationFailed(
            "A file is attached twice.",
            errors=[
                {
                    "field": "files",
                    "in": "body",
                    "code": "duplicate_file",
                    "message": "each upload at most once",
                }
            ],
        )
    job_type = await job_types.rules(session, job.job_type_id, cache) if job.job_type_id else None
    if job_type is not None:
        job_types.validate_submission(
            job_type,
            artifact_type=body.artifact_type,
            payload=body.structured_payload_json,
            files=[(role, f.mime_type) for role, f in attached],
        )
    await files.verify_all(session, blobs, [f for _, f in attached], hashed)
    now = clock.now()
    moved = (
        await session.execute(_SUBMIT, {"p_slot": slot.id, "p_job": job.id, "w_now": now, "p_now": now})
    ).first()
    if moved is None:
        await reread(session, slot)
        if slot.status in SLOT_MOVES[SlotStatus.SUBMITTED]:  # still could move: the deadline said no
            raise Conflict(
                "The work deadline has passed.",
                code="work_deadline_passed",
                next_action=step(Act.HOME, "See what is still open for you."),
                work_deadline_at=slot.work_deadline_at.isoformat() if slot.work_deadline_at else None,
            )
        raise Conflict(f"This slot is {slot.status}.", code="invalid_state", current_state=slot.status)
    # The session's copy shows the move (the statement synchronises nothing).
    for name, value in (("status", SlotStatus.SUBMITTED), ("submitted_at", now), ("updated_at", now)):
        set_committed_value(slot, name, value)
    preview_json = job_types.review_packet_preview(job_type, body.structured_payload_json) if job_type else {}
    submission = Submission(
        job_id=job.id,
        slot_id=slot.id,
        worker_agent_id=slot.worker_agent_id,
        artifact_type=body.artifact_type,
        payload_json=body.structured_payload_json,
        preview_json=preview_json,
        storage_uri=body.storage_uri,
    )
    if attached or job.is_starter:  # its files point to it; the starter's award moves it at once
        session.add(submission)
        await session.flush()
        for role, f in attached:
            session.add(SubmissionFile(submission_id=submission.id, file_id=f.id, role=role))
        await session.flush()
    else:  # nothing reads it in this transaction: written with its last work (db/rows.py)
        await insert_at_commit(session, [submission])
    await events.record(
        session,
        job.id,
        "submission_received",
        actor,
        {"submissionId": submission.id, "slotId": slot.id, "workerAgentId": slot.worker_agent_id},
        notify=[job.requester_agent_id],
        title=f"New submission: {job.title}",
    )
    # The job is as `lock` read it: nothing above writes its row, and no other writer can meanwhile.
    job = await admission.settle(session, job, counts=admission.counts_beside(moved))
    if job.is_starter:  # practice: a valid submission wins at once
        await review.award_submission(session, job, submission, SYSTEM)
        await reread(session, submission)
    return submission_view(submission, job_status=(await get(session, job.id)).status)


async def withdraw_slot(session: AsyncSession, actor: Actor, slot_id: str) -> job_schemas.SlotView:
    slot, _ = await worker_slot(session, actor, slot_id)
    if not await admission.end_slot(session, slot, SlotStatus.WITHDRAWN, "withdrawn_by_worker", actor):
        await reread(session, slot)
        raise Conflict(
            f"This slot is {slot.status}; it cannot be withdrawn.",
            code="invalid_state",
            current_state=slot.status,
        )
    await states.compare_and_set(
        session,
        JobApplication,
        slot.application_id,
        APPLICATION_MOVES,
        ApplicationStatus.WITHDRAWN,
        withdrawn_at=clock.now(),
    )
    await reread(session, slot)
    return slot_view(slot)


async def submission_status(
    session: AsyncSession, actor: Actor, submission_id: str
) -> job_schemas.SubmissionView:
    sub, _ = await worker_row(
        session, actor, Submission, submission_id, what="submission", code="submission_not_found"
    )
    return submission_view(sub, job_status=(await get(session, sub.job_id)).status)


async def outcomes(
    session: AsyncSession, actor: Actor, agent_id: str | None = None
) -> job_schemas.OutcomeList:
    """How each of the worker's slots ended: won, not awarded, no award, expired, withdrawn or pending."""
    worker = await acting_agent(session, actor, agent_id)
    return await _outcomes(session, ParticipationSlot.worker_agent_id == worker.id, 200)


async def outcomes_for_owner(session: AsyncSession, actor: Actor, limit: int = 50) -> job_schemas.OutcomeList:
    """The work of all the owner's agents as workers, newest first (the console's jobs page)."""
    mine = select(Agent.id).where(Agent.owner_id == actor.require_user())
    return await _outcomes(session, ParticipationSlot.worker_agent_id.in_(mine), limit)


async def _outcomes(session: AsyncSession, which: ColumnElement[bool], limit: int) -> job_schemas.OutcomeList:
    rows = (
        await session.execute(
            select(ParticipationSlot, Job, Submission)
            .join(Job, Job.id == ParticipationSlot.job_id)
            .outerjoin(Submission, Submission.slot_id == ParticipationSlot.id)
            .where(which)
            .order_by(ParticipationSlot.created_at.desc(), ParticipationSlot.id.desc())
            .limit(limit)
        )
    ).all()
    out = []
    for slot, job, sub in rows:
        if sub is not None and sub.status == SubmissionStatus.AWARDED:
            outcome, decided = "WON", sub.decided_at
        elif sub is not None and sub.status == SubmissionStatus.NOT_AWARDED:
            outcome, decided = (
                ("NO_AWARD" if job.status == JobStatus.NO_AWARD else "NOT_AWARDED"),
                sub.decided_at,
            )
        elif slot.status in ENDED_SLOTS:
            outcome, decided = str(slot.status), slot.ended_at
        else:
            outcome, decided = "PENDING", None
        out.append(
            job_schemas.OutcomeView(
                job_id=job.id,
                job_title=job.title,
                job_status=job.status,
                slot_id=slot.id,
                submission_id=sub.id if sub else None,
                outcome=outcome,
                decided_at=decided,
            )
        )
    return job_schemas.OutcomeList(outcomes=out)
