"""The sandbox processor's hosted pages (served only when `CALLBOARD_PROCESSOR=sandbox`): what Stripe's
hosted Checkout is with the real processor. Exactly the URLs `SandboxProcessor` hands out: the card form
(`/sandbox/processor/setup/{id}`, a Checkout Session in setup mode), the payment page
(`/sandbox/processor/checkout/{id}`), and the authentication step a payment may need
(`/sandbox/processor/action/{payment intent id}`, where the payment page sends the customer).

A form post acts in the route's `prepare` step, before the write unit of work (the sandbox writes in its own
transaction, as a remote processor would), after the same origin check as the sign-in form; the handler
then redirects to the flow's return URL or shows the decline. The page id is the capability, as with the
processor's own hosted pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from callboard_core.errors import CallboardError, NotFound, ValidationFailed
from callboard_core.processor.sandbox import PAGE_PREFIX, PageOutcome, SandboxProcessor
from http_api.auth import check_origin
from http_api.errors import status_for
from http_api.pages_support import ErrorPage, read_form, redirect, render, shows_errors
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("sandbox")
PAGE_ERROR = ErrorPage("message.html", title="This payment page cannot be used")
DECLINED = {
    "card_declined": "Your card was declined (card_declined). Try another card.",
    "authentication_required": "This card needs authentication (authentication_required).",
}


@dataclass(frozen=True)
class Submitted:
    """What a form post did at the sandbox: its outcome and where the flow returns, or the refusal."""

    outcome: PageOutcome | None = None
    return_url: str | None = None
    refused: CallboardError | None = None
    card_number: str = ""


def _sandbox(ctx: RequestContext) -> SandboxProcessor:
    processor = ctx.core.processor
    if not isinstance(processor, SandboxProcessor):
        raise NotFound("No such route.", code="not_found")
    return processor


def _money(cs: dict[str, Any]) -> str | None:
    if cs.get("amount_total") is None:
        return None
    return f"{cs['amount_total'] / 100:,.2f} {str(cs['currency']).upper()}"


async def _session(ctx: RequestContext, mode: str, param: str) -> dict[str, Any]:
    cs = await _sandbox(ctx).hosted_object("checkout.session", ctx.params[param])
    if cs["mode"] != mode:
        raise NotFound("No such payment page.", code="processor_object_not_found")
    return cs


def _form(ctx: RequestContext, mode: str, cs_id: str, cs: dict[str, Any], **extra: Any) -> Response:
    setup = mode == "setup"
    status = int(extra.pop("status", 200))
    context: dict[str, Any] = {
        "heading": "Save a card" if setup else "Pay",
        "amount": None if setup else _money(cs),
        "action_url": f"{PAGE_PREFIX}/{mode}/{cs_id}",
        "card_field": True,
        "button": "Save card" if setup else "Pay",
        "closed": None if cs["status"] == "open" else "This page was already completed.",
    }
    context.update(extra)
    return render(ctx, "sandbox_processor.html", status, **context)


async def _submit(ctx: RequestContext, act: Any) -> Submitted:
    """Run a page action in the prepare step; a refusal is kept for the page to show."""
    form = await read_form(ctx)
    card = form.get("card_number", "")
    try:
        check_origin(ctx.request, ctx.core, required=False)
        outcome, return_url = await act(_sandbox(ctx), card)
    except CallboardError as exc:
        return Submitted(refused=exc, card_number=card)
    return Submitted(outcome=outcome, return_url=return_url, card_number=card)


def _shown(ctx: RequestContext, mode: str, cs_id: str, cs: dict[str, Any], done: Submitted) -> Response:
    """After a post: the return URL on success, else the form again with the decline or refusal."""
    if done.refused is not None:
        if not isinstance(done.refused, ValidationFailed):
            raise done.refused
        return _form(
            ctx,
            mode,
            cs_id,
            cs,
            error=done.refused.message,
            card_number=done.card_number,
            status=status_for(done.refused),
        )
    assert done.outcome is not None
    if done.outcome.status == "requires_action" and done.outcome.payment_intent:
        return redirect(f"{PAGE_PREFIX}/action/{done.outcome.payment_intent}")
    if done.outcome.status == "failed":
        code = done.outcome.failure_code or "payment_failed"
        message = DECLINED.get(code, f"The payment failed ({code}). Try another card.")
        return _form(ctx, mode, cs_id, cs, error=message, status=402)
    assert done.return_url is not None
    return redirect(done.return_url)


# --- the card form -------------------------------------------------------------------------------------------


@routes.get(f"{PAGE_PREFIX}/setup/{{setupId}}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def sandbox_setup_page(ctx: RequestContext) -> Response:
    """The sandbox's hosted card form."""
    return _form(ctx, "setup", ctx.params["setupId"], await _session(ctx, "setup", "setupId"))


