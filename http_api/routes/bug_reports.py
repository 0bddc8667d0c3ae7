"""The bug-report bridge: public intake, the staff triage feed, the runner's machine-token routes."""

from __future__ import annotations

from callboard_core.bug_reports import schemas as bug_schemas
from callboard_core.bug_reports import service as bug_reports
from callboard_core.ratelimit import BUG_REPORT
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("bug_reports")

INTAKE_PATH = "/api/bridge/report_bug"
MAX_BYTES = bug_reports.MAX_BYTES  # the app's body limit holds this path to it (413 above)


@routes.post(
    INTAKE_PATH,
    auth=AuthKind.PUBLIC,
    body=bug_schemas.BugReportBody,
    response=bug_schemas.BugReportReceived,
    status=201,
    rate_limit=BUG_REPORT,
)
async def report_bug(ctx: RequestContext) -> bug_schemas.BugReportReceived:
    """Report a bug: what went wrong (summary) and what helps (the requestId of the failing call, evidence,
    the request and response pairs). At most 64 KB; rate-limited per address (429 with Retry-After).

    Keys, tokens, passwords and card numbers are masked before the report is stored (redactedSecrets)."""
    return await bug_reports.file(ctx.session, ctx.body)


@routes.get(
    "/api/bridge/bug_reports",
    auth=AuthKind.STAFF,
    query=bug_schemas.BugReportQuery,
    response=bug_schemas.BugReportList,
)
async def bug_report_feed(ctx: RequestContext) -> bug_schemas.BugReportList:
    """The triage feed, newest first (filter by status)."""
    return await bug_reports.feed(ctx.session, ctx.query)


@routes.patch(
    "/api/bridge/bug_reports/{reportId}",
    auth=AuthKind.ADMIN,
    body=bug_schemas.BugReportTriage,
    response=bug_schemas.BugReport,
)
async def triage_bug_report(ctx: RequestContext) -> bug_schemas.BugReport:
    """Set a report's status (any: reopen, take it back from a stuck runner) and triage notes; audited."""
    return await bug_reports.triage(ctx.session, ctx.actor, ctx.params["reportId"], ctx.body)


@routes.delete("/api/bridge/bug_reports/{reportId}", auth=AuthKind.ADMIN, response=bug_schemas.BugReport)
async def delete_bug_report(ctx: RequestContext) -> bug_schemas.BugReport:
    """Remove a report; the audit log keeps who removed it and when."""
    return await bug_reports.delete(ctx.session, ctx.actor, ctx.params["reportId"])


@routes.post(
    "/api/bridge/bug_reports/enqueue", auth=AuthKind.MACHINE, response=bug_schemas.Enqueued, idempotent=False
)
async def enqueue_bug_reports(ctx: RequestContext) -> bug_schemas.Enqueued:
    """Queue every received report for the runner; how many."""
    return await bug_reports.enqueue(ctx.session)


@routes.post(
    "/api/bridge/bug_reports/claim",
    auth=AuthKind.MACHINE,
    body=bug_schemas.ReportClaimBody,
    body_optional=True,
    response=bug_schemas.Claimed,
    idempotent=False,
)
async def claim_bug_report(ctx: RequestContext) -> bug_schemas.Claimed:
    """Take the oldest queued report (IN_PROGRESS, yours); report null when none is queued. Two runners
    claiming at once never get the same report."""
    return await bug_reports.claim(ctx.session, ctx.body or bug_schemas.ReportClaimBody())


@routes.post(
    "/api/bridge/bug_reports/{reportId}/status",
    auth=AuthKind.MACHINE,
    body=bug_schemas.StatusBody,
    response=bug_schemas.BugReport,
    idempotent=False,
)
async def bug_report_status(ctx: RequestContext) -> bug_schemas.BugReport:
    """Your word on the report you hold: PR_SUBMITTED (with the pull request), CLOSED, or UNADDRESSED to
    give it back. 409 invalid_state for a report not in progress; 409 claimed_by_another_run for another
    run's report."""
    return await bug_reports.runner_status(ctx.session, ctx.params["reportId"], ctx.body)
