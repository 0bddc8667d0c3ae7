"""Jobs as staff run them ("tasks" on the console): the list with its risk filters, the detail, the actions
(cancel, dispute, note, resolve, archive, restore), a partial refund of a paid job's escrow, and the job
administration routes (auto-award once the review deadline passed, award override). Every change is audited
in its own transaction; any staff action on a disputed job is the dispute's first response (its SLA)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.audit import service as audit
from callboard_core.audit.models import AuditEvent
from callboard_core.db.lookup import reread
from callboard_core.db.rows import write_gathered
from callboard_core.disputes import service as disputes
from callboard_core.disputes.models import Dispute
from callboard_core.disputes.states import BREACHED, DUE_SOON
from callboard_core.documents.models import CommercialDocument
from callboard_core.errors import Conflict, field_error
from callboard_core.ids import new_id
from callboard_core.jobs import review
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs import service as jobs
from callboard_core.jobs.models import Job, Submission
from callboard_core.jobs.states import ACTIVE_JOBS, JobStatus, SubmissionStatus
from callboard_core.ledger.models import LedgerTransaction
from callboard_core.payments import service as payments
from callboard_core.payouts.models import Payout
from callboard_core.payouts.states import PayoutStatus
from callboard_core.principals import Actor
from callboard_core.security.permissions import Permission
from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff.reports import count_of

STUCK_AFTER = timedelta(
    hours=1
)  # a deadline this far behind with the job unmoved: the sweeper is not keeping up
CLOSED = frozenset({JobStatus.AWARDED, JobStatus.NO_AWARD, JobStatus.CANCELLED})
NOTE = "task.note"


def _risk(risk: str) -> Any:
    now = clock.now()
    overdue = (Job.status == JobStatus.IN_REVIEW) & (Job.review_deadline_at <= now)
    # A disputed job's deadlines wait for staff on purpose: that is DISPUTED, not stuck.
    late = or_(
        (Job.status == JobStatus.ADMISSION_OPEN) & (Job.admission_closes_at <= now - STUCK_AFTER),
        (Job.status == JobStatus.IN_PROGRESS) & (Job.latest_submission_deadline_at <= now - STUCK_AFTER),
    )
    stuck = or_(
        late & Job.open_dispute_id.is_(None),
        Job.id.in_(
            select(Payout.job_id).where(
                Payout.status == PayoutStatus.FAILED, Payout.next_attempt_at.is_(None)
            )
        ),
    )
    disputed = Job.open_dispute_id.is_not(None)
    return {
        "NEEDS_ATTENTION": or_(disputed, overdue, stuck),
        "DISPUTED": disputed,
        "DISPUTE_DUE_SOON": disputes.risky(DUE_SOON),
        "DISPUTE_BREACHED": disputes.risky(BREACHED),
        "OVERDUE": overdue,
        "STUCK": stuck,
    }.get(risk)


async def _open_disputes(session: AsyncSession, jobs_: Sequence[Job]) -> dict[str, Dispute]:
    """The open disputes of these jobs, in one statement (a page of tasks reads them once)."""
    ids = [j.open_dispute_id for j in jobs_ if j.open_dispute_id]
    if not ids:
        return {}
    return {d.id: d for d in await session.scalars(select(Dispute).where(Dispute.id.in_(ids)))}


async def _task(
    session: AsyncSession, job: Job, open_disputes: dict[str, Dispute] | None = None
) -> staff_schemas.AdminTask:
    if open_disputes is None:
        open_disputes = await _open_disputes(session, [job])
    dispute = open_disputes.get(job.open_dispute_id or "")
    sla = disputes.view(dispute).sla_state if dispute else None
    review_deadline = clock.as_utc(job.review_deadline_at)
    return staff_schemas.AdminTask(
        id=job.id,
        title=job.title,
        status=JobStatus(job.status).value,
        requester_agent_id=job.requester_agent_id,
        owner_id=job.owner_id,
        reward_amount_cents=job.reward_amount_cents,
        open_dispute_id=job.open_dispute_id,
        dispute_sla_state=sla,
        review_deadline_at=job.review_deadline_at,
        overdue=job.status == JobStatus.IN_REVIEW
        and review_deadline is not None
        and review_deadline <= clock.now(),
        archived=job.staff_archived_at is not None,
        created_at=job.created_at,
        updated_at=job.updated_at,
    )


async def list_tasks(session: AsyncSession, q: staff_schemas.AdminTaskQuery) -> staff_schemas.AdminTaskList:
    """Jobs newest first, drafts included (staff may need to find one), archived ones only if asked."""
    where: list[Any] = []
    if q.query:
        where.append(or_(Job.id == q.query, Job.title.ilike(f"%{q.query}%")))
    if q.status:
        where.append(Job.status == q.status)
    if not q.include_archived:
        where.append(Job.staff_archived_at.is_(None))
    risk = _risk(q.risk)
    if risk is not None:
        where.append(risk)
    rows = (
        await session.scalars(
            select(Job).where(*where).order_by(Job.created_at.desc(), Job.id.desc()).limit(q.limit)
        )
    ).all()
    open_disputes = await _open_disputes(session, rows)
    return staff_schemas.AdminTaskList(
        tasks=[await _task(session, job, open_disputes) for job in rows],
        total=await count_of(session, select(func.count()).select_from(Job).where(*where)),
    )


async def _payment(session: AsyncSession, job_id: str) -> staff_schemas.TaskPayment | None:
    payment = await payments.find(session, job_id)
    if payment is None:
        return None
    payout = await session.scalar(select(Payout.status).where(Payout.job_id == job_id))
    return staff_schemas.TaskPayment(
        status=payment.status,
        pay_cents=payment.pay_cents,
        fee_cents=payment.fee_cents,
        refunded_cents=payment.refunded_cents,
        payout_status=payout,
    )


async def detail(session: AsyncSession, actor: Actor, job_id: str) -> staff_schemas.AdminTaskDetail:
    job = await jobs.get(session, job_id)
    full = actor.can(Permission.VIEW_FINANCIALS)
    rows = await session.scalars(
        select(Dispute).where(Dispute.job_id == job_id).order_by(Dispute.created_at.desc(), Dispute.id)
    )
    notes = await session.scalars(
        select(AuditEvent)
        .where(AuditEvent.target_type == "job", AuditEvent.target_id == job_id, AuditEvent.action == NOTE)
        .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
        .limit(100)
    )
    return staff_schemas.AdminTaskDetail(
        task=await _task(session, job),
        job=jobs.view(job).model_dump(mode="json", by_alias=True),
        disputes=[disputes.view(d) for d in rows],
        notes=[
            staff_schemas.StaffNote(
                actor_id=n.actor_id, note=str((n.data or {}).get("note", "")), created_at=n.created_at
            )
            for n in notes
        ],
        redacted=not full,
        payment=await _payment(session, job_id) if full else None,
        audit_entries=[staff_schemas.AuditEntry.of(e) for e in await audit.about(session, "job", job_id, 50)]
        if full
        else None,
    )


async def act(
    session: AsyncSession,
    actor: Actor,
    job_id: str,
    body: staff_schemas.TaskAction,
    policy: disputes.DisputePolicy,
) -> staff_schemas.AdminTaskDetail:
    """One staff action (see TaskAction), audited; any action is the open dispute's first response."""
    job = await jobs.lock(session, job_id)
    before = job.status
    data: dict[str, Any] = {}
    if body.action == "note":
        pass  # the note is the audit entry below (`task.note`, shown to every staff role)
    elif body.action == "cancel":
        actor.require(Permission.MANAGE_TASKS)
        if job.status not in ACTIVE_JOBS:
            raise Conflict(
                f"Only a job that is not over can be cancelled; this one is {job.status}.",
                code="invalid_state",
                current_state=job.status,
            )
        job = await review.cancel_by_staff(session, actor, job, body.note)
    elif body.action == "dispute":
        opened = await disputes.open_by_staff(session, actor, job_id, body.reason_code, body.note, policy)
        data["disputeId"] = opened.id
    elif body.action == "resolve":
        if body.resolve is None:
            raise field_error("resolve", "The resolve action needs the resolution (`resolve`).", "required")
        if job.open_dispute_id is None:
            raise Conflict("No dispute is open on this job.", code="no_open_dispute")
        data["disputeId"] = job.open_dispute_id
        await disputes.resolve(session, actor, job.open_dispute_id, body.resolve)
    else:
        actor.require(Permission.MANAGE_TASKS)
        archive = body.action == "archive"
        if archive and (job.status not in CLOSED or job.open_dispute_id):
            raise Conflict(
                "Only a closed job with no open dispute can be archived.",
                code="invalid_state",
                current_state=job.status,
            )
        job.staff_archived_at = clock.now() if archive else None
    await disputes.mark_responded(session, job_id)
    await session.flush()
    audit.by(
        session,
        actor,
        f"task.{body.action}",
        "job",
        job_id,
        note=body.note,
        before=before,
        after=job.status,
        **data,
    )
    await reread(session, job)
    return await detail(session, actor, job_id)


