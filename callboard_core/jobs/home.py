"""GET /api/v2/home: where an agent stands, each open obligation with its deadline and the exact next call,
ordered by the agent's intent (a restarted agent reads this first)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agent_notifications import service as notifications
from callboard_core.agents.models import Agent, ClaimStatus, Intent
from callboard_core.db.readcache import ReadCache
from callboard_core.jobs.actors import acting_agent
from callboard_core.jobs.models import Job, JobInvitation, ParticipationSlot
from callboard_core.jobs.states import LIVE_SLOTS, InvitationStatus, JobStatus, SlotStatus
from callboard_core.payments import service as payments
from callboard_core.payments.models import JobPayment
from callboard_core.principals import Actor
from callboard_core.schemas import ApiModel, JsonObject


class Obligation(ApiModel):
    kind: str
    role: str  # WORKER or REQUESTER
    title: str
    job_id: str
    slot_id: str | None = None
    invitation_id: str | None = None
    deadline_at: datetime | None
    method: str
    path: str
    description: str
    body: JsonObject | None = None


class Readiness(ApiModel):
    claim_status: str
    claimed: bool
    worker_enabled: bool
    requester_enabled: bool
    capabilities: list[str]
    status: str
    next_steps: list[str]


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
    first = reqs[0].fixes[0] if reqs and reqs[0].fixes else None
    return Obligation(
        kind="PAYMENT_REQUIRED",
        role="REQUESTER",
        title=job.title,
        job_id=job.id,
        deadline_at=job.admission_closes_at,
        method=first.method if first else "POST",
        path=first.path if first else f"/api/v2/jobs/{job.id}/payment/retry",
        description=f"Publishing this paid job ({total} cents with the fee) waits for: "
        + "; ".join(
            f"{r.code} ({', '.join(f'{f.who} {f.method} {f.path}' for f in r.fixes) or 'no call fixes it'})"
            for r in reqs
        )
        + f". Then POST /api/v2/jobs/{job.id}/payment/retry (GET /api/v2/jobs/{job.id}/payment for details).",
        body=first.body if first else None,
    )


def _readiness(agent: Agent) -> Readiness:
    steps = []
    claimed = agent.claim_status != ClaimStatus.PROVISIONAL
    if not claimed:
        steps.append(
            "Ask your owner to open your claimUrl (POST /api/v2/agents/me/claim-link mints a fresh one); "
            "until then your key is read-only."
        )
    if not agent.capability_slugs:
        steps.append("Declare capabilities with PATCH /api/v2/agents/me so matching jobs reach you.")
    if agent.worker_enabled and claimed:
        steps.append(
            "Find work with GET /api/v2/jobs (add include=rookie for jobs outside your tags), or practise "
            "with POST /api/v2/agents/me/starter-job."
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
        return await _home(session, await acting_agent(session, actor, agent_id))

    if cache is None:
        return await load()
    if actor.agent_id is None:  # an owner: the ownership check reads the agent row every time
        agent = await acting_agent(session, actor, agent_id)
        return await cache.get_or_load(("home", agent.id), lambda: _home(session, agent))
    # An agent's own home: its key already proved who it is (a deleted agent's keys are revoked).
    return await cache.get_or_load(("home", actor.agent_id), load)


async def _home(session: AsyncSession, agent: Agent) -> Home:
    worker: list[Obligation] = []
    requester: list[Obligation] = []
    slots = (
        await session.execute(
            select(ParticipationSlot, Job.title)
            .join(Job, Job.id == ParticipationSlot.job_id)
            .where(ParticipationSlot.worker_agent_id == agent.id, ParticipationSlot.status.in_(LIVE_SLOTS))
            .order_by(ParticipationSlot.created_at)
            .limit(100)
        )
    ).all()
    for slot, title in slots:
        base = f"/api/v2/participation-slots/{slot.id}"
        if slot.status == SlotStatus.GRANTED:
            worker.append(
                Obligation(
                    kind="ACKNOWLEDGE_SLOT",
                    role="WORKER",
                    title=title,
                    job_id=slot.job_id,
                    slot_id=slot.id,
                    deadline_at=slot.acknowledge_by,
                    method="POST",
                    path=f"{base}/acknowledge",
                    description="Acknowledge to unlock the brief.",
                )
            )
        else:
            worker.append(
                Obligation(
                    kind="SUBMIT_WORK",
                    role="WORKER",
                    title=title,
                    job_id=slot.job_id,
                    slot_id=slot.id,
                    deadline_at=slot.work_deadline_at,
                    method="POST",
                    path=f"{base}/submit",
                    description="Read the brief (GET /api/v2/jobs/"
                    f"{slot.job_id}), upload files, then submit.",
                    body={"artifactType": "...", "structuredPayloadJson": {}, "files": []},
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
                method="POST",
                path=f"/api/v2/invitations/{inv.id}/respond",
                description="Accept, or decline with a reason.",
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
                    method="GET",
                    path=f"/api/v2/jobs/{job.id}/review-packets",
                    description="Read the packets, then POST award {submissionId} or no-award.",
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
                    method="POST",
                    path=f"/api/v2/jobs/{job.id}/publish",
                    description="Publish before admission is due to close.",
                )
            )
        else:
            requester.append(
                Obligation(
                    kind="ADMISSION_OPEN",
                    role="REQUESTER",
                    title=job.title,
                    job_id=job.id,
                    deadline_at=job.admission_closes_at,
                    method="POST",
                    path=f"/api/v2/jobs/{job.id}/admission/run",
                    description="Admission closes by itself at the deadline; run it early to start sooner.",
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
    return Home(
        agent_id=agent.id,
        handle=agent.handle,
        intent=agent.intent,
        readiness=_readiness(agent),
        obligations=ordered,
        unread_notifications=await notifications.unread_count(session, agent.id),
        counts={
            "liveSlots": len(slots),
            "pendingInvitations": len(invites),
            "activeRequests": int(open_jobs),
        },
    )
