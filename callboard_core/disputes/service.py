"""Disputes: a party of a job opens one, staff settle it (never the parties). docs/decisions.md has the rules.

Who may open, and until when: the requester (its agent, or its owner on the owner mirror) or a worker with a
submission on the job (its agent, or its owner), once the job is published and until `dispute_window_days`
after it closed; one open dispute per job at a time, one dispute per party per job. Staff may open one too
(the task action `dispute`).

While a dispute is open the job's money is frozen: no award, no-award or cancellation (409 `dispute_open`),
the deadline sweeper leaves the job alone, and its payout is not sent. A paid job whose escrow had already
gone back (a no-award) is held again from the requester's balance, up to its pay and fee, so a FORCE_AWARD
can pay; every other resolution gives the hold back.

The resolution (ADMIN, SUPERADMIN) moves the dispute OPEN -> RESOLVED by compare-and-set under the job's
lock, so two staff resolving at once end with one resolution and one 409; the same `idempotencyKey` again
answers the first resolution. Each resolution's money moves are ledger transactions that sum to zero,
posted in the resolution's transaction (any refusal rolls everything back):
- UPHOLD_AWARD: an awarded job; the payout proceeds.
- UPHOLD_NO_AWARD: a job closed with no award (or cancelled); the refund stands.
- FORCE_AWARD: award `submissionId` (a job in progress, in review, or closed with no award): capture and pay.
- REFUND_REQUESTER: an open job is cancelled (its escrow returned); an awarded one whose payout was not sent
  has its capture reversed (pay and fee back, a credit note; the payout CANCELLED). The worker loses
  reputation.
- SUSPEND_REQUESTER: the requester agent is suspended (its keys revoked); its reputation counts the loss.
- MARK_WORKER_INVALID: the worker loses reputation; with `suspendCapability` it loses `capabilityTagId`.
- ADMIN_ADJUSTMENT: `adjustmentAmountCents` to (or from) the requester's owner, or `workerAgentId`'s owner,
  against the platform's adjustments account (a credit note or invoice).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock, states
from callboard_core.agents import capability_links, reputation
from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.audit import service as audit
from callboard_core.config import Settings
from callboard_core.db.lookup import reread
from callboard_core.db.uow import UnitsOfWork
from callboard_core.disputes import schemas as dispute_schemas
from callboard_core.disputes.events import DisputeOpened, DisputeResolved
from callboard_core.disputes.models import Dispute
from callboard_core.disputes.states import DISPUTE_MOVES, DisputeStatus, Resolution, Side, sla
from callboard_core.errors import Conflict, NotFound, field_error
from callboard_core.guidance import Act, step
from callboard_core.jobs import events
from callboard_core.jobs import service as jobs
from callboard_core.jobs.access import may_act_for
from callboard_core.jobs.models import Job, Submission
from callboard_core.jobs.review import award_submission, cancel_by_staff, submitter_ids
from callboard_core.jobs.states import JobStatus, SubmissionStatus
from callboard_core.ledger import service as ledger
from callboard_core.payments import service as payments
from callboard_core.payments.states import PaymentStatus
from callboard_core.payouts import service as payouts
from callboard_core.principals import Actor
from callboard_core.security.permissions import Permission
from callboard_core.staff import agents as staff_agents
from callboard_core.staff import schemas as staff_schemas

OPEN_JOB = frozenset({JobStatus.ADMISSION_OPEN, JobStatus.IN_PROGRESS, JobStatus.IN_REVIEW})


@dataclass(frozen=True)
class DisputePolicy:
    window: timedelta
    response: timedelta
    resolution: timedelta
    due_soon: timedelta

    @classmethod
    def of(cls, settings: Settings) -> DisputePolicy:
        return cls(
            window=timedelta(days=settings.dispute_window_days),
            response=timedelta(hours=settings.dispute_response_hours),
            resolution=timedelta(hours=settings.dispute_resolution_hours),
            due_soon=timedelta(hours=settings.dispute_due_soon_hours),
        )


def view(d: Dispute) -> dispute_schemas.DisputeView:
    state, _ = sla(d, clock.now())
    return dispute_schemas.DisputeView(
        id=d.id,
        job_id=d.job_id,
        status=DisputeStatus(d.status).value,
        side=Side(d.side).value,
        opened_by_agent_id=d.opened_by_agent_id,
        submission_id=d.submission_id,
        reason_code=d.reason_code,
        reason_text=d.reason_text,
        evidence_json=d.evidence_json,
        held_cents=d.held_cents,
        sla_state=state.value,
        response_due_at=d.response_due_at,
        resolution_due_at=d.resolution_due_at,
        responded_at=d.responded_at,
        resolution=d.resolution,
        resolution_notes=d.resolution_notes,
        outcome=d.resolution_json,
        resolved_at=d.resolved_at,
        created_at=d.created_at,
    )


# --- opening ---------------------------------------------------------------------------------------------


async def _party(
    session: AsyncSession, actor: Actor, job: Job, chosen: str | None
) -> tuple[Side, Agent, Submission | None]:
    """Which party of `job` the actor opens for: the requester, or a worker with a submission (an owner of
    both names the worker with `workerAgentId`). Anyone else: the job does not exist for them (404)."""
    requester = await session.get(Agent, job.requester_agent_id)
    submissions = list((await session.scalars(select(Submission).where(Submission.job_id == job.id))).all())
    workers = {s.worker_agent_id: s for s in submissions}
    candidates: list[tuple[Side, Agent, Submission | None]] = []
    if requester is not None and may_act_for(actor, requester) and chosen in (None, requester.id):
        candidates.append((Side.REQUESTER, requester, None))
    for agent_id, submission in workers.items():
        agent = await session.get(Agent, agent_id)
        if agent is not None and may_act_for(actor, agent) and chosen in (None, agent_id):
            candidates.append((Side.WORKER, agent, submission))
    if not candidates or actor.staff:
        raise NotFound("No such job.", code="job_not_found")
    return candidates[0]


def _window_closed(job: Job, policy: DisputePolicy) -> bool:
    closed = clock.as_utc(job.closed_at)
    return closed is not None and clock.now() > closed + policy.window


async def _owners(session: AsyncSession, job: Job, *agent_ids: str | None) -> tuple[str, ...]:
    found: list[str] = []
    for agent_id in (job.requester_agent_id, *agent_ids):
        agent = await session.get(Agent, agent_id) if agent_id else None
        if agent is not None and agent.owner_id and agent.owner_id not in found:
            found.append(agent.owner_id)
    return tuple(found)


async def _hold(session: AsyncSession, dispute: Dispute, job: Job) -> None:
    """A paid job whose escrow went back: hold its pay and fee again (what the balance covers)."""
    payment = await payments.find(session, job.id)
    if payment is None or payment.status != PaymentStatus.RELEASED:
        return
    available = (await ledger.balances(session, payment.user_id)).available_cents
    held = min(available, payment.pay_cents + payment.fee_cents)
    if held <= 0:
        return
    await ledger.reserve(
        session,
        user_id=payment.user_id,
        amount_cents=held,
        job_id=job.id,
        key=f"dispute_hold:{dispute.id}",
        metadata={"disputeId": dispute.id, "hold": True},
        savepoint=False,
    )
    dispute.held_cents = held


async def _start(
    session: AsyncSession,
    policy: DisputePolicy,
    job: Job,
    *,
    side: Side,
    agent_id: str | None,
    user_id: str | None,
    submission_id: str | None,
    reason_code: str,
    reason_text: str,
    evidence: Any,
) -> Dispute:
    """Open the dispute on the locked `job`: the checks every opener shares, the row, the freeze, the hold."""
    if job.status == JobStatus.DRAFT:
        raise Conflict("A draft has no one to dispute with: publish the job first.", code="job_not_published")
    if _window_closed(job, policy):
        raise Conflict(
            f"Disputes on this job closed {policy.window.days} days after it ended.",
            code="dispute_window_closed",
            closed_at=job.closed_at,
        )
    if job.open_dispute_id is not None:
        raise Conflict(
            "A dispute is already open on this job; staff will settle it.",
            code="dispute_already_open",
            dispute_id=job.open_dispute_id,
            next_action=step(Act.DISPUTE_STATUS, "Follow the open dispute.", job_id=job.id),
        )
    now = clock.now()
    dispute = Dispute(
        job_id=job.id,
        status=DisputeStatus.OPEN,
        side=side,
        opened_by_agent_id=agent_id,
        opened_by_user_id=user_id,
        submission_id=submission_id,
        reason_code=reason_code,
        reason_text=reason_text,
        evidence_json=evidence,
        held_cents=0,
        response_due_at=now + policy.response,
        resolution_due_at=now + policy.resolution,
        due_soon_minutes=int(policy.due_soon.total_seconds() // 60),
    )
    state, next_at = sla(dispute, now)
    dispute.sla_state, dispute.sla_next_at = state, next_at
    try:
        async with session.begin_nested():
            session.add(dispute)
            await session.flush()
    except IntegrityError:
        raise Conflict(
            "You have already disputed this job (one dispute per party per job).",
            code="dispute_already_opened",
        ) from None
    frozen = await session.execute(
        update(Job)
        .where(Job.id == job.id, Job.open_dispute_id.is_(None))
        .values(open_dispute_id=dispute.id)
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    )
    if frozen.scalar() is None:
        raise Conflict("A dispute is already open on this job.", code="dispute_already_open")
    job.open_dispute_id = dispute.id
    await _hold(session, dispute, job)
    return dispute


async def open_dispute(
    session: AsyncSession,
    actor: Actor,
    job_id: str,
    body: dispute_schemas.DisputeOpen,
    policy: DisputePolicy,
) -> dispute_schemas.DisputeView:
    """A party opens a dispute on the job (see the module docstring for who and until when)."""
    job = await jobs.get(session, job_id)
    side, agent, submission = await _party(session, actor, job, body.worker_agent_id)
    job = await jobs.lock(session, job_id)
    dispute = await _start(
        session,
        policy,
        job,
        side=side,
        agent_id=agent.id,
        user_id=actor.user_id or (actor.key.owner_id if actor.key else None),
        submission_id=submission.id if submission else None,
        reason_code=body.reason_code,
        reason_text=body.reason_text,
        evidence=body.evidence_json,
    )
    await _announce_opened(session, job, dispute, actor)
    return view(dispute)


async def open_by_staff(
    session: AsyncSession,
    actor: Actor,
    job_id: str,
    reason_code: str,
    reason_text: str,
    policy: DisputePolicy,
) -> Dispute:
    """Staff open a dispute on a job (the task action `dispute`): the job's money is frozen at once."""
    actor.require(Permission.MANAGE_TASKS)
    job = await jobs.lock(session, job_id)
    dispute = await _start(
        session,
        policy,
        job,
        side=Side.STAFF,
        agent_id=None,
        user_id=actor.user_id,
        submission_id=None,
        reason_code=reason_code,
        reason_text=reason_text,
        evidence=None,
    )
    dispute.responded_at = clock.now()  # staff opened it: the response is given
    dispute.sla_state, dispute.sla_next_at = sla(dispute, clock.now())
    await _announce_opened(session, job, dispute, actor)
    audit.by(session, actor, "dispute.opened", "dispute", dispute.id, jobId=job.id, reasonCode=reason_code)
    return dispute


