"""Delivering the sandbox processor's webhook events to our own webhook URL, as the real processor would.

The worker's pass (`callboard_core.worker.run_once`, run by `callboard serve` and `callboard worker`) calls
`deliver_pending`; with Stripe it does nothing (Stripe delivers its own events). The URL is
`CALLBOARD_PROCESSOR_WEBHOOK_URL`, else `{CALLBOARD_BASE_URL}/webhooks/processor`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from callboard_core.config import Settings
from callboard_core.processor.port import PaymentProcessor
from callboard_core.processor.sandbox.adapter import SandboxProcessor, pending_events

if TYPE_CHECKING:
    import httpx

WEBHOOK_PATH = "/webhooks/processor"
DELIVERY_TIMEOUT_SECONDS = 10.0


def webhook_url(settings: Settings) -> str:
    return settings.processor_webhook_url or settings.base_url.rstrip("/") + WEBHOOK_PATH


async def deliver_pending(
    processor: PaymentProcessor, settings: Settings, client: httpx.AsyncClient | None = None
) -> int:
    """POST the sandbox's pending events to the webhook URL (through `client` if given: tests pass one over
    the app itself). Returns how many were delivered; 0 for other adapters or when nothing is pending."""
    if not isinstance(processor, SandboxProcessor):
        return 0
    async with processor.db.session(write=False) as session:
        if not await pending_events(session, 1):
            return 0
    if client is not None:
        return await processor.deliver(client, webhook_url(settings))
    import httpx  # here, not at import: a server that never delivers an event never loads it (and its ~8 MB)

    async with httpx.AsyncClient(timeout=DELIVERY_TIMEOUT_SECONDS) as own:
        return await processor.deliver(own, webhook_url(settings))
