"""Jobs, requester side after publish: input files, clarifications, review packets, award, no-award, the
released artifact. A closed job's completions go to the workers' records (agents/reputation.py)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, case, exists, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from callboard_core import clock, states
from callboard_core.agents import reputation
from callboard_core.agents.models import Agent
from callboard_core.blobs import BlobStore
from callboard_core.config import Settings
from callboard_core.db import lookup
from callboard_core.db.engine import dialect_of
from callboard_core.db.lookup import by_pk
from callboard_core.db.rows import insert_at_commit
from callboard_core.errors import Conflict, NotFound, ValidationFailed
from callboard_core.files import service as files
from callboard_core.files.models import FileKind, StoredFile
from callboard_core.files.schemas import UploadRequest
from callboard_core.guidance import Act, step
from callboard_core.jobs import events
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.access import WITHOUT_CAPABILITIES
from callboard_core.jobs.models import (
    Award,
    Job,
    JobApplication,
    JobClarification,
    ParticipationSlot,
    Submission,
    SubmissionFile,
)
from callboard_core.jobs.service import (
    check_not_frozen,
    input_file_list,
    locked_requester_row,
    move,
    requester_job,
    requester_locked,
    view,
)
from callboard_core.jobs.states import (
    APPLICATION_MOVES,
    JOB_MOVES,
    SLOT_MOVES,
    SUBMISSION_MOVES,
    ApplicationStatus,
    JobStatus,
    SlotStatus,
    SubmissionStatus,
)
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerAccount
from callboard_core.payments import service as payments
from callboard_core.payments.models import JobPayment
from callboard_core.payouts import accounts as payout_accounts
from callboard_core.principals import SYSTEM, Actor
from callboard_core.users.models import User

# --- input files (drafts) ------------------------------------------------------------------------


async def stage_input_file(
    session: AsyncSession,
    blobs: BlobStore,
    settings: Settings,
    actor: Actor,
    job_id: str,
    body: UploadRequest,
) -> Any:
    # The draft locked, and its count of files moved on its row: a publish waiting for the lock re-reads the
    # row and so sees this file (jobs.service._for_publish), whatever its statement's snapshot.
    job = await requester_job(session, actor, job_id, for_update=True)
    if job.status != JobStatus.DRAFT:
        raise Conflict("Input files are staged on a draft.", code="invalid_state", current_state=job.status)
    ticket = await files.request_upload(
        session,
        blobs,
        settings,
        kind=FileKind.JOB_INPUT,
        job_id=job.id,
        agent_id=job.requester_agent_id,
        body=body,
    )
    job.input_file_count += 1
    return ticket


async def list_input_files(
    session: AsyncSession, blobs: BlobStore, actor: Actor, job_id: str
) -> job_schemas.InputFileList:
    job = await requester_job(session, actor, job_id)
    return input_file_list(blobs, await files.list_for_job(session, job.id))


async def delete_input_file(
    session: AsyncSession, blobs: BlobStore, actor: Actor, job_id: str, file_id: str
) -> job_schemas.InputFileList:
    job = await requester_job(session, actor, job_id, for_update=True)  # as staging one (above)
    if job.status != JobStatus.DRAFT:
        raise Conflict(
            "Input files can be removed while the job is a draft.",
            code="invalid_state",
            current_state=job.status,
        )
    await files.delete(
        session, blobs, await files.get(session, file_id, job_id=job.id, kind=FileKind.JOB_INPUT)
    )
    job.input_file_count = max(job.input_file_count - 1, 0)
    return input_file_list(blobs, await files.list_for_job(session, job.id))


# --- clarifications and events -------------------------------------------------------------------


async def clarify(
    session: AsyncSession, actor: Actor, job_id: str, body: job_schemas.ClarificationBody
) -> job_schemas.ClarificationView:
    """A note from the requester to every admitted worker (shown with the job once its slot is held)."""
    job = await requester_job(session, actor, job_id)
    if job.status not in (
        JobStatus.ADMISSION_OPEN,
        JobStatus.IN_PROGRESS,
        JobStatus.IN_REVIEW,
        JobStatus.PENDING_ACCEPTANCE,
    ):
        raise Conflict(
            "Clarifications are for a published job that is not closed.",
            code="invalid_state",
            current_state=job.status,
        )
    clarification = JobClarification(job_id=job.id, author_agent_id=job.requester_agent_id, body=body.body)
    session.add(clarification)
    await session.flush()
    workers = (
        await session.scalars(
            select(ParticipationSlot.worker_agent_id).where(
                ParticipationSlot.job_id == job.id,
                ParticipationSlot.status.in_(
                    [SlotStatus.GRANTED, SlotStatus.ACKNOWLEDGED, SlotStatus.SUBMITTED]
                ),
            )
        )
    ).all()
    await events.record(
        session,
        job.id,
        "clarification_posted",
        actor,
        {"clarificationId": clarification.id},
        notify=list(workers),
        title=f"Clarification: {job.title}",
        body=body.body[:500],
    )
    return job_schemas.ClarificationView(
        id=clarification.id, job_id=job.id, body=clarification.body, created_at=clarification.created_at
    )


async def job_events(session: AsyncSession, actor: Actor, job_id: str) -> job_schemas.EventList:
    job = await requester_job(session, actor, job_id)
    return await events.list_for(session, job.id)


# --- review packets ------------------------------------------------------------------------------


async def _files_of(
    session: AsyncSession, submission_ids: list[str]
) -> dict[str, list[tuple[str, StoredFile]]]:
    out: dict[str, list[tuple[str, StoredFile]]] = {i: [] for i in submission_ids}
    if submission_ids:
        rows = (
            await session.execute(
                select(SubmissionFile.submission_id, SubmissionFile.role, StoredFile)
                .join(StoredFile, StoredFile.id == SubmissionFile.file_id)
                .where(SubmissionFile.submission_id.in_(submission_ids))
                .order_by(StoredFile.created_at)
            )
        ).all()
        for sub_id, role, f in rows:
            out[sub_id].append((role, f))
    return out


def _file_view(blobs: BlobStore, role: str, f: StoredFile) -> job_schemas.SubmissionFileView:
    link = files.download(blobs, f)
    return job_schemas.SubmissionFileView(
        id=f.id,
        role=role,
        filename=f.filename,
        mime_type=f.mime_type,
        size_bytes=f.size_bytes,
        sha256=f.sha256,
        download_url=link.download_url,
    )


async def review_packets(
    session: AsyncSession, blobs: BlobStore, actor: Actor, job_id: str
) -> job_schemas.ReviewPacketList:
    """Every submission as a packet: the payload's preview fields and the PREVIEW files. Deliverables are
    counted, never linked, until the award releases the winner's."""
    job = await requester_job(session, actor, job_id)
    rows = (
        await session.execute(
            select(Submission, Agent.handle, JobApplication.rookie)
            .join(Agent, Agent.id == Submission.worker_agent_id)
            .join(ParticipationSlot, ParticipationSlot.id == Submission.slot_id)
            .join(JobApplication, JobApplication.id == ParticipationSlot.application_id)
            .where(Submission.job_id == job.id)
            .order_by(Submission.created_at, Submission.id)
        )
    ).all()
    attached = await _files_of(session, [sub.id for sub, _, _ in rows])
    packets = []
    for sub, handle, rookie in rows:
        mine = attached[sub.id]
        packets.append(
            job_schemas.ReviewPacket(
                submission_id=sub.id,
                worker_agent_id=sub.worker_agent_id,
                worker_handle=handle,
                artifact_type=sub.artifact_type,
                status=sub.status,
                payload_preview=sub.preview_json or {},
                preview_files=[_file_view(blobs, role, f) for role, f in mine if role == "PREVIEW"],
                deliverable_count=sum(1 for role, _ in mine if role == "DELIVERABLE"),
                rookie=rookie,
                submitted_at=sub.created_at,
                next_action=step(
                    Act.AWARD,
                    "Award this submission if it is the one (its full artifact is then released to you); "
                    "or close without a winner ({NO_AWARD}).",
                    body={"submissionId": sub.id},
                    job_id=job.id,
                    submission_id=sub.id,
                )
                if job.status == JobStatus.IN_REVIEW
                else None,
            )
        )
    return job_schemas.ReviewPacketList(
        job_id=job.id, job_status=job.status, review_deadline_at=job.review_deadline_at, packets=packets
    )


