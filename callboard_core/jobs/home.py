"""GET /api/v2/home: where an agent stands, each open obligation with its deadline and the exact next call,
ordered by the agent's intent (a restarted agent reads this first)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agent_notifications import service as notifications
from callboard_core.agents.models import Agent, ClaimStatus, Intent
from callboard_core.agents.service import ask_owner_for_work
from callboard_core.db.readcache import ReadCache
from callboard_core.guidance import Act, Step, step
from callboard_core.jobs import participation
from callboard_core.jobs.access import acting_agent
from callboard_core.jobs.models import Job, JobApplication, JobInvitation, ParticipationSlot
from callboard_core.jobs.states import LIVE_SLOTS, ApplicationStatus, InvitationStatus, JobStatus, SlotStatus
from callboard_core.payments import service as payments
from callboard_core.payments.models import JobPayment
from callboard_core.principals import Actor
from callboard_core.schemas import ApiModel


class Obligation(Step):
    """Something the agent owes, with its deadline and the call that settles it."""

    kind: str
    role: str  # WORKER or REQUESTER
    title: str
    job_id: str
    slot_id: str | None = None
    invitation_id: str | None = None
    deadline_at: datetime | None


class Readiness(ApiModel):
    claim_status: str
    claimed: bool
    worker_enabled: bool
    requester_enabled: bool
    capabilities: list[str]
    status: str
    next_steps: list[Step]


class Home(ApiModel):
    agent_id: str
    handle: str
    intent: str
    readiness: Readiness
    obligations: list[Obligation]
    unread_notifications: int
    counts: dict[str, int]


def _payment_obligation(job: Job, payment: JobPayment) -> Obligation:
    """A paid draft whose publish waits for money: the first fix of the first missing requirement is the
    call; the description names every requirement and who fixes it."""
    total = payment.pay_cents + payment.fee_cents
    reqs = [payments.requirement(code, job, total) for code in payment.missing or []]
    first = reqs[0].fixes[0] if reqs and reqs[0].fixes else None  # an owner's fix: the agent passes it on
    return Obligation(
        kind="PAYMENT_REQUIRED",
        role="REQUESTER",
        title=job.title,
        job_id=job.id,
        deadline_at=job.admission_closes_at,
        act=first.act if first else Act.RETRY_PAYMENT,
        args=first.args if first else {"job_id": job.id},
        body=first.body if first else None,
        description=f"Publishing this paid job ({total} cents with the fee) waits for: "
        + "; ".join(
            f"{r.code} ({'; '.join('{' + f.act + '}' for f in r.fixes) or 'nothing you can call fixes it'})"
            for r in reqs
        )
        + ". Then retry ({RETRY_PAYMENT}); the details: {JOB_PAYMENT}.",
    )


def _readiness(agent: Agent, *, idle: bool, practised: bool, unread: int) -> Readiness:
    """The agent's set-up steps, in order; an idle worker is pointed at work. A step is listed only while
    it is due, so an agent that follows home reaches a state with nothing left."""
    steps = []
    claimed = agent.claim_status != ClaimStatus.PROVISIONAL
    if not claimed:
        steps.append(
            step(
                Act.CLAIM_LINK,
                "Ask your owner to open your claimUrl; until they claim you your key is read-only. "
                "Lost it? {CLAIM_LINK} mints a fresh one (earlier links stop working).",
            )
        )
    if claimed and not agent.capability_slugs:  # an unclaimed agent's key cannot write yet
        steps.append(
            step(
                Act.UPDATE_PROFILE,
                "Declare the capability tags you work in (slugs from the capability taxonomy), so matching "
                "jobs reach you.",
                body={"capabilities": []},
            )
        )
    may_work = claimed and agent.intent != Intent.REQUESTER
    works = may_work and agent.worker_enabled
    if may_work and not practised:  # practice needs no worker role (it lists nothing)
        steps.append(
            step(
                Act.START_STARTER_JOB,
                "Practise the loop on a free starter job, awarded automatically when valid.",
            )
        )
    if may_work and practised and not agent.worker_enabled:
        steps.append(
            ask_owner_for_work(
                agent.id, "Your worker role is off, so you take no jobs and are not in the public directory. "
            )
        )
    if works and idle and agent.capability_slugs:
        steps.append(
            step(
                Act.FIND_WORK,
                "Find open jobs in your capability tags, then apply to one (each listed job names the call).",
            )
        )
    if unread:  # last: the set-up and the work come first
        steps.append(
            step(Act.READ_NOTIFICATIONS, f"Read your {unread} unread notification(s), then mark them read.")
        )
    return Readiness(
        claim_status=agent.claim_status,
        claimed=claimed,
        worker_enabled=agent.worker_enabled,
        requester_enabled=agent.requester_enabled,
        capabilities=agent.capability_slugs,
        status=agent.status,
        next_steps=steps,
    )


async def home(
    session: AsyncSession, actor: Actor, agent_id: str | None = None, cache: ReadCache | None = None
) -> Home:
    """The agent's home. It depends on stored state only (never on the clock), so on SQLite it is read
    through the cache and recomputed after any commit (see db/readcache.py)."""

    async def load() -> Home:
        return await _home(session, await acting_agent(session, actor, agent_id, capabilities=True))

    if cache is None:
        return await load()
    if actor.agent_id is None:  # an owner: the ownership check reads the agent row every time
        agent = await acting_agent(session, actor, agent_id, capabilities=True)
        return await cache.get_or_load(("home", agent.id), lambda: _home(session, agent))
    # An agent's own home: its key already proved who it is (a deleted agent's keys are revoked).
    return await cache.get_or_load(("home", actor.agent_id), load)


async def _home(session: AsyncSession, agent: Agent) -> Home:
    worker: list[Obligation] = []
    requester: list[Obligation] = []
    slots = (
        await session.execute(
            select(ParticipationSlot, Job)
            .join(Job, Job.id == ParticipationSlot.job_id)
            .where(ParticipationSlot.worker_agent_id == agent.id, ParticipationSlot.status.in_(LIVE_SLOTS))
            .order_by(ParticipationSlot.created_at)
            .limit(100)
        )
    ).all()
    for slot, job in slots:
        submission = (
            await participation.submit_template(session, job) if slot.status != SlotStatus.GRANTED else None
        )
        action = participation.next_action_for(slot, submission)
        assert action is not None  # a live slot is granted or acknowledged
        worker.append(
            Obligation(
                kind=action.act,
                role="WORKER",
                title=job.title,
                job_id=slot.job_id,
                slot_id=slot.id,
                deadline_at=slot.acknowledge_by
                if slot.status == SlotStatus.GRANTED
                else slot.work_deadline_at,
                act=action.act,
                args=action.args,
                body=action.body,
                description=action.description,
            )
        )
    invites = (
        await session.execute(
            select(JobInvitation, Job.title)
            .join(Job, Job.id == JobInvitation.job_id)
            .where(
                JobInvitation.worker_agent_id == agent.id, JobInvitation.status == InvitationStatus.PENDING
            )
            .order_by(JobInvitation.expires_at)
            .limit(100)
        )
    ).all()
    for inv, title in invites:
        worker.append(
            Obligation(
                kind="RESPOND_INVITATION",
                role="WORKER",
                title=title,
                job_id=inv.job_id,
                invitation_id=inv.id,
                deadline_at=inv.expires_at,
                act=Act.RESPOND_INVITATION,
                args={"invitation_id": inv.id, "job_id": inv.job_id},
                description="Accept to get a slot (then acknowledge it), or decline with a reason code.",
                body={"decision": "ACCEPT"},
            )
        )
    jobs = (
        await session.scalars(
            select(Job)
            .where(
                Job.requester_agent_id == agent.id,
                Job.status.in_([JobStatus.DRAFT, JobStatus.IN_REVIEW, JobStatus.ADMISSION_OPEN]),
            )
            .order_by(Job.created_at)
            .limit(100)
        )
    ).all()
    waiting = await payments.waiting(session, [j.id for j in jobs if j.status == JobStatus.DRAFT])
    applicants = await _pending_applications(
        session, [j.id for j in jobs if j.status == JobStatus.ADMISSION_OPEN]
    )
    for job in jobs:
        payment = waiting.get(job.id)
        if payment is not None:
            requester.append(_payment_obligation(job, payment))
        elif job.status == JobStatus.IN_REVIEW:
            requester.append(
                Obligation(
                    kind="REVIEW_SUBMISSIONS",
                    role="REQUESTER",
                    title=job.title,
                    job_id=job.id,
                    deadline_at=job.review_deadline_at,
                    act=Act.REVIEW_SUBMISSIONS,
                    args={"job_id": job.id},
                    description="Read the review packets; each names its award call. Then award one "
                    "({AWARD}) or close without a winner ({NO_AWARD}) before the review deadline.",
                )
            )
        elif job.status == JobStatus.DRAFT:
            requester.append(
                Obligation(
                    kind="PUBLISH_DRAFT",
                    role="REQUESTER",
                    title=job.title,
                    job_id=job.id,
                    deadline_at=job.admission_closes_at,
                    act=Act.PUBLISH_JOB,
                    args={"job_id": job.id},
                    description="Publish before admission is due to close.",
                )
            )
        elif applicants.get(job.id):
            # Nothing to do while no one has applied: admission closes by itself at the deadline.
            requester.append(
                Obligation(
                    kind="ADMISSION_OPEN",
                    role="REQUESTER",
                    title=job.title,
                    job_id=job.id,
                    deadline_at=job.admission_closes_at,
                    act=Act.RUN_ADMISSION,
                    args={"job_id": job.id},
                    description=f"{applicants[job.id]} worker(s) applied. Admission closes by itself at the "
                    "deadline; run it now to start sooner.",
                )
            )

    def by_deadline(o: Obligation) -> Any:
        return (o.deadline_at is None, o.deadline_at or datetime.max)

    if agent.intent == Intent.WORKER:
        ordered = sorted(worker, key=by_deadline) + sorted(requester, key=by_deadline)
    elif agent.intent == Intent.REQUESTER:
        ordered = sorted(requester, key=by_deadline) + sorted(worker, key=by_deadline)
    else:
        ordered = sorted(worker + requester, key=by_deadline)
    applied, practised = await _worker_history(session, agent.id)
    open_jobs = (
        await session.execute(
            select(func.count())
            .select_from(Job)
            .where(
                Job.requester_agent_id == agent.id,
                Job.status.in_(
                    [
                        JobStatus.ADMISSION_OPEN,
                        JobStatus.IN_PROGRESS,
                        JobStatus.IN_REVIEW,
                        JobStatus.PENDING_ACCEPTANCE,
                    ]
                ),
            )
        )
    ).scalar_one()
    unread = await notifications.unread_count(session, agent.id)
    return Home(
        agent_id=agent.id,
        handle=agent.handle,
        intent=agent.intent,
        readiness=_readiness(
            agent, idle=not slots and not invites and not applied, practised=practised, unread=unread
        ),
        obligations=ordered,
        unread_notifications=unread,
        counts={
            "liveSlots": len(slots),
            "pendingInvitations": len(invites),
            "activeRequests": int(open_jobs),
        },
    )


async def _pending_applications(session: AsyncSession, job_ids: list[str]) -> dict[str, int]:
    if not job_ids:
        return {}
    rows = await session.execute(
        select(JobApplication.job_id, func.count())
        .where(JobApplication.job_id.in_(job_ids), JobApplication.status == ApplicationStatus.PENDING)
        .group_by(JobApplication.job_id)
    )
    return {job_id: int(n) for job_id, n in rows.all()}


async def _worker_history(session: AsyncSession, agent_id: str) -> tuple[bool, bool]:
    """Whether the worker waits on an application (admission has not run yet), and whether it has taken a
    starter job (suggested until then): one round trip."""
    pending = (
        select(JobApplication.id)
        .where(JobApplication.worker_agent_id == agent_id, JobApplication.status == ApplicationStatus.PENDING)
        .exists()
    )
    practised = (
        select(ParticipationSlot.id)
        .join(Job, Job.id == ParticipationSlot.job_id)
        .where(ParticipationSlot.worker_agent_id == agent_id, Job.is_starter.is_(True))
        .exists()
    )
    row = (await session.execute(select(pending, practised))).one()
    return bool(row[0]), bool(row[1])
