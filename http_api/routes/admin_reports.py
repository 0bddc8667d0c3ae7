"""The staff console's read-only surfaces: overview and moderation (any staff role); analytics, the audit
log, payments and ledger transactions (ADMIN: financial surfaces are hidden from SUPPORT)."""

from __future__ import annotations

from callboard_core.billing import refunds
from callboard_core.billing import schemas as billing_schemas
from callboard_core.staff import marketplace, money, reports
from callboard_core.staff import schemas as staff_schemas
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("admin_reports")


@routes.get("/admin/overview", auth=AuthKind.STAFF, response=staff_schemas.Overview)
async def admin_overview(ctx: RequestContext) -> staff_schemas.Overview:
    """Users, agents, jobs and bug reports by status; tag requests and waitlist signups waiting."""
    return await reports.overview(ctx.session)


@routes.get("/admin/moderation", auth=AuthKind.STAFF, response=staff_schemas.ModerationQueue)
async def admin_moderation(ctx: RequestContext) -> staff_schemas.ModerationQueue:
    """What waits on staff, oldest first: tag requests, unaddressed bug reports, suspended agents."""
    return await reports.moderation(ctx.session)


@routes.get(
    "/admin/analytics",
    auth=AuthKind.ADMIN,
    query=staff_schemas.AnalyticsQuery,
    response=staff_schemas.Analytics,
)
async def admin_analytics(ctx: RequestContext) -> staff_schemas.Analytics:
    """The last `days` days (default 30): sign-ups, agents, jobs published and awarded (starter jobs left
    out), money moved by ledger kind and the platform's fees."""
    return await reports.analytics(ctx.session, ctx.query.days)


@routes.get(
    "/admin/audit-log",
    auth=AuthKind.ADMIN,
    query=staff_schemas.AuditLogQuery,
    response=staff_schemas.AuditLog,
)
async def admin_audit_log(ctx: RequestContext) -> staff_schemas.AuditLog:
    """The audit log, newest first: filter by action, target type, or an actor's or target's id (query)."""
    return await reports.audit_log(ctx.session, ctx.query)


@routes.get(
    "/admin/payments",
    auth=AuthKind.ADMIN,
    query=staff_schemas.PaymentQuery,
    response=staff_schemas.AdminPaymentList,
)
async def admin_payments(ctx: RequestContext) -> staff_schemas.AdminPaymentList:
    """Paid jobs' payments, newest first (query: a payment's, job's or owner's id)."""
    return await reports.payments(ctx.session, ctx.query)


@routes.get(
    "/admin/transactions",
    auth=AuthKind.ADMIN,
    query=staff_schemas.TransactionQuery,
    response=staff_schemas.AdminTransactionList,
)
async def admin_transactions(ctx: RequestContext) -> staff_schemas.AdminTransactionList:
    """Ledger transactions, newest first: by owner, job or processor reference (query), escrow status,
    payment method."""
    return await reports.transactions(ctx.session, ctx.query)


@routes.get(
    "/admin/transactions/{transactionId}", auth=AuthKind.ADMIN, response=staff_schemas.AdminTransactionDetail
)
async def admin_transaction(ctx: RequestContext) -> staff_schemas.AdminTransactionDetail:
    """One ledger transaction and its entries (each with the account's balance after it)."""
    return await reports.transaction(ctx.session, ctx.params["transactionId"])


@routes.get("/admin/analytics/first-cycle", auth=AuthKind.STAFF, response=staff_schemas.FirstCycle)
async def admin_first_cycle(ctx: RequestContext) -> staff_schemas.FirstCycle:
    """How many accounts signed up, own a claimed agent, published a job, gave and won an award."""
    return await marketplace.first_cycle(ctx.session)


@routes.get("/admin/analytics/liquidity", auth=AuthKind.ADMIN, response=staff_schemas.Liquidity)
async def admin_liquidity(ctx: RequestContext) -> staff_schemas.Liquidity:
    """Organic liquidity (jobs, applications per job, award rate), house and starter activity apart."""
    return await marketplace.liquidity(ctx.session)


@routes.get(
    "/api/v2/admin/jobs/moderation-queue",
    "/api/v2/admin/bounties/moderation-queue",
    auth=AuthKind.ADMIN,
    response=staff_schemas.JobModerationQueue,
)
async def admin_job_moderation(ctx: RequestContext) -> staff_schemas.JobModerationQueue:
    """Open jobs of the last seven days by requesters without a track record (unverified claim, or an owner
    with no job decided before), newest first, each with why."""
    return await marketplace.job_moderation_queue(ctx.session)


@routes.post(
    "/admin/payments/buyer-profiles/{buyerProfileId}/adjustments",
    auth=AuthKind.STAFF,
    body=staff_schemas.AdjustmentBody,
    response=staff_schemas.Adjusted,
    status=201,
)
async def admin_adjust_balance(ctx: RequestContext) -> staff_schemas.Adjusted:
    """Credit (amountCents > 0, a credit note) or debit (< 0, an invoice) an owner's available balance by
    hand, with a reason (ADMIN and SUPERADMIN). A debit never takes the balance below zero (409
    insufficient_funds); the same idempotencyKey applies it once. Audited."""
    return await money.adjust(ctx.session, ctx.actor, ctx.params["buyerProfileId"], ctx.body)


async def _refund_to_card(ctx: RequestContext) -> tuple[str, str]:
    return await money.refund_to_card(
        ctx.session, ctx.core, ctx.actor, ctx.params["buyerProfileId"], ctx.body
    )


@routes.post(
    "/admin/payments/buyer-profiles/{buyerProfileId}/refunds",
    auth=AuthKind.STAFF,
    body=billing_schemas.BalanceRefundBody,
    response=billing_schemas.BalanceRefundResult,
    status=201,
    prepare=_refund_to_card,
)
async def admin_refund_balance(ctx: RequestContext) -> billing_schemas.BalanceRefundResult:
    """Refund part of an owner's unspent balance to the cards that paid it (ADMIN and SUPERADMIN; not in the
    spec's route list: see docs/decisions.md). Split over their card payments, newest first; 409
    insufficient_funds beyond the available balance, refund_exceeds_card_payments beyond what the cards
    paid. A credit note per piece. PENDING: repeat with the same idempotencyKey. Audited."""
    return await refunds.result(ctx.session, *ctx.prepared)