# --- award and no-award --------------------------------------------------------------------------


# Built once (as the other statements every award sends): building a statement and its cache key on each
# call costs more than SQLite takes to answer it.
_SUBMITTERS = select(Submission.worker_agent_id).where(Submission.job_id == bindparam("job_id"))
# The worker's agent rides along (as `by_pk` would load it: no capabilities): the award reads it no more.
_WITH_ROOKIE = (
    select(Submission, JobApplication.rookie, Agent)
    .join(ParticipationSlot, ParticipationSlot.id == Submission.slot_id)
    .join(JobApplication, JobApplication.id == ParticipationSlot.application_id)
    .join(Agent, Agent.id == Submission.worker_agent_id)
    .where(Submission.id == bindparam("submission_id"))
    .options(*WITHOUT_CAPABILITIES)
)


@functools.cache
def _award_read(kind: str) -> Any:
    """The job, locked for its requester only (`REQUESTED_BY`, by the actor's kind), with the named submission
    if it is one of the job's, whether its worker applied as a rookie, the worker's agent (`_WITH_ROOKIE`),
    and a paid job's payment, its payer (the account its documents name), the ledger accounts its capture
    moves and whether the winner's payout can be paid (`payout_ready`, for the payout the capture queues):
    an award's check, lock and reads in one statement. The other rows are read as the statement found
    them: whoever changes a job's submissions or payment holds the job's lock, the compare-and-sets that
    follow decide, and the capture's guarded update moves the balances (its read gives the accounts)."""
    statement = (
        select(Job, Submission, JobApplication.rookie, Agent, JobPayment, User)
        .outerjoin(Submission, and_(Submission.id == bindparam("p_submission"), Submission.job_id == Job.id))
        .outerjoin(ParticipationSlot, ParticipationSlot.id == Submission.slot_id)
        .outerjoin(JobApplication, JobApplication.id == ParticipationSlot.application_id)
        .outerjoin(Agent, Agent.id == Submission.worker_agent_id)
        .outerjoin(JobPayment, JobPayment.job_id == Job.id)
        .outerjoin(User, User.id == JobPayment.user_id)
    )
    escrow = ledger.with_capture_accounts(
        statement, JobPayment.user_id, Agent.owner_id, JobPayment.id.is_not(None)
    )
    # A paid award's payout waits unless the winner's agent or owner has a ready payout account.
    payout_ready = case((JobPayment.id.is_not(None), payout_accounts.ready_in_sql(Agent.id, Agent.owner_id)))
    return requester_locked(escrow.add_columns(payout_ready.label("payout_ready")), kind)


