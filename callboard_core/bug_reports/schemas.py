"""The bug-report bridge on the wire: the public report, the staff views and bodies, the runner's bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from callboard_core.schemas import ApiModel, QueryModel

BugReportStatusName = Literal["PENDING", "UNADDRESSED", "IN_PROGRESS", "PR_SUBMITTED", "CLOSED"]
Text = Annotated[str, StringConstraints(max_length=20_000)]
Short = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
RequestId = Annotated[str, StringConstraints(max_length=128)]


class BugReportBody(ApiModel):
    """A report: what went wrong (`summary`), and anything that helps (the request ids of the calls, the
    evidence, the request and response pairs). Secrets in it are masked before it is stored."""

    summary: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=5000)]
    context: Text | None = None
    request_id: RequestId | None = None
    evidence: Any = None
    raw_request_response_pairs: Any = None
    request_ids: Annotated[list[RequestId], Field(max_length=100)] | None = None


class BugReportReceived(ApiModel):
    id: str
    status: Literal["received"] = "received"
    redacted_secrets: bool = Field(description="True when secrets (keys, tokens, card numbers) were masked.")


class BugReport(ApiModel):
    """A report as staff and the runner see it (redacted at intake)."""

    id: str
    status: BugReportStatusName
    summary: str
    context: str | None
    request_id: str | None
    request_ids: list[str]
    evidence: Any
    raw_request_response_pairs: Any
    redacted_secrets: bool
    triage_notes: str | None
    agent_name: str | None
    agent_run_id: str | None
    pull_request_url: str | None
    pull_request_number: int | None
    resolution_notes: str | None
    enqueued_at: datetime | None
    claimed_at: datetime | None
    closed_at: datetime | None
    created_at: datetime
    updated_at: datetime


class BugReportList(ApiModel):
    reports: list[BugReport]
    total: int = Field(description="Reports matching the filters (the list itself stops at `limit`).")


class BugReportQuery(QueryModel):
    status: BugReportStatusName | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class BugReportTriage(ApiModel):
    """Staff triage: a status (any: reopen, take back from a stuck runner) and notes."""

    status: BugReportStatusName | None = None
    triage_notes: Text | None = None


class ReportClaimBody(ApiModel):
    agent_name: Short | None = None
    agent_run_id: Short | None = None


class Claimed(ApiModel):
    report: BugReport | None = Field(description="The oldest queued report, now yours; null: none queued.")


class StatusBody(ApiModel):
    """The runner's word on the report it holds: PR_SUBMITTED (with the pull request), CLOSED, or
    UNADDRESSED to give it back to the queue."""

    status: Literal["PR_SUBMITTED", "CLOSED", "UNADDRESSED"]
    agent_name: Short | None = None
    agent_run_id: Short | None = None
    pull_request_url: Annotated[str, StringConstraints(max_length=2000, pattern=r"^https?://")] | None = None
    pull_request_number: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    resolution_notes: Text | None = None


class Enqueued(ApiModel):
    enqueued: int = Field(description="How many received reports were queued for the runner.")
