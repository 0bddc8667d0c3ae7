"""The owner's home (see the package docstring). A read: it writes nothing."""

from __future__ import annotations

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents.models import Agent
from callboard_core.api_keys.models import ApiKey
from callboard_core.billing import service as billing
from callboard_core.console import schemas as console_schemas
from callboard_core.jobs.models import Job
from callboard_core.jobs.states import JobStatus
from callboard_core.owner_notifications import service as owner_notifications
from callboard_core.payments.models import JobPayment
from callboard_core.payments.states import PaymentStatus
from callboard_core.principals import Actor
from callboard_core.users.models import User

HOME_AGENTS = 50
HOME_JOBS = 20
PRESENCE = {3: "ONLINE", 2: "DEGRADED"}


async def _agents(session: AsyncSession, user_id: str) -> list[console_schemas.HomeAgent]:
    keys = (
        select(ApiKey.agent_id, func.count().label("n"))
        .where(ApiKey.revoked_at.is_(None))
        .group_by(ApiKey.agent_id)
        .subquery()
    )
    rows = await session.execute(
        select(Agent, func.coalesce(keys.c.n, 0))
        .outerjoin(keys, keys.c.agent_id == Agent.id)
        .where(Agent.owner_id == user_id, Agent.deleted_at.is_(None), Agent.archived_at.is_(None))
        .order_by(Agent.created_at.desc(), Agent.id)
        .limit(HOME_AGENTS)
    )
    return [
        console_schemas.HomeAgent(
            id=a.id,
            name=a.name,
            handle=a.handle,
            status=a.status,
            claim_status=a.claim_status,
            worker_enabled=a.worker_enabled,
            requester_enabled=a.requester_enabled,
            presence=PRESENCE.get(a.presence_rank, "OFFLINE"),
            presence_seen_at=a.presence_seen_at,
            active_key_count=int(n),
        )
        for a, n in rows.all()
    ]


async def _jobs_needing_action(session: AsyncSession, user_id: str) -> list[console_schemas.JobNeedingAction]:
    """In review (the owner's agents must decide), waiting for a payment action, or disputed."""
    waiting = select(JobPayment.job_id).where(
        JobPayment.user_id == user_id, JobPayment.status == PaymentStatus.REQUIRES_ACTION
    )
    rows = await session.scalars(
        select(Job)
        .where(
            Job.owner_id == user_id,
            or_(Job.status == JobStatus.IN_REVIEW, Job.open_dispute_id.is_not(None), Job.id.in_(waiting)),
        )
        .order_by(Job.updated_at.desc(), Job.id)
        .limit(HOME_JOBS)
    )
    found = []
    for job in rows:
        if job.open_dispute_id:
            why, deadline = "DISPUTED", None
        elif job.status == JobStatus.IN_REVIEW:
            why, deadline = "TO_REVIEW", job.review_deadline_at
        else:
            why, deadline = "PAYMENT_ACTION_REQUIRED", job.admission_closes_at
        found.append(
            console_schemas.JobNeedingAction(
                id=job.id,
                title=job.title,
                status=job.status,
                why=why,
                reward_amount_cents=job.reward_amount_cents,
                deadline_at=deadline,
            )
        )
    return found


async def home(session: AsyncSession, actor: Actor) -> console_schemas.OwnerHome:
    user_id = actor.require_user()
    user = await session.get(User, user_id)
    assert user is not None
    agents = await _agents(session, user_id)
    balance = await billing.balance(session, actor)
    steps = [
        console_schemas.FirstStep(key="ADD_AGENT", title="Create or claim an agent", done=bool(agents)),
        console_schemas.FirstStep(
            key="CONNECT_RUNTIME",
            title="Connect an agent to its runtime (MCP or HTTP)",
            done=any(a.presence_seen_at for a in agents),
        ),
        console_schemas.FirstStep(key="ADD_CARD", title="Add a card", done=bool(balance.payment_methods)),
        console_schemas.FirstStep(
            key="FUND_BALANCE", title="Add funds for paid jobs", done=balance.balance_cents > 0
        ),
    ]
    return console_schemas.OwnerHome(
        name=user.name,
        email=user.email,
        agents=agents,
        balance=balance,
        jobs_needing_action=await _jobs_needing_action(session, user_id),
        unread_notifications=await owner_notifications.unread_count(session, user_id),
        first_steps=steps,
    )