_OPEN_SLOTS = cast(Table, ParticipationSlot.__table__).alias("open_slots")
_OPEN_APPLICATIONS = cast(Table, JobApplication.__table__).alias("open_applications")


@functools.cache
def _award_read_with_leftovers(kind: str) -> Any:
    """SQLite: `_award_read` and whether the job has slots or applications its closing moves would end. SQLite
    has one writer, whose lock the request holds before it reads, so the answer stays true until it
    commits; a move with nothing to move is left out (on PostgreSQL they go in the completions' statement,
    and a row joined to a locked one is as the statement found it before any wait, so it keeps them)."""
    slots = _OPEN_SLOTS.c
    applications = _OPEN_APPLICATIONS.c
    return _award_read(kind).add_columns(
        exists()
        .where(
            slots.job_id == Job.id,
            states.one_of(slots.status, states.sources(SLOT_MOVES, SlotStatus.WITHDRAWN)),
        )
        .label("open_slots"),
        exists()
        .where(
            applications.job_id == Job.id,
            states.one_of(
                applications.status, states.sources(APPLICATION_MOVES, ApplicationStatus.NOT_ADMITTED)
            ),
        )
        .label("open_applications"),
    )


async def submitter_ids(session: AsyncSession, job_id: str) -> list[str]:
    """The agents that submitted to the job (the parties a closing move tells)."""
    return list(await session.scalars(_SUBMITTERS, {"job_id": job_id}))


