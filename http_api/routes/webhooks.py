"""The payment processor's webhook (ours beyond the spec): the sandbox's worker and Stripe post here."""

from __future__ import annotations

from callboard_core.processor import intake
from callboard_core.processor.webhooks import SIGNATURE_HEADER
from http_api.endpoint import read_body
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("webhooks")


@routes.post(
    "/webhooks/processor", auth=AuthKind.PUBLIC, response=intake.WebhookAck, raw_body=True, idempotent=False
)
async def processor_webhook(ctx: RequestContext) -> intake.WebhookAck:
    """Receive one payment processor event, signed in the Stripe-Signature header.

    A bad or stale signature is 400 invalid_signature. Each event is handled once: a repeat answers 200 with
    duplicate=true and runs nothing; a type nobody handles is recorded and answered 200 with handled=false;
    a failing handler keeps nothing and answers 503 webhook_handler_failed, so the processor retries."""
    payload = await read_body(ctx.request)
    signature = ctx.request.headers.get(SIGNATURE_HEADER)
    return await intake.receive(ctx.session, ctx.core.processor, payload, signature)
