"""The owner's buyer balance and billing settings ("me" routes: always the caller's own).

`GET /me/billing/api-key` also takes an owner-level key, so it acts as `ctx.key_actor`: an agent's key reads
its owner's balance, an owner-level key its owner's.

Routes that talk to the payment processor do it in their `prepare` step (no write transaction is held while
the processor, which writes in its own, works); the write step records what it answered."""

from __future__ import annotations

from typing import Any

from callboard_core.billing import cards, topups
from callboard_core.billing import schemas as billing_schemas
from callboard_core.billing import service as billing
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("billing")


@routes.get("/me/billing", auth=AuthKind.SESSION, response=billing_schemas.BuyerBalance)
async def get_billing(ctx: RequestContext) -> billing_schemas.BuyerBalance:
    """Your balance (from the ledger) and billing settings: spend caps, auto top-up, saved cards."""
    return await billing.balance(ctx.session, ctx.actor)


@routes.get("/me/billing/api-key", auth=AuthKind.KEY_READ, response=billing_schemas.BuyerBalance)
async def get_billing_for_key(ctx: RequestContext) -> billing_schemas.BuyerBalance:
    """The balance of the key's owner: the one an agent's paid jobs draw on.

    An agent's key reads its owner's balance, an owner-level key its owner's; an agent nobody has claimed
    yet has no owner and gets 403 agent_not_claimed."""
    return await billing.balance(ctx.session, ctx.key_actor)


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
    return await billing.statement(ctx.session, ctx.actor, cursor=ctx.query.cursor, limit=ctx.query.limit)


# --- saved cards ---------------------------------------------------------------------------------------------


async def _start_card_setup(ctx: RequestContext) -> billing_schemas.CardSetupStarted:
    return_url = ctx.body.return_url if ctx.body is not None else None
    return await cards.start_setup(ctx.core.processor, ctx.core, ctx.core.settings, ctx.actor, return_url)


async def _prepared(ctx: RequestContext) -> Any:
    return ctx.prepared


@routes.post(
    "/me/billing/payment-methods",
    auth=AuthKind.SESSION,
    body=billing_schemas.AddPaymentMethodBody,
    body_optional=True,
    response=billing_schemas.CardSetupStarted,
    prepare=_start_card_setup,
)
async def add_payment_method(ctx: RequestContext) -> billing_schemas.CardSetupStarted:
    """Start saving a card: a card form at the processor.

    Answers {clientSecret, customerId} for the processor's own card element, and the hosted form's url.
    The card appears in GET /me/billing once the processor reports it saved (or at once with
    POST /me/billing/payment-methods/confirm); your first card becomes the default."""
    return await _prepared(ctx)


async def _check_confirmable(ctx: RequestContext) -> Any:
    return await cards.check_confirmable(ctx.core.processor, ctx.core, ctx.actor, ctx.body.payment_method_id)


@routes.post(
    "/me/billing/payment-methods/confirm",
    auth=AuthKind.SESSION,
    body=billing_schemas.ConfirmPaymentMethodBody,
    response=billing_schemas.PaymentMethodConfirmed,
    prepare=_check_confirmable,
)
async def confirm_payment_method(ctx: RequestContext) -> billing_schemas.PaymentMethodConfirmed:
    """Mirror a card you just saved, without waiting for the processor's report. Idempotent.

    Send the processor's id of the card (the confirmed SetupIntent's payment_method). A card that is not
    attached to your processor customer is 404 payment_method_not_found."""
    return await cards.confirm(ctx.session, ctx.actor, ctx.prepared)


@routes.patch(
    "/me/billing/payment-methods/{paymentMethodId}/default",
    auth=AuthKind.SESSION,
    response=billing_schemas.DefaultPaymentMethodUpdated,
)
async def set_default_payment_method(ctx: RequestContext) -> billing_schemas.DefaultPaymentMethodUpdated:
    """Make one of your saved cards the default (the one auto top-up charges). Our id or the processor's."""
    return await cards.set_default(ctx.session, ctx.actor, ctx.params["paymentMethodId"])


async def _detach(ctx: RequestContext) -> Any:
    return await cards.detach(ctx.core.processor, ctx.core, ctx.actor, ctx.params["paymentMethodId"])


@routes.delete(
    "/me/billing/payment-methods/{paymentMethodId}",
    auth=AuthKind.SESSION,
    response=billing_schemas.PaymentMethodDeleted,
    prepare=_detach,
)
async def delete_payment_method(ctx: RequestContext) -> billing_schemas.PaymentMethodDeleted:
    """Remove a saved card (detached at the processor). Our id or the processor's.

    Removing the default card clears the default and turns auto top-up off, with autoTopupDisabledReason
    saying why."""
    return await cards.delete(ctx.session, ctx.actor, ctx.prepared)


# --- top-ups -------------------------------------------------------------------------------------------------


async def _prepare_topup(ctx: RequestContext) -> Any:
    return await topups.prepare_topup(
        ctx.core.processor,
        ctx.core,
        ctx.core.settings,
        ctx.actor,
        ctx.body,
        ctx.request.headers.get("idempotency-key"),
    )


@routes.post(
    "/me/billing/topup",
    auth=AuthKind.SESSION,
    body=billing_schemas.TopUpBody,
    response=billing_schemas.TopUpStarted,
    prepare=_prepare_topup,
)
async def top_up(ctx: RequestContext) -> billing_schemas.TopUpStarted:
    """Add money: a hosted checkout for amountCents (100 to 1,000,000); open its url and pay.

    Your balance grows when the processor reports the payment. Send an Idempotency-Key: a retry with the
    same key answers the same checkout."""
    row, checkout = ctx.prepared
    return await topups.record_checkout(ctx.session, row.id, checkout)


# --- the requester agent's card (the owner's session, under the agents' path) ----------------------------


@routes.get(
    "/api/v2/requester-agents/me/payment-method",
    auth=AuthKind.SESSION,
    response=billing_schemas.RequesterPaymentMethod,
)
async def requester_payment_method(ctx: RequestContext) -> billing_schemas.RequesterPaymentMethod:
    """Whether your paid jobs can be funded by card: ready, and the default saved card (or null)."""
    return await cards.requester_status(ctx.session, ctx.actor)


@routes.post(
    "/api/v2/requester-agents/me/payment-method/setup",
    auth=AuthKind.SESSION,
    body=billing_schemas.AddPaymentMethodBody,
    body_optional=True,
    response=billing_schemas.CardSetupStarted,
    prepare=_start_card_setup,
    name="requester_payment_method_setup",
)
async def requester_payment_method_setup(ctx: RequestContext) -> billing_schemas.CardSetupStarted:
    """Start saving a card for your paid jobs: the same as POST /me/billing/payment-methods."""
    return await _prepared(ctx)