# What closing a job moves, built once: its submissions (without a winner: every one NOT_AWARDED; with one,
# `_DECIDE`), then the slots and applications left.
_SUBMISSIONS = cast(Table, Submission.__table__).c  # built-once statements name table columns (states)
_NOT_AWARDED = states.batch_move(
    Submission,
    SUBMISSION_MOVES,
    SubmissionStatus.NOT_AWARDED,
    _SUBMISSIONS.job_id == bindparam("p_job"),
    decided_at=bindparam("p_now"),
)
# An award decides every submission of the job in one statement: the winner AWARDED (from its table's
# sources), every other one NOT_AWARDED (from theirs). Before a job closes all its submissions are
# SUBMITTED, so the rows it returns are all of them: the submitters, without another read.
_DECIDE = (
    update(cast(Table, Submission.__table__))
    .where(
        _SUBMISSIONS.job_id == bindparam("p_job"),
        or_(
            and_(
                _SUBMISSIONS.id == bindparam("p_awarded"),
                states.one_of(_SUBMISSIONS.status, SUBMISSION_MOVES[SubmissionStatus.AWARDED]),
            ),
            and_(
                _SUBMISSIONS.id != bindparam("p_awarded"),
                states.one_of(_SUBMISSIONS.status, SUBMISSION_MOVES[SubmissionStatus.NOT_AWARDED]),
            ),
        ),
    )
    .values(
        status=case(
            (_SUBMISSIONS.id == bindparam("p_awarded"), SubmissionStatus.AWARDED.value),
            else_=SubmissionStatus.NOT_AWARDED.value,
        ),
        decided_at=bindparam("p_now"),
    )
    .returning(_SUBMISSIONS.id, _SUBMISSIONS.worker_agent_id)
)


async def _decide(session: AsyncSession, winner: Submission, params: dict[str, Any]) -> list[str]:
    """`_DECIDE`; the submitters. A winner its table does not let become AWARDED is the 409 `states.move`
    gives (nothing of the request is kept)."""
    rows = (await session.execute(_DECIDE, params)).all()
    if winner.id not in {row.id for row in rows}:
        current = await states.current_state(session, Submission, winner.id)
        raise states.refusal(
            current, SubmissionStatus.AWARDED, what="submission", target_state=SubmissionStatus.AWARDED
        )
    # The session's copy shows the move (the statement synchronises nothing).
    set_committed_value(winner, "status", SubmissionStatus.AWARDED)
    set_committed_value(winner, "decided_at", params["p_now"])
    return [str(row.worker_agent_id) for row in rows]


_CLOSING_MOVES = (
    states.batch_move(
        ParticipationSlot,
        SLOT_MOVES,
        SlotStatus.WITHDRAWN,
        cast(Table, ParticipationSlot.__table__).c.job_id == bindparam("p_job"),
        ended_at=bindparam("p_now"),
        end_reason="job_closed",
        updated_at=bindparam("p_now"),
    ),
    states.batch_move(
        JobApplication,
        APPLICATION_MOVES,
        ApplicationStatus.NOT_ADMITTED,
        cast(Table, JobApplication.__table__).c.job_id == bindparam("p_job"),
        decided_at=bindparam("p_now"),
        updated_at=bindparam("p_now"),
    ),
)


# On PostgreSQL both in one statement (the slots' move a data-modifying CTE of the applications'), or both
# as CTEs of the submitters' completions (agents/reputation.py): the caller holds the job's lock, which every
# writer of its slots and applications takes first.
_CLOSING_CTES = (_CLOSING_MOVES[0].cte("closing_slots"), _CLOSING_MOVES[1].cte("closing_applications"))
_CLOSING_TOGETHER = _CLOSING_MOVES[1].add_cte(_CLOSING_CTES[0])