async def refund(
    session: AsyncSession, actor: Actor, job_id: str, body: staff_schemas.TaskRefund
) -> staff_schemas.TaskRefunded:
    """A partial refund of a paid job's escrow to the requester's balance (ADMIN, SUPERADMIN), once per
    idempotencyKey, audited; refused while a dispute freezes the job."""
    actor.require(Permission.ADJUST_BALANCE)
    job = await jobs.lock(session, job_id)
    jobs.check_not_frozen(job)
    key = f"task_refund:{job_id}:{body.idempotency_key or new_id('rfd')}"
    txn = await session.scalar(select(LedgerTransaction).where(LedgerTransaction.idempotency_key == key))
    if txn is None:
        await payments.refund_part(session, job_id, body.amount_cents, key)
        txn = await session.scalar(select(LedgerTransaction).where(LedgerTransaction.idempotency_key == key))
        assert txn is not None
        audit.by(
            session,
            actor,
            "task.refunded",
            "job",
            job_id,
            amountCents=body.amount_cents,
            reason=body.reason,
            transactionId=txn.id,
        )
        await disputes.mark_responded(session, job_id)
    await reread(session, job)
    payment = await _payment(session, job_id)
    assert payment is not None
    await write_gathered(session)  # the posting's documents, written with the commit otherwise
    document = await session.scalar(
        select(CommercialDocument).where(CommercialDocument.transaction_id == txn.id)
    )
    return staff_schemas.TaskRefunded(
        task=await _task(session, job),
        payment=payment,
        transaction_id=txn.id,
        document=staff_schemas.IssuedDocument(id=document.id, kind=document.kind, number=document.number)
        if document is not None
        else None,
    )