async def _announce_opened(session: AsyncSession, job: Job, dispute: Dispute, actor: Actor) -> None:
    submitters = await submitter_ids(session, job.id)
    parties = [a for a in (job.requester_agent_id, *submitters) if a != dispute.opened_by_agent_id]
    await events.record(
        session,
        job.id,
        "dispute_opened",
        actor,
        {"disputeId": dispute.id, "reasonCode": dispute.reason_code, "side": dispute.side},
        notify=parties,
        title=f"Dispute opened: {job.title}",
        body="The job's money is frozen until callboard staff resolve the dispute.",
    )
    await bus.publish(session, DisputeOpened(dispute.id, job.id, await _owners(session, job, *submitters)))


# --- reading ---------------------------------------------------------------------------------------------


async def _dispute(session: AsyncSession, dispute_id: str) -> Dispute:
    dispute = await session.get(Dispute, dispute_id)
    if dispute is None:
        raise NotFound("No such dispute.", code="dispute_not_found")
    return dispute


async def detail(session: AsyncSession, dispute_id: str) -> dispute_schemas.DisputeView:
    return view(await _dispute(session, dispute_id))


async def list_disputes(
    session: AsyncSession, q: dispute_schemas.DisputeQuery
) -> dispute_schemas.DisputeList:
    """Open disputes first (the oldest first: the SLA runs from the opening), then resolved, newest first."""
    statement = select(Dispute)
    if q.status:
        statement = statement.where(Dispute.status == q.status)
    rows = await session.scalars(
        statement.order_by((Dispute.status != DisputeStatus.OPEN), Dispute.response_due_at, Dispute.id).limit(
            q.limit
        )
    )
    return dispute_schemas.DisputeList(disputes=[view(d) for d in rows])