async def _close_work(
    session: AsyncSession,
    job: Job,
    *,
    winner: Submission | None,
    count: bool = True,
    leftovers: tuple[bool, bool] = (True, True),
    job_in_closing: bool = False,
) -> list[str]:
    """What every closed job does: decide the submissions, end leftover slots and applications, count the
    completed work for each submitter (starter jobs are practice and count nothing; a job staff cancelled
    counts nothing either: `count` False). Returns the agents that submitted (`submitter_ids`), whom the
    closing move tells. `leftovers` (SQLite): whether the job has open slots, open applications (False: the
    caller read that it has none, `_award_read_with_leftovers`). `job_in_closing` (PostgreSQL, an award that
    counts): the job's award move goes in the same statement (`_decide_and_count`)."""
    params = {"p_job": job.id, "p_awarded": winner.id if winner else "", "p_now": clock.now()}
    postgres = dialect_of(session) == "postgresql"
    if postgres and winner is not None and not job.is_starter and count:
        return await _decide_and_count(session, job, winner, params, job_in_closing=job_in_closing)
    assert not job_in_closing, "only an award that counts moves its job in its closing statement"
    if winner is not None:
        submitters = await _decide(session, winner, params)
    else:
        await states.moved(session, _NOT_AWARDED, params)
        submitters = await submitter_ids(session, job.id)
    counted = bool(submitters) and not job.is_starter and count
    beside: tuple[Any, ...] = ()
    beside_params: dict[str, Any] | None = None
    if postgres and counted:  # the closing moves go in the completions' statement
        beside, beside_params = _CLOSING_CTES, {"p_job": job.id, "p_now": params["p_now"]}
    elif postgres:
        await states.moved(session, _CLOSING_TOGETHER, params)
    else:
        for statement, needed in zip(_CLOSING_MOVES, leftovers, strict=True):
            if needed:
                await states.moved(session, statement, params)
    if counted:
        await reputation.record_completions(
            session,
            submitters,
            winner=winner.worker_agent_id if winner is not None else None,
            tag_id=job.capability_tag_id,
            tag_slug=job.capability_slug,
            beside=beside,
            beside_params=beside_params,
        )
    return submitters


# PostgreSQL, an award that counts: the decision a data-modifying CTE of the completions' statement too, the
# submitters counted straight from its RETURNING (`_decide`'s read and statement in the same round trip).
_DECIDED = _DECIDE.cte("decided")
_DECIDED_WORKERS = select(_DECIDED.c.worker_agent_id)


class _JobAward:
    """The job's award move inside the closing statement (`_decide_and_count`, `job_in_closing`): the job's
    compare-and-set a data-modifying CTE, and the submissions decided only if it moved (their CTE reads its
    RETURNING), so a job that did not move decides nothing and the statement counts no one."""

    def __init__(self) -> None:
        jobs = cast(Table, Job.__table__).c
        # column -> the closing statement's parameter it takes (`_close_work`'s params)
        self.values = {"closed_at": "p_now", "awarded_submission_id": "p_awarded", "updated_at": "p_now"}
        bound: dict[str, Any] = {column: bindparam(param) for column, param in self.values.items()}
        self.moved = states.batch_move(
            Job, JOB_MOVES["award"], JobStatus.AWARDED, jobs.id == bindparam("p_job"), **bound
        ).cte("awarded_job")
        self.decided = _DECIDE.where(exists(select(self.moved.c.id))).cte("decided_after_job")
        self.workers = select(self.decided.c.worker_agent_id)

    @staticmethod
    def details(job: Job) -> dict[str, Any]:
        """What a refused award of `job` names, as `jobs.service.move` does."""
        return {"target_state": JobStatus.AWARDED, "job_id": job.id}

    def moved_onto(self, job: Job, params: Mapping[str, Any]) -> None:
        """The session's copy shows the move (the statement synchronises nothing)."""
        set_committed_value(job, "status", JobStatus.AWARDED)
        for column, param in self.values.items():
            set_committed_value(job, column, params[param])


_JOB_AWARD = _JobAward()


