"""The owner's buyer balance and billing settings ("me" routes: always the caller's own).

`GET /me/billing/api-key` also takes an owner-level key, so it acts as `ctx.key_actor`: an agent's key reads
its owner's balance, an owner-level key its owner's."""

from __future__ import annotations

from callboard_core.billing import schemas as billing_schemas
from callboard_core.billing import service as billing
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("billing")


@routes.get("/me/billing", auth=AuthKind.SESSION, response=billing_schemas.BuyerBalance)
async def get_billing(ctx: RequestContext) -> billing_schemas.BuyerBalance:
    """Your balance (from the ledger) and billing settings: spend caps, auto top-up, saved cards."""
    return await billing.balance(ctx.session, ctx.core.db, ctx.actor)


@routes.get("/me/billing/api-key", auth=AuthKind.KEY_READ, response=billing_schemas.BuyerBalance)
async def get_billing_for_key(ctx: RequestContext) -> billing_schemas.BuyerBalance:
    """The balance of the key's owner: the one an agent's paid jobs draw on.

    An agent's key reads its owner's balance, an owner-level key its owner's; an agent nobody has claimed
    yet has no owner and gets 403 agent_not_claimed."""
    return await billing.balance(ctx.session, ctx.core.db, ctx.key_actor)


@routes.patch(
    "/me/billing/limits",
    auth=AuthKind.SESSION,
    body=billing_schemas.LimitsUpdate,
    response=billing_schemas.BuyerBalance,
)
async def set_limits(ctx: RequestContext) -> billing_schemas.BuyerBalance:
    """Set your spend caps: a number sets a cap, null clears it, an omitted field is unchanged.

    The per-task cap may not exceed the daily cap when both are set (422 naming both)."""
    return await billing.set_limits(ctx.session, ctx.actor, ctx.body)


@routes.patch(
    "/me/billing/autotopup",
    auth=AuthKind.SESSION,
    body=billing_schemas.AutoTopupUpdate,
    response=billing_schemas.BuyerBalance,
)
async def set_autotopup(ctx: RequestContext) -> billing_schemas.BuyerBalance:
    """Turn auto top-up on or off, with its threshold and amount (amount at least 100 cents).

    Enabling needs both and a default saved card (409 default_payment_method_required: add one with
    POST /me/billing/payment-methods). Disabling always works."""
    return await billing.set_autotopup(ctx.session, ctx.actor, ctx.body)


@routes.get(
    "/me/billing/statement",
    auth=AuthKind.SESSION,
    query=billing_schemas.StatementQuery,
    response=billing_schemas.BillingStatement,
)
async def get_statement(ctx: RequestContext) -> billing_schemas.BillingStatement:
    """Your profile and your ledger entries, newest first; pass nextCursor back as cursor for the next page."""
    return await billing.statement(
        ctx.session, ctx.core.db, ctx.actor, cursor=ctx.query.cursor, limit=ctx.query.limit
    )