async def for_party(session: AsyncSession, actor: Actor, job_id: str) -> dispute_schemas.DisputeList:
    """The disputes on a job the actor is a party of (requester, or a worker with a submission), newest
    first; anyone else: 404."""
    job = await jobs.get(session, job_id)
    await _party(session, actor, job, None)
    rows = await session.scalars(
        select(Dispute).where(Dispute.job_id == job_id).order_by(Dispute.created_at.desc(), Dispute.id)
    )
    return dispute_schemas.DisputeList(disputes=[view(d) for d in rows])


async def mark_responded(session: AsyncSession, job_id: str) -> None:
    """A staff note or action on the job is the first response to its open dispute (the SLA's clock)."""
    now = clock.now()
    dispute = await session.scalar(
        select(Dispute).where(Dispute.job_id == job_id, Dispute.status == DisputeStatus.OPEN)
    )
    if dispute is None or dispute.responded_at is not None:
        return
    dispute.responded_at = now
    dispute.sla_state, dispute.sla_next_at = sla(dispute, now)
    await session.flush()


# --- resolving -------------------------------------------------------------------------------------------


def _not_applicable(resolution: str, job: Job, hint: str) -> Conflict:
    return Conflict(
        f"{resolution} does not apply to a job that is {job.status}: {hint}",
        code="resolution_not_applicable",
        current_state=job.status,
    )