async def _decide_and_count(
    session: AsyncSession,
    job: Job,
    winner: Submission,
    params: dict[str, Any],
    *,
    job_in_closing: bool = False,
) -> list[str]:
    """`_close_work` of an award on PostgreSQL in one statement: the submissions decided, the leftover slots
    and applications ended, the submitters counted. A worker has one submission per job (one application,
    one slot, one submission), so the winner's submission was decided exactly when its worker was counted;
    if not, the 409 `_decide` gives (the request's transaction undoes the rest)."""
    decided, workers = (
        (_JOB_AWARD.decided, _JOB_AWARD.workers) if job_in_closing else (_DECIDED, _DECIDED_WORKERS)
    )
    beside = (_JOB_AWARD.moved, decided, *_CLOSING_CTES) if job_in_closing else (decided, *_CLOSING_CTES)
    submitters = await reputation.record_completions(
        session,
        (),
        winner=winner.worker_agent_id,
        tag_id=job.capability_tag_id,
        tag_slug=job.capability_slug,
        beside=beside,
        beside_params=params,
        agents_from=workers,
    )
    job_stayed = (
        job_in_closing
        and winner.worker_agent_id not in submitters
        and await states.current_state(session, Job, job.id) != JobStatus.AWARDED
    )
    if job_stayed:  # the job did not move: its refusal, as `jobs.service.move` gives it
        details = _JOB_AWARD.details(job)
        raise await states.not_moved(
            session, Job, job.id, JOB_MOVES["award"], JobStatus.AWARDED, what="job", details=details
        )
    if job_in_closing:
        _JOB_AWARD.moved_onto(job, params)
    if winner.worker_agent_id not in submitters:
        current = await states.current_state(session, Submission, winner.id)
        raise states.refusal(
            current, SubmissionStatus.AWARDED, what="submission", target_state=SubmissionStatus.AWARDED
        )
    set_committed_value(winner, "status", SubmissionStatus.AWARDED)
    set_committed_value(winner, "decided_at", params["p_now"])
    return sorted(submitters)


async def _with_rookie(
    session: AsyncSession, submission_id: str
) -> tuple[Submission | None, bool | None, Agent | None]:
    """The submission, whether its worker applied as a rookie (the award records it) and the worker's agent,
    in one read."""
    found = (await session.execute(_WITH_ROOKIE, {"submission_id": submission_id})).one_or_none()
    return (found[0], found[1], found[2]) if found is not None else (None, None, None)


async def award(
    session: AsyncSession, actor: Actor, job_id: str, body: job_schemas.AwardBody
) -> job_schemas.AwardResult:
    """Award one submission of a job in review. Exactly once: concurrent awards race on the job's
    compare-and-set; the loser gets 409."""
    sqlite = dialect_of(session) != "postgresql"
    build = _award_read_with_leftovers if sqlite else _award_read
    found = await locked_requester_row(session, actor, build, job_id, p_submission=body.submission_id)
    # `found` holds the payer for the award's documents (`documents.issue`: the session's own copy).
    job, submission, rookie, worker, payment, _payer = found[:6]
    if payment is not None:
        # Every writer of a job's payment holds the job's lock, which this read took: the payment stays as
        # read until the transaction ends (its capture's move then rides with the commit: db/rows.py).
        lookup.note_locked(session, [payment])
    escrow = tuple(found[6:9])
    if found.payout_ready is not None and worker is not None and worker.owner_id is not None:
        payout_accounts.note_ready(session, worker.owner_id, worker.id, found.payout_ready)
    leftovers = (bool(found.open_slots), bool(found.open_applications)) if sqlite else (True, True)
    if submission is None or worker is None:
        raise ValidationFailed(
            "That submission is not one of this job's.",
            errors=[
                {
                    "field": "submissionId",
                    "in": "body",
                    "code": "unknown_submission",
                    "message": f"{body.submission_id} is not a submission of job {job.id}",
                }
            ],
        )
    if job.status == JobStatus.AWARDED:
        raise Conflict(
            "This job has already been awarded.",
            code="already_awarded",
            current_state=job.status,
            awarded_submission_id=job.awarded_submission_id,
        )
    return await award_submission(
        session,
        job,
        submission,
        actor,
        rookie=rookie,
        worker=worker,
        payment=payment,
        leftovers=leftovers,
        escrow=escrow,
    )


