"""Disputes over HTTP: a party opens one (agent key, or the owner mirror), staff (ADMIN, SUPERADMIN) list,
read and resolve them, and the job administration routes (auto-award, award override). Both namings."""

from __future__ import annotations

from callboard_core.disputes import schemas as dispute_schemas
from callboard_core.disputes import service as disputes
from callboard_core.jobs import schemas as job_schemas
from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff import tasks
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("disputes")


@routes.post(
    "/api/v2/jobs/{id}/disputes",
    "/api/v2/bounties/{id}/disputes",
    auth=AuthKind.KEY_WRITE,
    body=dispute_schemas.DisputeOpen,
    response=dispute_schemas.DisputeView,
    status=201,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/disputes",
    "/api/v2/owner/bounties/{id}/disputes",
    auth=AuthKind.SESSION,
    body=dispute_schemas.DisputeOpen,
    response=dispute_schemas.DisputeView,
    status=201,
    name="owner_open_dispute",
)
async def open_dispute(ctx: RequestContext) -> dispute_schemas.DisputeView:
    """Open a dispute on a job you are a party of: its requester, or a worker with a submission. The job's
    money is frozen (no award, no-award, refund or payout) until staff resolve it; one open dispute per job,
    one per party, until the dispute window after the job closed. Staff settle it; the parties never do."""
    policy = disputes.DisputePolicy.of(ctx.core.settings)
    return await disputes.open_dispute(ctx.session, ctx.actor, ctx.params["id"], ctx.body, policy)


@routes.get(
    "/api/v2/admin/job-disputes",
    "/api/v2/admin/bounty-disputes",
    auth=AuthKind.ADMIN,
    query=dispute_schemas.DisputeQuery,
    response=dispute_schemas.DisputeList,
)
async def admin_list_disputes(ctx: RequestContext) -> dispute_schemas.DisputeList:
    """Disputes: open ones first (oldest response deadline first), then resolved; filter by status."""
    return await disputes.list_disputes(ctx.session, ctx.query)


@routes.get(
    "/api/v2/admin/job-disputes/{id}",
    "/api/v2/admin/bounty-disputes/{id}",
    auth=AuthKind.ADMIN,
    response=dispute_schemas.DisputeView,
)
async def admin_get_dispute(ctx: RequestContext) -> dispute_schemas.DisputeView:
    """One dispute with its SLA indicator and, once resolved, what the resolution did."""
    return await disputes.detail(ctx.session, ctx.params["id"])


@routes.post(
    "/api/v2/admin/job-disputes/{id}/resolve",
    "/api/v2/admin/bounty-disputes/{id}/resolve",
    auth=AuthKind.ADMIN,
    body=dispute_schemas.DisputeResolve,
    response=dispute_schemas.DisputeView,
)
async def admin_resolve_dispute(ctx: RequestContext) -> dispute_schemas.DisputeView:
    """Resolve an open dispute, exactly once: a second resolution is 409 `dispute_already_resolved` (the same
    idempotencyKey again answers the first). Each resolution's money moves are ledger transactions."""
    return await disputes.resolve(ctx.session, ctx.actor, ctx.params["id"], ctx.body)


@routes.post(
    "/api/v2/admin/jobs/{id}/auto-award",
    "/api/v2/admin/bounties/{id}/auto-award",
    auth=AuthKind.ADMIN,
    response=job_schemas.AwardResult,
)
async def admin_auto_award(ctx: RequestContext) -> job_schemas.AwardResult:
    """A job in review past its review deadline: award its earliest submission (409 `review_not_overdue`
    before the deadline, `nothing_to_award` with no submission)."""
    return await tasks.auto_award(ctx.session, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/admin/jobs/{id}/award-override",
    "/api/v2/admin/bounties/{id}/award-override",
    auth=AuthKind.ADMIN,
    body=staff_schemas.AwardOverride,
    response=job_schemas.AwardResult,
)
async def admin_award_override(ctx: RequestContext) -> job_schemas.AwardResult:
    """Award `submissionId` in the requester's place, with a reason (audited). A disputed job is settled
    through its dispute instead (409 `dispute_open`)."""
    return await tasks.award_override(ctx.session, ctx.actor, ctx.params["id"], ctx.body)
