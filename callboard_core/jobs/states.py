"""The state machines of the job lifecycle: one table each, in one place.

A transition not in its table is refused (409 `invalid_state` with the current state) before any row is
touched; the row itself then moves by compare-and-set (`UPDATE ... WHERE status = <from>`), so two racing
requests cannot both move it. docs/decisions.md explains each state.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase

from callboard_core.errors import Conflict


class JobStatus(StrEnum):
    DRAFT = "DRAFT"
    PENDING_ACCEPTANCE = "PENDING_ACCEPTANCE"  # a Direct Hire waiting for its worker
    ADMISSION_OPEN = "ADMISSION_OPEN"
    IN_PROGRESS = "IN_PROGRESS"
    IN_REVIEW = "IN_REVIEW"
    AWARDED = "AWARDED"
    NO_AWARD = "NO_AWARD"
    CANCELLED = "CANCELLED"


class ApplicationStatus(StrEnum):
    PENDING = "PENDING"
    ADMITTED = "ADMITTED"
    WAITLISTED = "WAITLISTED"  # not admitted yet; offered a slot that frees up while the window allows
    NOT_ADMITTED = "NOT_ADMITTED"
    WITHDRAWN = "WITHDRAWN"


class SlotStatus(StrEnum):
    GRANTED = "GRANTED"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    SUBMITTED = "SUBMITTED"
    EXPIRED = "EXPIRED"
    WITHDRAWN = "WITHDRAWN"


class SubmissionStatus(StrEnum):
    SUBMITTED = "SUBMITTED"
    AWARDED = "AWARDED"
    NOT_AWARDED = "NOT_AWARDED"


class InvitationStatus(StrEnum):
    PENDING = "PENDING"
    ACCEPTED = "ACCEPTED"
    DECLINED = "DECLINED"
    WITHDRAWN = "WITHDRAWN"
    EXPIRED = "EXPIRED"


JOB_MOVES: dict[str, dict[JobStatus, frozenset[JobStatus]]] = {
    "publish": {JobStatus.ADMISSION_OPEN: frozenset({JobStatus.DRAFT})},
    "publish_direct_hire": {JobStatus.PENDING_ACCEPTANCE: frozenset({JobStatus.DRAFT})},
    "close_admission": {
        JobStatus.IN_PROGRESS: frozenset({JobStatus.ADMISSION_OPEN}),
        JobStatus.NO_AWARD: frozenset({JobStatus.ADMISSION_OPEN}),
    },
    "direct_hire_accepted": {JobStatus.IN_PROGRESS: frozenset({JobStatus.PENDING_ACCEPTANCE})},
    "cancel_direct_hire": {JobStatus.CANCELLED: frozenset({JobStatus.PENDING_ACCEPTANCE})},
    "start_review": {JobStatus.IN_REVIEW: frozenset({JobStatus.IN_PROGRESS})},
    "nothing_submitted": {JobStatus.NO_AWARD: frozenset({JobStatus.IN_PROGRESS})},
    "award": {JobStatus.AWARDED: frozenset({JobStatus.IN_REVIEW})},
    "no_award": {
        JobStatus.NO_AWARD: frozenset({JobStatus.IN_REVIEW, JobStatus.IN_PROGRESS, JobStatus.ADMISSION_OPEN})
    },
}

APPLICATION_MOVES: dict[ApplicationStatus, frozenset[ApplicationStatus]] = {
    ApplicationStatus.ADMITTED: frozenset({ApplicationStatus.PENDING, ApplicationStatus.WAITLISTED}),
    ApplicationStatus.WAITLISTED: frozenset({ApplicationStatus.PENDING}),
    ApplicationStatus.NOT_ADMITTED: frozenset({ApplicationStatus.PENDING, ApplicationStatus.WAITLISTED}),
    ApplicationStatus.WITHDRAWN: frozenset(
        {ApplicationStatus.PENDING, ApplicationStatus.WAITLISTED, ApplicationStatus.ADMITTED}
    ),
}

SLOT_MOVES: dict[SlotStatus, frozenset[SlotStatus]] = {
    SlotStatus.ACKNOWLEDGED: frozenset({SlotStatus.GRANTED}),
    SlotStatus.SUBMITTED: frozenset({SlotStatus.ACKNOWLEDGED}),
    SlotStatus.EXPIRED: frozenset({SlotStatus.GRANTED, SlotStatus.ACKNOWLEDGED}),
    SlotStatus.WITHDRAWN: frozenset({SlotStatus.GRANTED, SlotStatus.ACKNOWLEDGED}),
}

SUBMISSION_MOVES: dict[SubmissionStatus, frozenset[SubmissionStatus]] = {
    SubmissionStatus.AWARDED: frozenset({SubmissionStatus.SUBMITTED}),
    SubmissionStatus.NOT_AWARDED: frozenset({SubmissionStatus.SUBMITTED}),
}

INVITATION_MOVES: dict[InvitationStatus, frozenset[InvitationStatus]] = {
    InvitationStatus.ACCEPTED: frozenset({InvitationStatus.PENDING}),
    InvitationStatus.DECLINED: frozenset({InvitationStatus.PENDING}),
    InvitationStatus.WITHDRAWN: frozenset({InvitationStatus.PENDING}),
    InvitationStatus.EXPIRED: frozenset({InvitationStatus.PENDING}),
}

# Slots still holding a participant place; jobs whose work is not over.
LIVE_SLOTS = frozenset({SlotStatus.GRANTED, SlotStatus.ACKNOWLEDGED})
ENDED_SLOTS = frozenset({SlotStatus.EXPIRED, SlotStatus.WITHDRAWN})  # ended without a submission
OPEN_APPLICATIONS = frozenset({ApplicationStatus.PENDING, ApplicationStatus.WAITLISTED})
ACTIVE_JOBS = frozenset(
    {JobStatus.PENDING_ACCEPTANCE, JobStatus.ADMISSION_OPEN, JobStatus.IN_PROGRESS, JobStatus.IN_REVIEW}
)


def check(
    table: Mapping[Any, frozenset[Any]], current: str, target: str, *, what: str, **details: object
) -> None:
    """Refuse a move the table does not allow, naming the current state."""
    if current not in table.get(target, frozenset()):
        raise Conflict(
            f"This {what} is {current}; it cannot become {target}.",
            code="invalid_state",
            current_state=current,
            target_state=target,
            **details,
        )


def check_job(move_name: str, current: str, target: JobStatus, **details: object) -> None:
    check(JOB_MOVES[move_name], current, target, what="job", **details)


# --- the moves -----------------------------------------------------------------------------------
# One compare-and-set for every machine. A row is any mapped class with `id` and `status` columns; the
# table is that machine's `{target: allowed sources}` (for jobs, `JOB_MOVES[<move name>]`).

RowT = TypeVar("RowT", bound=DeclarativeBase)


def _sources(table: Mapping[Any, frozenset[Any]], target: str) -> list[str]:
    return [str(state) for state in table.get(target, frozenset())]


async def try_move(
    session: AsyncSession,
    model: type[RowT],
    table: Mapping[Any, frozenset[Any]],
    row_id: str,
    target: StrEnum,
    *guards: ColumnElement[bool],
    **values: Any,
) -> RowT | None:
    """`UPDATE model SET status = target, **values WHERE id = row_id AND status IN <table's sources>
    AND guards RETURNING *`: the moved row (the session's copy refreshed), or None when the table, a guard
    or a racing request said no. For callers with their own answer to a refusal (deadlines, retries)."""
    ident, status = getattr(model, "id"), getattr(model, "status")  # noqa: B009 - columns of any row class
    return (
        await session.scalars(
            update(model)
            .where(ident == row_id, status.in_(_sources(table, target)), *guards)
            .values(status=target, **values)
            .returning(model)
            .execution_options(synchronize_session=False, populate_existing=True)
        )
    ).one_or_none()


async def move(
    session: AsyncSession,
    model: type[RowT],
    table: Mapping[Any, frozenset[Any]],
    row_id: str,
    target: StrEnum,
    *guards: ColumnElement[bool],
    what: str,
    current: str | None = None,
    details: Mapping[str, object] | None = None,
    **values: Any,
) -> RowT:
    """`try_move`, or 409 `invalid_state` with `current_state`. Given `current` (the state the caller read),
    a move the table does not allow is refused before any row is touched."""
    details = details or {}
    if current is not None:
        check(table, current, target, what=what, **details)
    moved = await try_move(session, model, table, row_id, target, *guards, **values)
    if moved is not None:
        return moved
    row = await session.get(model, row_id, populate_existing=True)
    now_state = getattr(row, "status", None)
    check(table, now_state or "", target, what=what, **details)
    raise Conflict(
        f"The {what} changed while this request ran; try again.",
        code="invalid_state",
        current_state=now_state,
    )


async def move_all(
    session: AsyncSession,
    model: type[RowT],
    table: Mapping[Any, frozenset[Any]],
    target: StrEnum,
    *where: ColumnElement[bool],
    **values: Any,
) -> list[str]:
    """The set-based move: every row matching `where` whose state the table lets become `target` (the rows
    a job closing or admitting decides at once). Returns the moved ids; the session's copies are not
    refreshed."""
    ident, status = getattr(model, "id"), getattr(model, "status")  # noqa: B009
    return list(
        (
            await session.scalars(
                update(model)
                .where(*where, status.in_(_sources(table, target)))
                .values(status=target, **values)
                .returning(ident)
                .execution_options(synchronize_session=False)
            )
        ).all()
    )