async def award_submission(
    session: AsyncSession,
    job: Job,
    submission: Submission,
    actor: Actor,
    *,
    by_staff: bool = False,
    held_cents: int = 0,
    rookie: bool | None = None,
    worker: Agent | None = None,
    payment: JobPayment | None = None,
    leftovers: tuple[bool, bool] = (True, True),
    escrow: tuple[LedgerAccount | None, ...] = (),
) -> job_schemas.AwardResult:
    """Award `submission` of `job` (locked by the caller): the job IN_REVIEW -> AWARDED, the submission
    SUBMITTED -> AWARDED and every other one NOT_AWARDED, the job's work closed. The requester's award and
    the starter job's automatic award both come here. A paid job's escrow is captured in the same
    transaction. `by_staff` (an award override, a dispute's FORCE_AWARD) also awards a job still in progress
    or closed with no award (its escrow taken again from the requester's balance, `held_cents` of it
    already held by the dispute). `rookie` and `worker`: whether the winner's application was a rookie's and
    the winner's agent, when the caller read them with the submission; `payment`, the job's, and `escrow`,
    the accounts its capture moves (`ledger.with_capture_accounts`), when it did."""
    now = clock.now()
    reopened = job.status == JobStatus.NO_AWARD
    # PostgreSQL, a requester's award of a job it holds locked whose work is counted: the job's move goes in
    # the closing statement (`_decide_and_count`), one round trip less; its checks are made here first.
    job_in_closing = (
        not by_staff
        and not reopened
        and not job.is_starter
        and dialect_of(session) == "postgresql"
        and lookup.current(session, Job, job.id) is job
    )
    if job_in_closing:
        check_not_frozen(job)
        states.check(JOB_MOVES["award"], job.status, JobStatus.AWARDED, what="job", **_JOB_AWARD.details(job))
    else:
        job = await move(
            session,
            job,
            "staff_award" if by_staff else "award",
            JobStatus.AWARDED,
            closed_at=now,
            awarded_submission_id=submission.id,
        )
    if rookie is None:  # the caller did not read them with the submission: both in one read
        _, rookie, worker = await _with_rookie(session, submission.id)
    worker = worker or await by_pk(session, Agent, submission.worker_agent_id, options=WITHOUT_CAPABILITIES)
    assert worker is not None
    # A paid job's escrow pays the worker's owner and the fee.
    if reopened:
        await payments.capture_released(session, job.id, worker, held_cents=held_cents, key=f"award:{job.id}")
    elif job.reward_amount_cents > 0:  # a free job's publish reserved nothing (secure): no escrow to read
        await payments.capture(session, job.id, worker, payment=payment, accounts_read=escrow)
    record = Award(
        job_id=job.id,
        submission_id=submission.id,
        worker_agent_id=submission.worker_agent_id,
        decided_by_type=actor.kind if actor.id else "system",
        decided_by_id=actor.id,
        rookie_win=rookie,
    )
    # Written with the transaction's last work: nothing reads it in this transaction, and the job's
    # compare-and-set above lets one award through (the unique job id stays the backstop).
    await insert_at_commit(session, [record])
    if reopened:  # a job closed with no award had its work closed (and counted) then
        await states.move(
            session,
            Submission,
            submission.id,
            SUBMISSION_MOVES,
            SubmissionStatus.AWARDED,
            what="submission",
            details={"target_state": SubmissionStatus.AWARDED},
            decided_at=now,
        )
        submitters = await submitter_ids(session, job.id)
    else:
        submitters = await _close_work(
            session, job, winner=submission, leftovers=leftovers, job_in_closing=job_in_closing
        )
    losers = [agent_id for agent_id in submitters if agent_id != submission.worker_agent_id]  # one each
    await events.record(
        session,
        job.id,
        "awarded",
        actor,
        {
            "awardId": record.id,
            "submissionId": submission.id,
            "workerAgentId": submission.worker_agent_id,
            "rookieWin": rookie,
        },
        notify=[submission.worker_agent_id],
        title=f"You won: {job.title}",
    )
    if losers:
        await events.record(
            session,
            job.id,
            "submissions_not_awarded",
            SYSTEM,
            {"count": len(losers)},
            notify=list(losers),
            title=f"Not awarded: {job.title}",
        )
    return job_schemas.AwardResult(job=view(job), award=award_view(record))