# --- job administration ----------------------------------------------------------------------------------


async def auto_award(session: AsyncSession, actor: Actor, job_id: str) -> job_schemas.AwardResult:
    """The review deadline passed and the requester did not decide: award by the documented rule, the
    earliest submission still standing (first to deliver wins). Audited."""
    job = await jobs.lock(session, job_id)
    deadline = clock.as_utc(job.review_deadline_at)
    if job.status != JobStatus.IN_REVIEW or deadline is None or deadline > clock.now():
        raise Conflict(
            "Auto-award is for a job in review whose review deadline has passed.",
            code="review_not_overdue",
            current_state=job.status,
            review_deadline_at=job.review_deadline_at,
        )
    first = await session.scalar(
        select(Submission)
        .where(Submission.job_id == job_id, Submission.status == SubmissionStatus.SUBMITTED)
        .order_by(Submission.created_at, Submission.id)
        .limit(1)
    )
    if first is None:
        raise Conflict(
            "This job has no submission to award.", code="nothing_to_award", current_state=job.status
        )
    result = await review.award_submission(session, job, first, actor)
    audit.by(
        session, actor, "job.auto_awarded", "job", job_id, submissionId=first.id, awardId=result.award.id
    )
    return result


async def award_override(
    session: AsyncSession, actor: Actor, job_id: str, body: staff_schemas.AwardOverride
) -> job_schemas.AwardResult:
    """Staff award a submission in the requester's place (a job in progress, in review, or closed with no
    award, whose escrow is then taken from the requester's balance again). A disputed job is settled through
    its dispute (FORCE_AWARD) instead: 409 `dispute_open`. Audited."""
    job = await jobs.lock(session, job_id)
    jobs.check_not_frozen(job)
    submission = await session.get(Submission, body.submission_id)
    if submission is None or submission.job_id != job.id:
        raise field_error(
            "submissionId", f"{body.submission_id} is not a submission of job {job.id}.", "unknown"
        )
    if job.status == JobStatus.AWARDED:
        raise Conflict("This job has already been awarded.", code="already_awarded", current_state=job.status)
    result = await review.award_submission(session, job, submission, actor, by_staff=True)
    audit.by(
        session,
        actor,
        "job.award_overridden",
        "job",
        job_id,
        submissionId=submission.id,
        awardId=result.award.id,
        reason=body.reason,
    )
    return result
