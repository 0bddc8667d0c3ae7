"""The console's marketplace figures: the first cycle of accounts, liquidity (organic apart from house and
starter activity), and the jobs staff should look at (the job moderation queue)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents.models import Agent, ClaimStatus
from callboard_core.jobs.models import Award, Job, JobApplication
from callboard_core.jobs.states import JobStatus
from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff.reports import count_of
from callboard_core.users.models import User

MODERATION_WINDOW = timedelta(days=7)
MODERATION_LIMIT = 200
DECIDED = (JobStatus.AWARDED, JobStatus.NO_AWARD)


async def first_cycle(session: AsyncSession) -> staff_schemas.FirstCycle:
    claimed = (
        select(Agent.owner_id)
        .where(Agent.owner_id.is_not(None), Agent.claim_status != ClaimStatus.PROVISIONAL)
        .distinct()
    )
    published = select(func.count(distinct(Job.owner_id))).where(
        Job.published_at.is_not(None), Job.is_starter.is_(False), Job.owner_id.is_not(None)
    )
    gave = (
        select(func.count(distinct(Job.owner_id)))
        .join(Award, Award.job_id == Job.id)
        .where(Job.is_starter.is_(False), Job.owner_id.is_not(None))
    )
    won = (
        select(func.count(distinct(Agent.owner_id)))
        .join(Award, Award.worker_agent_id == Agent.id)
        .join(Job, Job.id == Award.job_id)
        .where(Job.is_starter.is_(False), Agent.owner_id.is_not(None))
    )
    return staff_schemas.FirstCycle(
        signed_up=await count_of(session, select(func.count()).select_from(User)),
        with_agent=await count_of(session, select(func.count()).select_from(claimed.subquery())),
        published_first_job=await count_of(session, published),
        gave_first_award=await count_of(session, gave),
        won_first_award=await count_of(session, won),
    )


async def _figures(session: AsyncSession, *scope: Any) -> staff_schemas.LiquidityFigures:
    jobs = (
        select(Job.id)
        .join(Agent, Agent.id == Job.requester_agent_id)
        .where(Job.is_starter.is_(False), *scope)
    )
    published = jobs.where(Job.published_at.is_not(None))
    n_published = await count_of(session, select(func.count()).select_from(published.subquery()))
    applications = await count_of(
        session, select(func.count()).select_from(JobApplication).where(JobApplication.job_id.in_(published))
    )
    with_applications = await count_of(
        session,
        select(func.count(distinct(JobApplication.job_id))).where(JobApplication.job_id.in_(published)),
    )
    decided = await count_of(
        session,
        select(func.count()).select_from(
            published.where(Job.status.in_([str(s) for s in DECIDED])).subquery()
        ),
    )
    awarded = await count_of(
        session, select(func.count()).select_from(published.where(Job.status == JobStatus.AWARDED).subquery())
    )
    return staff_schemas.LiquidityFigures(
        open_jobs=await count_of(
            session,
            select(func.count()).select_from(jobs.where(Job.status == JobStatus.ADMISSION_OPEN).subquery()),
        ),
        jobs_published=n_published,
        with_applications=with_applications,
        applications_per_job=round(applications / n_published, 3) if n_published else 0.0,
        awarded=awarded,
        award_rate=round(awarded / decided, 3) if decided else 0.0,
    )


async def liquidity(session: AsyncSession) -> staff_schemas.Liquidity:
    starters = select(Job.id).where(Job.is_starter.is_(True), Job.published_at.is_not(None))
    return staff_schemas.Liquidity(
        organic=await _figures(session, Agent.is_house.is_(False)),
        house=await _figures(session, Agent.is_house.is_(True)),
        starter_jobs=await count_of(session, select(func.count()).select_from(starters.subquery())),
        starter_jobs_completed=await count_of(
            session,
            select(func.count()).select_from(starters.where(Job.status == JobStatus.AWARDED).subquery()),
        ),
    )


async def job_moderation_queue(session: AsyncSession) -> staff_schemas.JobModerationQueue:
    """Open jobs published in the last seven days by a requester staff have no track record for: an agent
    whose owner has not verified the claim, or whose owner never had a job decided before."""
    since = clock.now() - MODERATION_WINDOW
    decided_before = (
        select(Job.owner_id)
        .where(Job.status.in_([str(s) for s in DECIDED]), Job.is_starter.is_(False))
        .distinct()
    )
    rows = await session.execute(
        select(Job, Agent)
        .join(Agent, Agent.id == Job.requester_agent_id)
        .where(
            Job.status == JobStatus.ADMISSION_OPEN,
            Job.is_starter.is_(False),
            Job.published_at >= since,
        )
        .order_by(Job.published_at.desc(), Job.id.desc())
        .limit(MODERATION_LIMIT)
    )
    veterans = set((await session.scalars(decided_before)).all())
    queue = []
    for job, agent in rows.all():
        why = []
        if agent.claim_status != ClaimStatus.VERIFIED:
            why.append("REQUESTER_UNVERIFIED")
        if job.owner_id not in veterans:
            why.append("FIRST_JOBS_OF_OWNER")
        if why:
            queue.append(
                staff_schemas.ModeratedJob(
                    id=job.id,
                    title=job.title,
                    status=job.status,
                    requester_agent_id=agent.id,
                    requester_handle=agent.handle,
                    owner_id=job.owner_id,
                    reward_amount_cents=job.reward_amount_cents,
                    published_at=job.published_at,
                    why=why,
                )
            )
    return staff_schemas.JobModerationQueue(jobs=queue)
