"""The state machines of the job lifecycle: one table each (`{target: frozenset(sources)}`), in one place,
and the state sets the services filter by.

The rows move through `callboard_core.states` like every other machine's: a transition not in its table is
refused (409 `invalid_state` with the current state) before any row is touched; the row itself then moves
by compare-and-set (`UPDATE ... WHERE status IN <sources>`), so two racing requests cannot both move it.
docs/decisions.md explains each state.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from callboard_core import states


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
    # Staff only: a dispute's FORCE_AWARD (also after a no-award) and an award override.
    "staff_award": {
        JobStatus.AWARDED: frozenset({JobStatus.IN_PROGRESS, JobStatus.IN_REVIEW, JobStatus.NO_AWARD})
    },
    "staff_cancel": {
        JobStatus.CANCELLED: frozenset(
            {
                JobStatus.PENDING_ACCEPTANCE,
                JobStatus.ADMISSION_OPEN,
                JobStatus.IN_PROGRESS,
                JobStatus.IN_REVIEW,
            }
        )
    },
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
    # NOT_AWARDED -> AWARDED only through staff_award (a job's submissions are NOT_AWARDED once it closed).
    SubmissionStatus.AWARDED: frozenset({SubmissionStatus.SUBMITTED, SubmissionStatus.NOT_AWARDED}),
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


def check_job(move_name: str, current: str, target: JobStatus, **details: Any) -> None:
    """Refuse a job move `JOB_MOVES[move_name]` does not allow from `current` (409 `invalid_state` naming the
    current and the target state) before any row is touched."""
    states.check(JOB_MOVES[move_name], current, target, what="job", target_state=target, **details)
