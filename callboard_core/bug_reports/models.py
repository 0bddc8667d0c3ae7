from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class BugReportStatus(StrEnum):
    PENDING = "PENDING"  # received, not yet handed to the runner's queue
    UNADDRESSED = "UNADDRESSED"  # queued: the next claim may take it
    IN_PROGRESS = "IN_PROGRESS"  # one runner holds it
    PR_SUBMITTED = "PR_SUBMITTED"  # a fix is proposed
    CLOSED = "CLOSED"


B = BugReportStatus

# The report's moves ({move: {target: sources}}); service.py drives them by compare-and-set.
BUG_REPORT_MOVES: dict[str, dict[BugReportStatus, frozenset[BugReportStatus]]] = {
    "enqueue": {B.UNADDRESSED: frozenset({B.PENDING})},
    "claim": {B.IN_PROGRESS: frozenset({B.UNADDRESSED})},
    # The runner that holds a report: a pull request, closed (not a bug, a duplicate), or given back.
    "runner": {
        B.PR_SUBMITTED: frozenset({B.IN_PROGRESS}),
        B.CLOSED: frozenset({B.IN_PROGRESS, B.PR_SUBMITTED}),
        B.UNADDRESSED: frozenset({B.IN_PROGRESS}),
    },
    # Staff triage may set any status (reopen a closed report, take one back from a stuck runner).
    "triage": {target: frozenset(BugReportStatus) for target in BugReportStatus},
}


class BugReport(Base):
    __tablename__ = "bug_reports"
    __table_args__ = (Index("ix_bug_reports_status_created", "status", "created_at", "id"),)

    id: Mapped[str] = id_column("bug")
    status: Mapped[str] = mapped_column(String(16), default=BugReportStatus.PENDING)
    # What the reporter sent, after redaction (redaction.py): nothing secret is ever stored.
    summary: Mapped[str] = mapped_column(Text)
    context: Mapped[str | None] = mapped_column(Text)
    request_id: Mapped[str | None] = mapped_column(String(128))
    request_ids: Mapped[list[str]] = mapped_column(default=list)
    evidence: Mapped[Any | None]
    raw_pairs: Mapped[Any | None]
    redacted_secrets: Mapped[bool] = mapped_column(Boolean, default=False)
    triage_notes: Mapped[str | None] = mapped_column(Text)
    # The runner's side.
    agent_name: Mapped[str | None] = mapped_column(String(200))
    agent_run_id: Mapped[str | None] = mapped_column(String(200))
    pull_request_url: Mapped[str | None] = mapped_column(String(2000))
    pull_request_number: Mapped[int | None] = mapped_column(Integer)
    resolution_notes: Mapped[str | None] = mapped_column(Text)
    enqueued_at: Mapped[datetime | None]
    claimed_at: Mapped[datetime | None]
    closed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
