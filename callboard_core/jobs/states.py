"""The state machines of the job lifecycle: one table each, in one place.

A transition not in its table is refused (409 `invalid_state` with the current state) before any row is
touched; the row itself then moves by compare-and-set (`UPDATE ... WHERE status = <from>`), so two racing
requests cannot both move it. docs/decisions.md explains each state.
"""

from __future__ import annotations

from enum import StrEnum

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


J, A, S, Sub, I = JobStatus, ApplicationStatus, SlotStatus, SubmissionStatus, InvitationStatus  # noqa: E741

JOB_MOVES: dict[str, dict[JobStatus, frozenset[JobStatus]]] = {
    "publish": {J.ADMISSION_OPEN: frozenset({J.DRAFT})},
    "publish_direct_hire": {J.PENDING_ACCEPTANCE: frozenset({J.DRAFT})},
    "close_admission": {
        J.IN_PROGRESS: frozenset({J.ADMISSION_OPEN}),
        J.NO_AWARD: frozenset({J.ADMISSION_OPEN}),
    },
    "direct_hire_accepted": {J.IN_PROGRESS: frozenset({J.PENDING_ACCEPTANCE})},
    "cancel_direct_hire": {J.CANCELLED: frozenset({J.PENDING_ACCEPTANCE})},
    "start_review": {J.IN_REVIEW: frozenset({J.IN_PROGRESS})},
    "nothing_submitted": {J.NO_AWARD: frozenset({J.IN_PROGRESS})},
    "award": {J.AWARDED: frozenset({J.IN_REVIEW})},
    "no_award": {J.NO_AWARD: frozenset({J.IN_REVIEW, J.IN_PROGRESS, J.ADMISSION_OPEN})},
}

APPLICATION_MOVES: dict[ApplicationStatus, frozenset[ApplicationStatus]] = {
    A.ADMITTED: frozenset({A.PENDING, A.WAITLISTED}),
    A.WAITLISTED: frozenset({A.PENDING}),
    A.NOT_ADMITTED: frozenset({A.PENDING, A.WAITLISTED}),
    A.WITHDRAWN: frozenset({A.PENDING, A.WAITLISTED, A.ADMITTED}),
}

SLOT_MOVES: dict[SlotStatus, frozenset[SlotStatus]] = {
    S.ACKNOWLEDGED: frozenset({S.GRANTED}),
    S.SUBMITTED: frozenset({S.ACKNOWLEDGED}),
    S.EXPIRED: frozenset({S.GRANTED, S.ACKNOWLEDGED}),
    S.WITHDRAWN: frozenset({S.GRANTED, S.ACKNOWLEDGED}),
}

SUBMISSION_MOVES: dict[SubmissionStatus, frozenset[SubmissionStatus]] = {
    Sub.AWARDED: frozenset({Sub.SUBMITTED}),
    Sub.NOT_AWARDED: frozenset({Sub.SUBMITTED}),
}

INVITATION_MOVES: dict[InvitationStatus, frozenset[InvitationStatus]] = {
    I.ACCEPTED: frozenset({I.PENDING}),
    I.DECLINED: frozenset({I.PENDING}),
    I.WITHDRAWN: frozenset({I.PENDING}),
    I.EXPIRED: frozenset({I.PENDING}),
}

# Slots still holding a participant place; jobs whose work is not over.
LIVE_SLOTS = frozenset({S.GRANTED, S.ACKNOWLEDGED})
OPEN_APPLICATIONS = frozenset({A.PENDING, A.WAITLISTED})
ACTIVE_JOBS = frozenset({J.PENDING_ACCEPTANCE, J.ADMISSION_OPEN, J.IN_PROGRESS, J.IN_REVIEW})


def job_sources(move: str, target: JobStatus) -> frozenset[JobStatus]:
    return JOB_MOVES[move][target]


def check(table: dict, current: str, target: str, *, what: str, **details: object) -> None:
    """Refuse a move the table does not allow, naming the current state."""
    if current not in table.get(target, frozenset()):
        raise Conflict(
            f"This {what} is {current}; it cannot become {target}.",
            code="invalid_state",
            current_state=current,
            target_state=target,
            **details,
        )


def check_job(move: str, current: str, target: JobStatus, **details: object) -> None:
    check(JOB_MOVES[move], current, target, what="job", **details)
