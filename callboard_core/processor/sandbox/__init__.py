"""The sandbox payment processor: the embedded default adapter (`CALLBOARD_PROCESSOR=sandbox`), beside the
Stripe adapter (`processor/stripe_adapter.py`). Production refuses to start with it unless
`CALLBOARD_ALLOW_SANDBOX_IN_PRODUCTION=true`.

`adapter` (the `SandboxProcessor`: the port's calls, the hosted pages' and Connect onboarding's actions, the
test levers), `models` (its own tables: objects, idempotency keys, the event outbox), `delivery` (the
worker posts the outbox to our own webhook, signed as Stripe signs). The pages themselves are served by the
HTTP front end (`http_api/routes/sandbox_pages.py`, mounted only with the sandbox).
"""

from callboard_core.processor.sandbox.adapter import (
    CARD_DECLINED,
    CARD_DECLINED_AFTER_ATTACH,
    CARD_OK,
    CARD_REQUIRES_ACTION,
    PAGE_PREFIX,
    PageOutcome,
    SandboxProcessor,
    card_details,
    mark_delivered,
    pending_events,
    sandbox_webhook_secret,
)

__all__ = [
    "CARD_DECLINED",
    "CARD_DECLINED_AFTER_ATTACH",
    "CARD_OK",
    "CARD_REQUIRES_ACTION",
    "PAGE_PREFIX",
    "PageOutcome",
    "SandboxProcessor",
    "card_details",
    "mark_delivered",
    "pending_events",
    "sandbox_webhook_secret",
]