async def _complete_setup(ctx: RequestContext) -> Submitted:
    setup_id = ctx.params["setupId"]

    async def act(processor: SandboxProcessor, card: str) -> tuple[PageOutcome, str]:
        cs = await processor.hosted_object("checkout.session", setup_id)
        return await processor.complete_card_setup(setup_id, card), str(cs["success_url"])

    return await _submit(ctx, act)


@routes.post(
    f"{PAGE_PREFIX}/setup/{{setupId}}",
    auth=AuthKind.PUBLIC,
    page=True,
    idempotent=False,
    prepare=_complete_setup,
)
@shows_errors(PAGE_ERROR)
async def sandbox_setup_submit(ctx: RequestContext) -> Response:
    """Save the card typed into the form (declined cards are refused and shown)."""
    cs = await _session(ctx, "setup", "setupId")
    return _shown(ctx, "setup", ctx.params["setupId"], cs, ctx.prepared)


# --- the payment page ----------------------------------------------------------------------------------------


@routes.get(f"{PAGE_PREFIX}/checkout/{{checkoutId}}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def sandbox_checkout_page(ctx: RequestContext) -> Response:
    """The sandbox's hosted payment page."""
    return _form(ctx, "checkout", ctx.params["checkoutId"], await _session(ctx, "payment", "checkoutId"))


async def _complete_checkout(ctx: RequestContext) -> Submitted:
    checkout_id = ctx.params["checkoutId"]

    async def act(processor: SandboxProcessor, card: str) -> tuple[PageOutcome, str]:
        cs = await processor.hosted_object("checkout.session", checkout_id)
        return await processor.complete_checkout(checkout_id, card), str(cs["success_url"])

    return await _submit(ctx, act)


@routes.post(
    f"{PAGE_PREFIX}/checkout/{{checkoutId}}",
    auth=AuthKind.PUBLIC,
    page=True,
    idempotent=False,
    prepare=_complete_checkout,
)
@shows_errors(PAGE_ERROR)
async def sandbox_checkout_submit(ctx: RequestContext) -> Response:
    """Pay with the card typed into the form: paid, declined (shown; the page stays open), or on to
    the authentication step."""
    cs = await _session(ctx, "payment", "checkoutId")
    return _shown(ctx, "checkout", ctx.params["checkoutId"], cs, ctx.prepared)


# --- the authentication step ---------------------------------------------------------------------------------


async def _action_context(ctx: RequestContext) -> tuple[dict[str, Any], str | None]:
    """The payment waiting for authentication, and where its checkout returns (None: an off-session one)."""
    processor = _sandbox(ctx)
    pi = await processor.hosted_object("payment_intent", ctx.params["paymentIntentId"])
    cs_id = pi.get("_checkout_session")
    cs = await processor.hosted_object("checkout.session", cs_id) if cs_id else None
    return pi, (str(cs["success_url"]) if cs else None)


def _action_form(ctx: RequestContext, pi: dict[str, Any], **extra: Any) -> Response:
    status = int(extra.pop("status", 200))
    return render(
        ctx,
        "sandbox_processor.html",
        status,
        heading="Confirm the payment",
        amount=f"{pi['amount'] / 100:,.2f} {str(pi['currency']).upper()}",
        action_url=f"{PAGE_PREFIX}/action/{pi['id']}",
        card_field=False,
        button="Complete authentication",
        closed=None if pi["status"] == "requires_action" else "This payment needs no authentication now.",
        **extra,
    )


@routes.get(f"{PAGE_PREFIX}/action/{{paymentIntentId}}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def sandbox_action_page(ctx: RequestContext) -> Response:
    """The sandbox's authentication step (3-D Secure) for a payment that needs it."""
    pi, _ = await _action_context(ctx)
    return _action_form(ctx, pi)


async def _complete_action(ctx: RequestContext) -> Submitted:
    async def act(processor: SandboxProcessor, _card: str) -> tuple[PageOutcome, str | None]:
        _, return_url = await _action_context(ctx)
        return await processor.complete_action(ctx.params["paymentIntentId"]), return_url

    return await _submit(ctx, act)


@routes.post(
    f"{PAGE_PREFIX}/action/{{paymentIntentId}}",
    auth=AuthKind.PUBLIC,
    page=True,
    idempotent=False,
    prepare=_complete_action,
)
@shows_errors(PAGE_ERROR)
async def sandbox_action_submit(ctx: RequestContext) -> Response:
    """Pass the authentication: the payment succeeds and the customer returns to the checkout's return URL."""
    done: Submitted = ctx.prepared
    if done.refused is not None:
        raise done.refused
    if done.return_url is None:
        pi, _ = await _action_context(ctx)
        return _action_form(ctx, pi)
    return redirect(done.return_url)
