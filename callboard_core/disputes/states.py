"""The dispute's machine (one table), its reason codes and resolutions, and the SLA indicator.

OPEN -> RESOLVED, once: the resolve's compare-and-set is what makes two staff resolving at once end with one
resolution (the other gets 409 `dispute_already_resolved`).

The SLA indicator (`DisputeSlaState`) is computed from the deadlines stored at opening (the settings'
`dispute_response_hours`, `dispute_resolution_hours`, `dispute_due_soon_hours`), so a reader and the
sweeper always agree:
- before a staff response: NEEDS_RESPONSE, RESPONSE_DUE_SOON (within the due-soon margin of the response
  deadline), RESPONSE_BREACHED (past it);
- once staff responded (a note, or any staff action on the job): ESCALATED (the dispute is in staff hands),
  RESOLUTION_DUE_SOON, RESOLUTION_BREACHED;
- NONE once resolved.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol


class DisputeStatus(StrEnum):
    OPEN = "OPEN"
    RESOLVED = "RESOLVED"


DISPUTE_MOVES: dict[DisputeStatus, frozenset[DisputeStatus]] = {
    DisputeStatus.RESOLVED: frozenset({DisputeStatus.OPEN}),
}


class ReasonCode(StrEnum):
    THEFT_CLAIM = "THEFT_CLAIM"
    ARTIFACT_MISUSE = "ARTIFACT_MISUSE"
    PAYOUT_ISSUE = "PAYOUT_ISSUE"
    PAYMENT_DISPUTE = "PAYMENT_DISPUTE"
    POLICY_ABUSE = "POLICY_ABUSE"
    OTHER = "OTHER"


class Resolution(StrEnum):
    UPHOLD_AWARD = "UPHOLD_AWARD"
    UPHOLD_NO_AWARD = "UPHOLD_NO_AWARD"
    FORCE_AWARD = "FORCE_AWARD"
    REFUND_REQUESTER = "REFUND_REQUESTER"
    SUSPEND_REQUESTER = "SUSPEND_REQUESTER"
    MARK_WORKER_INVALID = "MARK_WORKER_INVALID"
    ADMIN_ADJUSTMENT = "ADMIN_ADJUSTMENT"


class Side(StrEnum):
    REQUESTER = "REQUESTER"
    WORKER = "WORKER"
    STAFF = "STAFF"


class DisputeSlaState(StrEnum):
    NONE = "NONE"
    NEEDS_RESPONSE = "NEEDS_RESPONSE"
    RESPONSE_DUE_SOON = "RESPONSE_DUE_SOON"
    RESPONSE_BREACHED = "RESPONSE_BREACHED"
    ESCALATED = "ESCALATED"
    RESOLUTION_DUE_SOON = "RESOLUTION_DUE_SOON"
    RESOLUTION_BREACHED = "RESOLUTION_BREACHED"


DUE_SOON = frozenset({DisputeSlaState.RESPONSE_DUE_SOON, DisputeSlaState.RESOLUTION_DUE_SOON})
BREACHED = frozenset({DisputeSlaState.RESPONSE_BREACHED, DisputeSlaState.RESOLUTION_BREACHED})


class Clocked(Protocol):
    status: str
    responded_at: datetime | None
    response_due_at: datetime
    resolution_due_at: datetime
    due_soon_minutes: int


def sla(d: Clocked, now: datetime) -> tuple[DisputeSlaState, datetime | None]:
    """The indicator at `now` and when it next changes (None: it will not change by time alone)."""
    if d.status != DisputeStatus.OPEN:
        return DisputeSlaState.NONE, None
    margin = timedelta(minutes=d.due_soon_minutes)
    if d.responded_at is None:
        steps = (
            (d.response_due_at - margin, DisputeSlaState.NEEDS_RESPONSE),
            (d.response_due_at, DisputeSlaState.RESPONSE_DUE_SOON),
        )
        last = DisputeSlaState.RESPONSE_BREACHED
    else:
        steps = (
            (d.resolution_due_at - margin, DisputeSlaState.ESCALATED),
            (d.resolution_due_at, DisputeSlaState.RESOLUTION_DUE_SOON),
        )
        last = DisputeSlaState.RESOLUTION_BREACHED
    for until, state in steps:
        if now < until:
            return state, until
    return last, None