async def _submission_of(session: AsyncSession, job: Job, submission_id: str | None) -> Submission:
    if not submission_id:
        raise field_error("submissionId", "FORCE_AWARD names the submission to award.", "required")
    submission = await session.get(Submission, submission_id)
    if submission is None or submission.job_id != job.id:
        raise field_error("submissionId", f"{submission_id} is not a submission of job {job.id}.", "unknown")
    return submission


async def _worker_of(session: AsyncSession, job: Job, dispute: Dispute, worker_id: str | None) -> str:
    """The worker a resolution is about: the one named (it must have submitted to the job), else the
    disputing worker, else the awarded one."""
    if worker_id:
        found = await session.scalar(
            select(Submission.id).where(Submission.job_id == job.id, Submission.worker_agent_id == worker_id)
        )
        if found is None:
            raise field_error("workerAgentId", f"{worker_id} has no submission on job {job.id}.", "unknown")
        return worker_id
    if dispute.side == Side.WORKER and dispute.opened_by_agent_id:
        return dispute.opened_by_agent_id
    if job.awarded_submission_id:
        submission = await session.get(Submission, job.awarded_submission_id)
        if submission is not None:
            return submission.worker_agent_id
    raise field_error("workerAgentId", "Name the worker this resolution is about.", "required")


async def _unhold(session: AsyncSession, dispute: Dispute, job: Job) -> str | None:
    if dispute.held_cents <= 0:
        return None
    payment = await payments.find(session, job.id)
    assert payment is not None
    txn = await ledger.release(
        session,
        user_id=payment.user_id,
        amount_cents=dispute.held_cents,
        job_id=job.id,
        key=f"dispute_unhold:{dispute.id}",
        metadata={"disputeId": dispute.id, "hold": True},
    )
    return txn.id


