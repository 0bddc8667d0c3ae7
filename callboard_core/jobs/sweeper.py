"""The deadline sweeper: moves every job, slot and invitation whose deadline has passed. It runs inside
`callboard serve` and as `callboard worker`; several at once are safe because every move is a
compare-and-set guarded by its deadline (a request racing the deadline and the sweeper: one wins).

Each item moves in its own unit of work, so one failure never holds back the rest."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.db.uow import UnitsOfWork
from callboard_core.jobs import admission, events, invitations
from callboard_core.jobs import service as jobs
from callboard_core.jobs.models import Job, JobInvitation, ParticipationSlot
from callboard_core.jobs.states import SLOT_MOVES, InvitationStatus, JobStatus, SlotStatus
from callboard_core.principals import SYSTEM

log = logging.getLogger("callboard.sweeper")
BATCH = 200


async def _each(core: UnitsOfWork, ids: list[str], step: Callable[..., Awaitable[bool]]) -> int:
    moved = 0
    for ident in ids:
        try:
            async with core.uow() as uow:
                moved += int(await step(uow.session, ident))
        except Exception:  # one bad item must not stop the sweep; it is retried next pass
            log.exception("sweeper step %s failed for %s", step.__name__, ident)
    return moved


async def _close_admission(session: AsyncSession, job_id: str) -> bool:
    job = await jobs.lock(session, job_id)
    if job.status != JobStatus.ADMISSION_OPEN or job.admission_closes_at > clock.now():
        return False
    await admission.close_admission(session, job)
    return True


async def _expire_ack(session: AsyncSession, slot_id: str) -> bool:
    slot = await session.get(ParticipationSlot, slot_id)
    return (
        slot is not None
        and slot.status in SLOT_MOVES[SlotStatus.ACKNOWLEDGED]  # could still acknowledge, but too late
        and await admission.end_slot(
            session, slot, SlotStatus.EXPIRED, "acknowledgement_missed", deadline_column="acknowledge_by"
        )
    )


async def _expire_work(session: AsyncSession, slot_id: str) -> bool:
    slot = await session.get(ParticipationSlot, slot_id)
    return (
        slot is not None
        and slot.status in SLOT_MOVES[SlotStatus.SUBMITTED]  # could still submit, but too late
        and await admission.end_slot(
            session, slot, SlotStatus.EXPIRED, "work_deadline_missed", deadline_column="work_deadline_at"
        )
    )


async def _submission_deadline(session: AsyncSession, job_id: str) -> bool:
    job = await jobs.lock(session, job_id)
    if job.status != JobStatus.IN_PROGRESS or job.latest_submission_deadline_at > clock.now():
        return False
    await admission.settle(session, job, deadline_passed=True)
    return True


async def _review_overdue(session: AsyncSession, job_id: str) -> bool:
    job = await session.get(Job, job_id)
    if job is None or job.status != JobStatus.IN_REVIEW or job.review_overdue_at is not None:
        return False
    job.review_overdue_at = clock.now()
    await events.record(
        session,
        job.id,
        "review_overdue",
        SYSTEM,
        {},
        notify=[job.requester_agent_id],
        title=f"Review overdue: {job.title}",
        body="Award or declare no award now; staff may step in.",
    )
    return True


class Due(NamedTuple):
    id: Any  # the column naming the row a step moves
    deadline: Any  # the column whose time has come
    where: tuple[Any, ...]  # the conditions of the rows due now
    step: Callable[..., Awaitable[bool]]  # moves one row (its own unit of work)


def _undisputed(job_id: Any) -> Any:
    """The job of `job_id` has no open dispute: a disputed job's deadlines wait for staff (its money is
    frozen; moving it could release or capture it)."""
    return ~exists().where(Job.id == job_id, Job.open_dispute_id.is_not(None))


def _due(now: datetime) -> dict[str, Due]:
    """The sweeper's one table: what is due at `now`, per kind. The sweep walks it; `oldest_due` reads its
    deadlines."""
    return {
        "invitations": Due(
            JobInvitation.id,
            JobInvitation.expires_at,
            (JobInvitation.status == InvitationStatus.PENDING, JobInvitation.expires_at <= now),
            invitations.expire,
        ),
        "admission": Due(
            Job.id,
            Job.admission_closes_at,
            (
                Job.status == JobStatus.ADMISSION_OPEN,
                Job.admission_closes_at <= now,
                Job.open_dispute_id.is_(None),
            ),
            _close_admission,
        ),
        "acknowledgement": Due(
            ParticipationSlot.id,
            ParticipationSlot.acknowledge_by,
            (
                ParticipationSlot.status == SlotStatus.GRANTED,
                ParticipationSlot.acknowledge_by < now,
                _undisputed(ParticipationSlot.job_id),
            ),
            _expire_ack,
        ),
        "work": Due(
            ParticipationSlot.id,
            ParticipationSlot.work_deadline_at,
            (
                ParticipationSlot.status == SlotStatus.ACKNOWLEDGED,
                ParticipationSlot.work_deadline_at < now,
                _undisputed(ParticipationSlot.job_id),
            ),
            _expire_work,
        ),
        "submission_deadline": Due(
            Job.id,
            Job.latest_submission_deadline_at,
            (
                Job.status == JobStatus.IN_PROGRESS,
                Job.latest_submission_deadline_at <= now,
                Job.open_dispute_id.is_(None),
            ),
            _submission_deadline,
        ),
        "review_overdue": Due(
            Job.id,
            Job.review_deadline_at,
            (
                Job.status == JobStatus.IN_REVIEW,
                Job.review_deadline_at <= now,
                Job.review_overdue_at.is_(None),
            ),
            _review_overdue,
        ),
    }


async def sweep(core: UnitsOfWork) -> dict[str, int]:
    """One pass over everything due now. Returns the number of moves per kind."""
    due = _due(clock.now())
    async with core.uow(write=False) as uow:
        ids = {
            kind: list((await uow.session.scalars(select(d.id).where(*d.where).limit(BATCH))).all())
            for kind, d in due.items()
        }
    return {kind: await _each(core, ids[kind], d.step) for kind, d in due.items()}


async def oldest_due(session: AsyncSession) -> datetime | None:
    """The earliest deadline still waiting for the sweeper (None: nothing is due): the sweeper's lag."""
    found: list[datetime] = []
    for d in _due(clock.now()).values():
        at = clock.as_utc(await session.scalar(select(func.min(d.deadline)).where(*d.where)))
        if at is not None:
            found.append(at)
    return min(found, default=None)
