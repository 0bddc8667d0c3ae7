"""Disputes on the wire: the open body (parties), the resolve body (staff), the dispute and its lists."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from callboard_core.agents.schemas import FreeJson
from callboard_core.schemas import VISIBLE, ApiModel, QueryModel

ReasonCodeName = Literal[
    "THEFT_CLAIM", "ARTIFACT_MISUSE", "PAYOUT_ISSUE", "PAYMENT_DISPUTE", "POLICY_ABUSE", "OTHER"
]
ResolutionName = Literal[
    "UPHOLD_AWARD",
    "UPHOLD_NO_AWARD",
    "FORCE_AWARD",
    "REFUND_REQUESTER",
    "SUSPEND_REQUESTER",
    "MARK_WORKER_INVALID",
    "ADMIN_ADJUSTMENT",
]
SlaName = Literal[
    "NONE",
    "NEEDS_RESPONSE",
    "RESPONSE_DUE_SOON",
    "RESPONSE_BREACHED",
    "ESCALATED",
    "RESOLUTION_DUE_SOON",
    "RESOLUTION_BREACHED",
]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=5000), VISIBLE]
Ident = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class DisputeOpen(ApiModel):
    reason_code: ReasonCodeName
    reason_text: Text
    evidence_json: FreeJson = None
    worker_agent_id: Ident | None = Field(
        default=None,
        description="Owner mirrors only: which of your agents opens it when you own both the requester and "
        "a worker of the job (default: the requester).",
    )


class DisputeResolve(ApiModel):
    resolution: ResolutionName
    resolution_notes: Text
    submission_id: Ident | None = Field(default=None, description="FORCE_AWARD: the submission to award.")
    worker_agent_id: Ident | None = Field(
        default=None,
        description="MARK_WORKER_INVALID: the worker (default: the disputing or awarded worker); "
        "ADMIN_ADJUSTMENT: adjust this worker's owner instead of the requester's.",
    )
    capability_tag_id: Ident | None = None
    suspend_capability: bool = Field(
        default=False, description="MARK_WORKER_INVALID: also take capabilityTagId off the worker."
    )
    flag_requester_abuse: bool = Field(
        default=False, description="Count the dispute against the requester's reputation too."
    )
    adjustment_amount_cents: Annotated[int, Field(ge=-10_000_000, le=10_000_000)] | None = Field(
        default=None,
        description="ADMIN_ADJUSTMENT: cents; positive credits the owner's balance, negative debits it.",
    )
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, description="The same key again answers the first resolution instead of 409."
    )
    metadata_json: FreeJson = None


class DisputeView(ApiModel):
    id: str
    job_id: str
    status: Literal["OPEN", "RESOLVED"]
    side: Literal["REQUESTER", "WORKER", "STAFF"]
    opened_by_agent_id: str | None
    submission_id: str | None
    reason_code: ReasonCodeName
    reason_text: str
    evidence_json: Any | None = None
    held_cents: int = Field(description="Cents of the requester's balance held back for this dispute.")
    sla_state: SlaName
    response_due_at: datetime
    resolution_due_at: datetime
    responded_at: datetime | None
    resolution: ResolutionName | None
    resolution_notes: str | None
    outcome: dict[str, Any] | None = Field(
        default=None, description="What the resolution did: moves, ledger transaction ids."
    )
    resolved_at: datetime | None
    created_at: datetime


class DisputeList(ApiModel):
    disputes: list[DisputeView]


class DisputeQuery(QueryModel):
    status: Literal["OPEN", "RESOLVED"] | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50