async def _apply(
    session: AsyncSession, actor: Actor, dispute: Dispute, job: Job, body: dispute_schemas.DisputeResolve
) -> dict[str, Any]:
    """The resolution's effect on the job, its money and its parties; what it did (for the record)."""
    r = Resolution(body.resolution)
    outcome: dict[str, Any] = {"resolution": r.value}
    if r is Resolution.UPHOLD_AWARD:
        if job.status != JobStatus.AWARDED:
            raise _not_applicable(r, job, "only an awarded job's award can be upheld.")
    elif r is Resolution.UPHOLD_NO_AWARD:
        if job.status not in (JobStatus.NO_AWARD, JobStatus.CANCELLED):
            raise _not_applicable(r, job, "close an open job with REFUND_REQUESTER.")
    elif r is Resolution.FORCE_AWARD:
        submission = await _submission_of(session, job, body.submission_id)
        if job.status == JobStatus.AWARDED or submission.status == SubmissionStatus.AWARDED:
            raise Conflict(
                "This job has already been awarded.", code="already_awarded", current_state=job.status
            )
        result = await award_submission(
            session, job, submission, actor, by_staff=True, held_cents=dispute.held_cents
        )
        dispute.held_cents = 0  # the hold paid for the award
        outcome.update(awardId=result.award.id, submissionId=submission.id)
    elif r is Resolution.REFUND_REQUESTER:
        outcome.update(await _refund_requester(session, actor, job))
    elif r is Resolution.SUSPEND_REQUESTER:
        await staff_agents.change_status(
            session,
            actor,
            job.requester_agent_id,
            staff_schemas.AgentStatusUpdate(status=AgentStatus.SUSPENDED.value, reason=body.resolution_notes),
        )
        await reputation.record_dispute_lost(session, job.requester_agent_id, job.capability_tag_id)
        outcome.update(suspendedAgentId=job.requester_agent_id)
    elif r is Resolution.MARK_WORKER_INVALID:
        worker_id = await _worker_of(session, job, dispute, body.worker_agent_id)
        await reputation.record_dispute_lost(session, worker_id, job.capability_tag_id)
        outcome.update(workerAgentId=worker_id)
        if body.suspend_capability:
            tag_id = body.capability_tag_id or job.capability_tag_id
            if not tag_id:
                raise field_error("capabilityTagId", "Name the capability to suspend.", "required")
            removed = await capability_links.remove(session, worker_id, tag_id)
            outcome.update(suspendedCapabilityTagId=tag_id, capabilityRemoved=removed)
    elif r is Resolution.ADMIN_ADJUSTMENT:
        outcome.update(await _adjust(session, actor, dispute, job, body))
    if body.flag_requester_abuse and r is not Resolution.SUSPEND_REQUESTER:
        await reputation.record_dispute_lost(session, job.requester_agent_id, job.capability_tag_id)
        outcome["requesterFlagged"] = True
    released = await _unhold(session, dispute, job)
    if released:
        outcome["holdReleasedTransactionId"] = released
    return outcome


async def _refund_requester(session: AsyncSession, actor: Actor, job: Job) -> dict[str, Any]:
    if job.status in OPEN_JOB or job.status == JobStatus.PENDING_ACCEPTANCE:
        await cancel_by_staff(session, actor, job, "A dispute was resolved with a refund to the requester.")
        payment = await payments.find(session, job.id)
        return {
            "jobCancelled": True,
            "releaseTransactionId": payment.release_transaction_id if payment else None,
        }
    if job.status == JobStatus.AWARDED:
        payment = await payments.find(session, job.id)
        if payment is None or payment.status != PaymentStatus.CAPTURED:
            raise _not_applicable("REFUND_REQUESTER", job, "a free job's award has no money to refund.")
        payout = await payouts.cancel_unsent(session, job.id)
        refunded = await payments.refund_captured(session, job.id)
        assert refunded is not None
        if refunded.worker_agent_id:
            await reputation.record_dispute_lost(session, refunded.worker_agent_id, job.capability_tag_id)
        return {
            "refundTransactionId": refunded.refund_transaction_id,
            "cancelledPayoutId": payout.id if payout else None,
        }
    return {}  # closed with no award or cancelled: the escrow went back already


async def _adjust(
    session: AsyncSession, actor: Actor, dispute: Dispute, job: Job, body: dispute_schemas.DisputeResolve
) -> dict[str, Any]:
    if not body.adjustment_amount_cents:
        raise field_error(
            "adjustmentAmountCents", "ADMIN_ADJUSTMENT needs a non-zero amount of cents.", "required"
        )
    agent_id = job.requester_agent_id
    if body.worker_agent_id:
        agent_id = await _worker_of(session, job, dispute, body.worker_agent_id)
    agent = await session.get(Agent, agent_id)
    if agent is None or agent.owner_id is None:
        raise Conflict("That party has no owner whose balance could be adjusted.", code="party_has_no_owner")
    txn = await ledger.adjust(
        session,
        user_id=agent.owner_id,
        amount_cents=body.adjustment_amount_cents,
        key=f"dispute_adjustment:{dispute.id}",
        reason=f"Dispute {dispute.id}: {body.resolution_notes}",
        staff_user_id=actor.user_id,
        job_id=job.id,
    )
    return {"adjustmentTransactionId": txn.id, "adjustedUserId": agent.owner_id}


