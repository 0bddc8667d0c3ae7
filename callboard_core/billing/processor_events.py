"""Which processor events billing handles (`Core.build` calls `register`, explicitly and idempotently)."""

from __future__ import annotations

from callboard_core.billing import cards, topups
from callboard_core.processor import dispatch


def register() -> None:
    dispatch.handles("payment_method.attached", cards.on_payment_method_attached)
    dispatch.handles("setup_intent.succeeded", cards.on_setup_intent_succeeded)
    dispatch.handles("payment_method.detached", cards.on_payment_method_detached)
    dispatch.handles("checkout.session.completed", topups.on_checkout_completed)
    dispatch.handles("payment_intent.succeeded", topups.on_payment_succeeded)
    dispatch.handles("payment_intent.payment_failed", topups.on_payment_failed)
