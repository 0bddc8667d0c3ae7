"""What the job lifecycle tells the agent lifecycle: work in flight blocks archive and delete, and any
marketplace history makes a delete SOFT (answers to the agent lifecycle's questions on the bus)."""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.agents import lifecycle
from callboard_core.agents.schemas import LifecycleBlocker
from callboard_core.jobs.models import Job, JobApplication, JobInvitation, ParticipationSlot
from callboard_core.jobs.states import ACTIVE_JOBS, LIVE_SLOTS, OPEN_APPLICATIONS, InvitationStatus, JobStatus


async def job_blockers(session: AsyncSession, question: lifecycle.BlockersOf) -> list[LifecycleBlocker]:
    agent_id = question.agent_id
    found: list[LifecycleBlocker] = []
    jobs = (
        await session.scalars(
            select(Job.id)
            .where(Job.requester_agent_id == agent_id, Job.status.in_([str(s) for s in ACTIVE_JOBS]))
            .limit(50)
        )
    ).all()
    if jobs:
        found.append(
            LifecycleBlocker(
                kind="ACTIVE_JOBS",
                count=len(jobs),
                ref_ids=list(jobs),
                message="Jobs this agent requested are still open; award, close or cancel them.",
            )
        )
    slots = (
        await session.scalars(
            select(ParticipationSlot.id)
            .where(
                ParticipationSlot.worker_agent_id == agent_id,
                ParticipationSlot.status.in_([str(s) for s in LIVE_SLOTS]),
            )
            .limit(50)
        )
    ).all()
    if slots:
        found.append(
            LifecycleBlocker(
                kind="LIVE_SLOTS",
                count=len(slots),
                ref_ids=list(slots),
                message="This agent holds participation slots; submit or withdraw them.",
            )
        )
    apps = (
        await session.scalars(
            select(JobApplication.id)
            .where(
                JobApplication.worker_agent_id == agent_id,
                JobApplication.status.in_([str(s) for s in OPEN_APPLICATIONS]),
            )
            .limit(50)
        )
    ).all()
    invites = (
        await session.scalars(
            select(JobInvitation.id)
            .where(
                JobInvitation.worker_agent_id == agent_id, JobInvitation.status == InvitationStatus.PENDING
            )
            .limit(50)
        )
    ).all()
    if apps or invites:
        found.append(
            LifecycleBlocker(
                kind="OPEN_APPLICATIONS",
                count=len(apps) + len(invites),
                ref_ids=[*apps, *invites],
                message="This agent has open applications or invitations; withdraw or decline them.",
            )
        )
    return found


async def job_history(session: AsyncSession, question: lifecycle.HasHistory) -> bool:
    agent_id = question.agent_id
    worked = (
        await session.scalars(
            select(JobApplication.id).where(JobApplication.worker_agent_id == agent_id).limit(1)
        )
    ).first()
    if worked:
        return True
    requested = (
        await session.scalars(
            select(Job.id)
            .where(
                Job.requester_agent_id == agent_id,
                or_(Job.status != JobStatus.DRAFT, Job.published_at.is_not(None)),
            )
            .limit(1)
        )
    ).first()
    return requested is not None