def award_view(a: Award) -> job_schemas.AwardView:
    return job_schemas.AwardView(
        id=a.id,
        job_id=a.job_id,
        submission_id=a.submission_id,
        worker_agent_id=a.worker_agent_id,
        rookie_win=a.rookie_win,
        created_at=a.created_at,
    )


async def no_award(
    session: AsyncSession, actor: Actor, job_id: str, body: job_schemas.NoAwardBody
) -> job_schemas.JobView:
    """Close the job without a winner (in review, or earlier to stop it), with a reason code."""
    job = await requester_job(session, actor, job_id, for_update=True)
    now = clock.now()
    job = await move(
        session,
        job,
        "no_award",
        JobStatus.NO_AWARD,
        closed_at=now,
        no_award_reason_code=body.reason_code,
        no_award_reason_text=body.reason_text,
    )
    submitters = await _close_work(session, job, winner=None)
    await events.record(
        session,
        job.id,
        "closed_no_award",
        actor,
        {"reasonCode": body.reason_code, "reasonText": body.reason_text},
        notify=list(submitters),
        title=f"No award: {job.title}",
    )
    return view(job)


async def cancel_by_staff(session: AsyncSession, actor: Actor, job: Job, reason: str) -> Job:
    """Staff stop a job that is not over (locked by the caller): CANCELLED, its escrow returned in full,
    its work ended; the parties are told."""
    job = await move(session, job, "staff_cancel", JobStatus.CANCELLED, closed_at=clock.now())
    submitters = await _close_work(session, job, winner=None, count=False)
    await events.record(
        session,
        job.id,
        "cancelled_by_staff",
        actor,
        {"reason": reason},
        notify=[job.requester_agent_id, *submitters],
        title=f"Cancelled by callboard staff: {job.title}",
        body=reason,
    )
    return job


# --- released and raw artifacts ------------------------------------------------------------------


async def _artifact(
    session: AsyncSession, blobs: BlobStore, award_row: Award
) -> job_schemas.ReleasedArtifact:
    sub = await session.get(Submission, award_row.submission_id)
    assert sub is not None
    attached = (await _files_of(session, [sub.id]))[sub.id]
    return job_schemas.ReleasedArtifact(
        award_id=award_row.id,
        job_id=award_row.job_id,
        submission_id=sub.id,
        worker_agent_id=sub.worker_agent_id,
        artifact_type=sub.artifact_type,
        structured_payload_json=sub.payload_json or {},
        storage_uri=sub.storage_uri,
        files=[_file_view(blobs, role, f) for role, f in attached],
    )


async def released_artifact(
    session: AsyncSession, blobs: BlobStore, actor: Actor, award_id: str
) -> job_schemas.ReleasedArtifact:
    """The winning submission in full, deliverables included, for the job's requester (or owner)."""
    award_row = await session.get(Award, award_id)
    if award_row is None:
        raise NotFound("No such award.", code="award_not_found")
    try:
        await requester_job(session, actor, award_row.job_id)
    except NotFound:
        raise NotFound("No such award.", code="award_not_found") from None
    return await _artifact(session, blobs, award_row)


async def raw_artifact(
    session: AsyncSession, blobs: BlobStore, submission_id: str
) -> job_schemas.ReleasedArtifact:
    """Staff only: any submission in full."""
    sub = await session.get(Submission, submission_id)
    if sub is None:
        raise NotFound("No such submission.", code="submission_not_found")
    attached = (await _files_of(session, [sub.id]))[sub.id]
    award_id = (await session.scalars(select(Award.id).where(Award.submission_id == sub.id))).one_or_none()
    return job_schemas.ReleasedArtifact(
        award_id=award_id,
        job_id=sub.job_id,
        submission_id=sub.id,
        worker_agent_id=sub.worker_agent_id,
        artifact_type=sub.artifact_type,
        structured_payload_json=sub.payload_json or {},
        storage_uri=sub.storage_uri,
        files=[_file_view(blobs, role, f) for role, f in attached],
    )
