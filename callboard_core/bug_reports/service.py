"""The bug-report bridge: intake (public), the staff feed and triage, the runner's enqueue, claim and status.

A report is PENDING when received; `enqueue` queues every PENDING one (UNADDRESSED); `claim` hands the
oldest queued report to one runner (IN_PROGRESS) by compare-and-set, so two runners claiming at once never
get the same report; the runner that holds it reports PR_SUBMITTED, CLOSED, or gives it back (UNADDRESSED).
A runner names its run (`agentRunId`): another run's word on a report is refused (409). Staff may set any
status (audited, in the same transaction), and delete a report (audited; the row goes).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.audit import service as audit
from callboard_core.bug_reports import schemas as bug_schemas
from callboard_core.bug_reports.models import BUG_REPORT_MOVES, BugReport, BugReportStatus
from callboard_core.bug_reports.redaction import redact
from callboard_core.db.engine import dialect_of
from callboard_core.errors import Conflict, NotFound
from callboard_core.principals import Actor

MAX_BYTES = 65_536  # the intake's body cap (the HTTP front end refuses a larger body with 413)
CLAIM_ATTEMPTS = 5  # a claim that loses a race to another runner tries the next queued report


def view(row: BugReport) -> bug_schemas.BugReport:
    return bug_schemas.BugReport(
        id=row.id,
        status=row.status,
        summary=row.summary,
        context=row.context,
        request_id=row.request_id,
        request_ids=list(row.request_ids or []),
        evidence=row.evidence,
        raw_request_response_pairs=row.raw_pairs,
        redacted_secrets=row.redacted_secrets,
        triage_notes=row.triage_notes,
        agent_name=row.agent_name,
        agent_run_id=row.agent_run_id,
        pull_request_url=row.pull_request_url,
        pull_request_number=row.pull_request_number,
        resolution_notes=row.resolution_notes,
        enqueued_at=row.enqueued_at,
        claimed_at=row.claimed_at,
        closed_at=row.closed_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def _get(session: AsyncSession, report_id: str) -> BugReport:
    row = await session.get(BugReport, report_id, populate_existing=True)
    if row is None:
        raise NotFound("No such bug report.", code="bug_report_not_found", reportId=report_id)
    return row


# --- intake ----------------------------------------------------------------------------------------------


async def file(session: AsyncSession, body: bug_schemas.BugReportBody) -> bug_schemas.BugReportReceived:
    """Store a report with every secret masked first (redaction.py): the database never holds one."""
    fields = {
        "summary": body.summary,
        "context": body.context,
        "request_id": body.request_id,
        "request_ids": body.request_ids or [],
        "evidence": body.evidence,
        "raw_pairs": body.raw_request_response_pairs,
    }
    clean, masked = redact(fields)
    row = BugReport(status=BugReportStatus.PENDING, redacted_secrets=masked, **clean)
    session.add(row)
    await session.flush()
    return bug_schemas.BugReportReceived(id=row.id, redacted_secrets=masked)


# --- staff -----------------------------------------------------------------------------------------------


async def feed(session: AsyncSession, q: bug_schemas.BugReportQuery) -> bug_schemas.BugReportList:
    """The triage feed, newest first."""
    conditions = [BugReport.status == q.status] if q.status else []
    total = await session.scalar(select(func.count()).select_from(BugReport).where(*conditions))
    rows = await session.scalars(
        select(BugReport)
        .where(*conditions)
        .order_by(BugReport.created_at.desc(), BugReport.id.desc())
        .limit(q.limit)
    )
    return bug_schemas.BugReportList(reports=[view(r) for r in rows], total=int(total or 0))


def _record(session: AsyncSession, actor: Actor, action: str, report_id: str, **data: Any) -> None:
    audit.by(session, actor, action, "bug_report", report_id, **data)


async def triage(
    session: AsyncSession, actor: Actor, report_id: str, body: bug_schemas.BugReportTriage
) -> bug_schemas.BugReport:
    row = await _get(session, report_id)
    before = {"status": row.status, "triageNotes": row.triage_notes}
    values: dict[str, Any] = {}
    if "triage_notes" in body.model_fields_set:
        values["triage_notes"] = body.triage_notes
    target = BugReportStatus(body.status) if body.status else BugReportStatus(row.status)
    if target is BugReportStatus.CLOSED and row.status != BugReportStatus.CLOSED:
        values["closed_at"] = clock.now()
    elif target is not BugReportStatus.CLOSED:
        values["closed_at"] = None
    moved = await states.compare_and_set(
        session, BugReport, row.id, BUG_REPORT_MOVES["triage"], target, **values, updated_at=clock.now()
    )
    assert moved is not None  # staff may set any status from any status
    _record(
        session,
        actor,
        "bug_report.triage",
        row.id,
        before=before,
        after={"status": moved.status, "triageNotes": moved.triage_notes},
    )
    return view(moved)


async def delete(session: AsyncSession, actor: Actor, report_id: str) -> bug_schemas.BugReport:
    """Remove the report (its content may be sensitive even redacted); the audit keeps who and when."""
    row = await _get(session, report_id)
    shown = view(row)
    await session.delete(row)
    _record(session, actor, "bug_report.delete", report_id, status=row.status, summary=row.summary[:200])
    await session.flush()
    return shown


# --- the runner (machine token) ---------------------------------------------------------------------------


async def enqueue(session: AsyncSession) -> bug_schemas.Enqueued:
    """Queue every received report for the runner."""
    moved = await states.compare_and_set_where(
        session,
        BugReport,
        BUG_REPORT_MOVES["enqueue"],
        BugReportStatus.UNADDRESSED,
        enqueued_at=clock.now(),
        updated_at=clock.now(),
    )
    return bug_schemas.Enqueued(enqueued=len(moved))


async def claim(session: AsyncSession, body: bug_schemas.ReportClaimBody) -> bug_schemas.Claimed:
    """The oldest queued report, now this runner's; None when the queue is empty. Concurrent claims each
    get a different report: the move is a compare-and-set, and the loser tries the next one."""
    for _ in range(CLAIM_ATTEMPTS):
        candidate = select(BugReport.id).where(BugReport.status == BugReportStatus.UNADDRESSED)
        if dialect_of(session) == "postgresql":
            candidate = candidate.with_for_update(skip_locked=True)
        report_id = await session.scalar(candidate.order_by(BugReport.created_at, BugReport.id).limit(1))
        if report_id is None:
            return bug_schemas.Claimed(report=None)
        moved = await states.compare_and_set(
            session,
            BugReport,
            report_id,
            BUG_REPORT_MOVES["claim"],
            BugReportStatus.IN_PROGRESS,
            agent_name=body.agent_name,
            agent_run_id=body.agent_run_id,
            claimed_at=clock.now(),
            updated_at=clock.now(),
        )
        if moved is not None:
            return bug_schemas.Claimed(report=view(moved))
    return bug_schemas.Claimed(report=None)


async def runner_status(
    session: AsyncSession, report_id: str, body: bug_schemas.StatusBody
) -> bug_schemas.BugReport:
    """The holding runner's word on its report (409 `invalid_state` for a move the table refuses, 409
    `claimed_by_another_run` when the report is another run's)."""
    row = await _get(session, report_id)
    if row.agent_run_id and body.agent_run_id and body.agent_run_id != row.agent_run_id:
        raise Conflict(
            "This report is held by another runner's run; claim a queued report instead.",
            code="claimed_by_another_run",
            current_state=row.status,
        )
    target = BugReportStatus(body.status)
    values: dict[str, Any] = {"updated_at": clock.now()}
    for name in ("agent_name", "pull_request_url", "pull_request_number", "resolution_notes"):
        if name in body.model_fields_set:
            values[name] = getattr(body, name)
    if target is BugReportStatus.CLOSED:
        values["closed_at"] = clock.now()
    if target is BugReportStatus.UNADDRESSED:  # given back: the next claim takes it, whoever runs it
        values.update(agent_run_id=None, claimed_at=None)
    moved = await states.compare_and_set(
        session, BugReport, row.id, BUG_REPORT_MOVES["runner"], target, **values
    )
    if moved is None:
        raise Conflict(
            f"A report in {row.status} cannot move to {target}: claim it first (IN_PROGRESS).",
            code="invalid_state",
            current_state=row.status,
        )
    return view(moved)