async def resolve(
    session: AsyncSession, actor: Actor, dispute_id: str, body: dispute_schemas.DisputeResolve
) -> dispute_schemas.DisputeView:
    """Settle an open dispute (ADMIN, SUPERADMIN), exactly once (see the module docstring)."""
    actor.require(Permission.RESOLVE_DISPUTE)
    dispute = await _dispute(session, dispute_id)
    job = await jobs.lock(session, dispute.job_id)  # resolvers (and the job's own moves) queue here
    await reread(session, dispute)
    if dispute.status != DisputeStatus.OPEN:
        if body.idempotency_key and dispute.resolution_key == body.idempotency_key:
            return view(dispute)  # a retry: the first resolution's answer, nothing done twice
        raise Conflict(
            "This dispute has been resolved already.",
            code="dispute_already_resolved",
            current_state=dispute.status,
            resolution=dispute.resolution,
        )
    now = clock.now()
    moved = await states.move(
        session,
        Dispute,
        dispute.id,
        DISPUTE_MOVES,
        DisputeStatus.RESOLVED,
        message="This dispute has been resolved already.",
        code="dispute_already_resolved",
        current=dispute.status,
        resolution=body.resolution,
        resolution_notes=body.resolution_notes,
        resolution_key=body.idempotency_key,
        resolved_by_user_id=actor.user_id,
        resolved_at=now,
        responded_at=dispute.responded_at or now,
        sla_state="NONE",
        sla_next_at=None,
        updated_at=now,
    )
    await session.execute(
        update(Job)
        .where(Job.id == job.id, Job.open_dispute_id == moved.id)
        .values(open_dispute_id=None)
        .execution_options(synchronize_session=False)
    )
    job.open_dispute_id = None  # unfrozen: the resolution's own moves may now touch the money
    outcome = await _apply(session, actor, moved, job, body)
    if body.metadata_json is not None:
        outcome["metadata"] = body.metadata_json
    moved.resolution_json = outcome
    await session.flush()
    audit.by(
        session,
        actor,
        "dispute.resolved",
        "dispute",
        moved.id,
        jobId=job.id,
        resolution=body.resolution,
        notes=body.resolution_notes,
        outcome=outcome,
        idempotencyKey=body.idempotency_key,
    )
    submitters = await submitter_ids(session, job.id)
    await events.record(
        session,
        job.id,
        "dispute_resolved",
        actor,
        {"disputeId": moved.id, "resolution": body.resolution},
        notify=[job.requester_agent_id, *submitters],
        title=f"Dispute resolved: {job.title}",
        body=f"Staff resolved the dispute: {body.resolution}.",
    )
    await bus.publish(
        session, DisputeResolved(moved.id, job.id, await _owners(session, job, *submitters), body.resolution)
    )
    return view(moved)


# --- the SLA sweep ---------------------------------------------------------------------------------------


async def due_sla_ids(session: AsyncSession, limit: int) -> list[str]:
    rows = await session.scalars(
        select(Dispute.id)
        .where(Dispute.status == DisputeStatus.OPEN, Dispute.sla_next_at <= clock.now())
        .order_by(Dispute.sla_next_at)
        .limit(limit)
    )
    return list(rows)


async def refresh_sla(session: AsyncSession, dispute_id: str) -> bool:
    """Recompute one open dispute's SLA indicator (the sweeper); a breach goes on the job's history."""
    dispute = await session.get(Dispute, dispute_id)
    if dispute is None or dispute.status != DisputeStatus.OPEN:
        return False
    state, next_at = sla(dispute, clock.now())
    changed = state != dispute.sla_state
    dispute.sla_state, dispute.sla_next_at = state, next_at
    if changed and state.name.endswith("BREACHED"):
        await events.record(
            session,
            dispute.job_id,
            "dispute_sla_breached",
            None,
            {"disputeId": dispute.id, "slaState": state},
        )
    await session.flush()
    return changed


async def sweep_sla(core: UnitsOfWork, limit: int = 200) -> int:
    """One pass: every open dispute whose SLA indicator is due to change, each in its own unit of work."""
    async with core.uow(write=False) as uow:
        ids = await due_sla_ids(uow.session, limit)
    changed = 0
    for dispute_id in ids:
        async with core.uow() as uow:
            changed += int(await refresh_sla(uow.session, dispute_id))
    return changed


def risky(states_: frozenset[str]) -> Any:
    """Jobs whose open dispute's stored SLA indicator is one of `states_` (the staff task risk filters)."""
    return Job.open_dispute_id.in_(
        select(Dispute.id).where(
            Dispute.status == DisputeStatus.OPEN, or_(*(Dispute.sla_state == s for s in states_))
        )
    )
