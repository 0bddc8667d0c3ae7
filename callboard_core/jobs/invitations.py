"""Invitations: a requester invites a named worker to a job in ADMISSION_OPEN (holding one participant place
while pending); a Direct Hire is a job published with exactly one such invitation."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.agents import reputation
from callboard_core.agents.models import Agent
from callboard_core.db.lookup import reread
from callboard_core.db.uow import add_or_conflict
from callboard_core.errors import Conflict, NotFound, ValidationFailed
from callboard_core.ids import new_id
from callboard_core.jobs import admission, events
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.access import acting_agent, require_can_work, worker_row
from callboard_core.jobs.models import Job, JobApplication, JobInvitation, ParticipationSlot
from callboard_core.jobs.participation import release_application_place
from callboard_core.jobs.service import lock, move, preview, requester_job, view
from callboard_core.jobs.states import (
    APPLICATION_MOVES,
    INVITATION_MOVES,
    ApplicationStatus,
    InvitationStatus,
    JobStatus,
)
from callboard_core.principals import SYSTEM, Actor


def invitation_view(
    inv: JobInvitation,
    job: Job | None = None,
    *,
    application_id: str | None = None,
    slot_id: str | None = None,
) -> job_schemas.InvitationView:
    return job_schemas.InvitationView(
        id=inv.id,
        job_id=inv.job_id,
        worker_agent_id=inv.worker_agent_id,
        status=inv.status,
        message=inv.message,
        decline_reason_code=inv.decline_reason_code,
        decline_reason_text=inv.decline_reason_text,
        expires_at=inv.expires_at,
        responded_at=inv.responded_at,
        job=preview(job) if job else None,
        application_id=application_id,
        slot_id=slot_id,
        created_at=inv.created_at,
    )


async def invite(
    session: AsyncSession, actor: Actor, job_id: str, body: job_schemas.InvitationCreate
) -> job_schemas.InvitationView:
    job = await requester_job(session, actor, job_id, for_update=True)
    if job.status != JobStatus.ADMISSION_OPEN or job.direct_hire_worker_agent_id:
        raise Conflict(
            "Workers can be invited to a job whose admission is open.",
            code="invalid_state",
            current_state=job.status,
        )
    worker = await session.get(Agent, body.worker_agent_id)
    if worker is None or worker.deleted_at is not None:
        raise ValidationFailed(
            "No such worker agent.",
            errors=[
                {"field": "workerAgentId", "in": "body", "code": "unknown_agent", "message": "no such agent"}
            ],
        )
    if worker.owner_id is not None and worker.owner_id == job.owner_id:
        raise ValidationFailed(
            "An agent of the job's own owner cannot be invited.",
            errors=[
                {
                    "field": "workerAgentId",
                    "in": "body",
                    "code": "same_owner",
                    "message": "same owner as the requester",
                }
            ],
        )
    require_can_work(worker, role="worker")
    if not await admission.hold_places(session, job.id, status=JobStatus.ADMISSION_OPEN):
        raise Conflict(
            "Every participant place of this job is taken or reserved.",
            code="participant_cap_reached",
            participant_cap=job.participant_cap,
        )
    invitation = JobInvitation(
        job_id=job.id, worker_agent_id=worker.id, message=body.message, expires_at=job.admission_closes_at
    )
    await add_or_conflict(
        session,
        invitation,
        Conflict("This worker has already been invited to this job.", code="already_invited"),
    )
    await events.record(
        session,
        job.id,
        "invitation_sent",
        actor,
        {"invitationId": invitation.id, "workerAgentId": worker.id},
        notify=[worker.id],
        title=f"Invitation: {job.title}",
        body=f"Accept or decline invitation {invitation.id}: home lists it with the call to make.",
    )
    return invitation_view(invitation)


async def list_for_job(session: AsyncSession, actor: Actor, job_id: str) -> job_schemas.InvitationList:
    job = await requester_job(session, actor, job_id)
    rows = (
        await session.scalars(
            select(JobInvitation)
            .where(JobInvitation.job_id == job.id)
            .order_by(JobInvitation.created_at, JobInvitation.id)
        )
    ).all()
    return job_schemas.InvitationList(invitations=[invitation_view(i) for i in rows])


async def mine(
    session: AsyncSession, actor: Actor, agent_id: str | None = None, *, pending_only: bool = True
) -> job_schemas.InvitationList:
    worker = await acting_agent(session, actor, agent_id)
    stmt = (
        select(JobInvitation, Job)
        .join(Job, Job.id == JobInvitation.job_id)
        .where(JobInvitation.worker_agent_id == worker.id)
    )
    if pending_only:
        stmt = stmt.where(
            JobInvitation.status == InvitationStatus.PENDING, JobInvitation.expires_at > clock.now()
        )
    rows = (await session.execute(stmt.order_by(JobInvitation.created_at.desc()).limit(200))).all()
    return job_schemas.InvitationList(invitations=[invitation_view(i, j) for i, j in rows])


async def _settle_invitation(
    session: AsyncSession, inv: JobInvitation, target: InvitationStatus, **values: Any
) -> None:
    now = clock.now()
    await states.move(
        session,
        JobInvitation,
        inv.id,
        INVITATION_MOVES,
        target,
        what="invitation",
        details={"target_state": target},
        responded_at=now,
        updated_at=now,
        **values,
    )


async def respond(
    session: AsyncSession, actor: Actor, invitation_id: str, body: job_schemas.InvitationRespond
) -> job_schemas.InvitationView:
    """Accept: an ADMITTED application and a GRANTED slot (a Direct Hire's job starts). Decline: terminal,
    with a structured reason; the held place is released (a declined Direct Hire is cancelled)."""
    inv, worker = await worker_row(
        session, actor, JobInvitation, invitation_id, what="invitation", code="invitation_not_found"
    )
    job = await lock(session, inv.job_id)
    await reread(session, inv)
    now = clock.now()
    if inv.status == InvitationStatus.PENDING and inv.expires_at <= now:
        raise Conflict("This invitation has expired.", code="invitation_expired", current_state=inv.status)
    if body.decision == "DECLINE":
        if body.reason_code is None:
            raise ValidationFailed(
                "Say why you decline.",
                errors=[
                    {
                        "field": "reasonCode",
                        "in": "body",
                        "code": "missing",
                        "message": "one of NOT_AVAILABLE, OUT_OF_SCOPE, DEADLINE_TOO_SHORT, REWARD_TOO_LOW, OTHER",
                    }
                ],
            )
        await _settle_invitation(
            session,
            inv,
            InvitationStatus.DECLINED,
            decline_reason_code=body.reason_code,
            decline_reason_text=body.reason_text,
        )
        await admission.release_places(session, job.id)
        await events.record(
            session,
            job.id,
            "invitation_declined",
            actor,
            {"invitationId": inv.id, "reasonCode": body.reason_code},
            notify=[job.requester_agent_id],
            title=f"Invitation declined: {job.title}",
        )
        if job.status == JobStatus.PENDING_ACCEPTANCE:
            job = await move(session, job, "cancel_direct_hire", JobStatus.CANCELLED, closed_at=now)
            await events.record(session, job.id, "cancelled", SYSTEM, {"reason": "direct_hire_declined"})
        return invitation_view(inv)

    require_can_work(worker, role="worker")
    if job.status not in (JobStatus.ADMISSION_OPEN, JobStatus.PENDING_ACCEPTANCE):
        raise Conflict(
            "This job no longer takes participants.", code="invalid_state", current_state=job.status
        )
    await _settle_invitation(session, inv, InvitationStatus.ACCEPTED)
    application = (
        await session.scalars(
            select(JobApplication).where(
                JobApplication.job_id == job.id, JobApplication.worker_agent_id == worker.id
            )
        )
    ).one_or_none()
    if application is not None and application.status == ApplicationStatus.PENDING:
        await release_application_place(session, application)
    if application is None:
        standing = await reputation.capability_standing(session, worker.id, job.capability_tag_id)
        application = JobApplication(
            id=new_id("app"),
            job_id=job.id,
            worker_agent_id=worker.id,
            status=ApplicationStatus.ADMITTED,
            rookie=standing.rookie,
            new_worker=reputation.is_new_worker(worker),
            capability_reputation=standing.reputation,
            via_invitation_id=inv.id,
            decided_at=now,
        )
        session.add(application)
        await session.flush()
    elif application.status not in APPLICATION_MOVES[ApplicationStatus.ADMITTED]:
        raise Conflict(
            f"This agent's application is {application.status}.",
            code="invalid_state",
            current_state=application.status,
        )
    else:
        application = await states.move(
            session,
            JobApplication,
            application.id,
            APPLICATION_MOVES,
            ApplicationStatus.ADMITTED,
            what="application",
            details={"target_state": ApplicationStatus.ADMITTED},
            via_invitation_id=inv.id,
            decided_at=now,
        )
    # The invitation's held place becomes the slot's.
    slot = ParticipationSlot(**admission.new_slot_row(job, application.id, worker.id, now))
    session.add(slot)
    await session.flush()
    if job.status == JobStatus.PENDING_ACCEPTANCE:
        job = await move(session, job, "direct_hire_accepted", JobStatus.IN_PROGRESS, admission_closed_at=now)
    await events.record(
        session,
        job.id,
        "invitation_accepted",
        actor,
        {"invitationId": inv.id, "slotId": slot.id, "workerAgentId": worker.id},
        notify=[job.requester_agent_id],
        title=f"Invitation accepted: {job.title}",
    )
    return invitation_view(inv, application_id=application.id, slot_id=slot.id)


async def withdraw(session: AsyncSession, actor: Actor, invitation_id: str) -> job_schemas.InvitationView:
    inv = await session.get(JobInvitation, invitation_id)
    if inv is None:
        raise NotFound("No such invitation.", code="invitation_not_found")
    try:
        job = await requester_job(session, actor, inv.job_id, for_update=True)
    except NotFound:
        raise NotFound("No such invitation.", code="invitation_not_found") from None
    if job.status == JobStatus.PENDING_ACCEPTANCE:
        raise Conflict(
            "A Direct Hire's offer is withdrawn by cancelling the job (cancel-direct-hire).",
            code="use_cancel_direct_hire",
            current_state=job.status,
        )
    await _settle_invitation(session, inv, InvitationStatus.WITHDRAWN)
    await admission.release_places(session, job.id)
    await events.record(
        session,
        job.id,
        "invitation_withdrawn",
        actor,
        {"invitationId": inv.id},
        notify=[inv.worker_agent_id],
        title=f"Invitation withdrawn: {job.title}",
    )
    return invitation_view(inv)


async def cancel_direct_hire(session: AsyncSession, actor: Actor, job_id: str) -> job_schemas.JobView:
    job = await requester_job(session, actor, job_id, for_update=True)
    now = clock.now()
    job = await move(session, job, "cancel_direct_hire", JobStatus.CANCELLED, closed_at=now)
    pending = (
        await session.scalars(
            select(JobInvitation).where(
                JobInvitation.job_id == job.id, JobInvitation.status == InvitationStatus.PENDING
            )
        )
    ).all()
    for inv in pending:
        await _settle_invitation(session, inv, InvitationStatus.WITHDRAWN)
    await session.execute(
        update(Job)
        .where(Job.id == job.id)
        .values(reserved_participants=0)
        .execution_options(synchronize_session=False)
    )
    await reread(session, job)
    await events.record(
        session,
        job.id,
        "cancelled",
        actor,
        {"reason": "direct_hire_cancelled"},
        notify=[i.worker_agent_id for i in pending],
        title=f"Offer withdrawn: {job.title}",
    )
    return view(job)


async def expire(session: AsyncSession, invitation_id: str) -> bool:
    """A pending invitation past its expiry lapses (the sweeper, one invitation per unit of work); a Direct
    Hire whose offer lapsed is cancelled. False when it had already moved or is not due."""
    inv = await session.get(JobInvitation, invitation_id)
    if inv is None:
        return False
    job = await lock(session, inv.job_id)
    await reread(session, inv)
    if inv.status != InvitationStatus.PENDING or inv.expires_at > clock.now():
        return False
    await _settle_invitation(session, inv, InvitationStatus.EXPIRED)
    await admission.release_places(session, job.id)
    await reread(session, job)
    await events.record(
        session,
        job.id,
        "invitation_expired",
        SYSTEM,
        {"invitationId": inv.id},
        notify=[inv.worker_agent_id],
        title=f"Invitation expired: {job.title}",
    )
    if job.status == JobStatus.PENDING_ACCEPTANCE:
        await move(session, job, "cancel_direct_hire", JobStatus.CANCELLED, closed_at=clock.now())
        await events.record(
            session,
            job.id,
            "cancelled",
            SYSTEM,
            {"reason": "direct_hire_expired"},
            notify=[job.requester_agent_id],
            title=f"Direct Hire expired: {job.title}",
        )
    return True
