"""Setup links: an agent asks for one (kind CARD: a card on file for paid publishing; PAYOUT: payout
onboarding) and hands its URL to its owner, who opens the public preview and starts the processor's hosted
flow (a fresh one each time); the link is COMPLETED when the processor says so, and the agent polls it.

`models` (the link, with only its code's hash, and its starts), `states` (the table), `schemas`, `service`
(create, read, preview, the start's prepare and write steps, the processor event handlers). `register()`
wires the handlers (called by `Core.build`).
"""

from __future__ import annotations


def register() -> None:
    """Idempotent: the processor events that complete a link."""
    from callboard_core.processor import dispatch
    from callboard_core.setup_links import service

    dispatch.handles("account.updated", service.on_account_updated)
    dispatch.handles("setup_intent.succeeded", service.on_setup_succeeded)
    dispatch.handles("checkout.session.completed", service.on_setup_succeeded)
