"""Stripe-shaped objects into our own types: the one place that reads a processor's JSON. Both adapters
speak Stripe's shapes (the sandbox mimics them), so both use this: their webhook events become the facts
of `processor/events.py`, their payment methods and accounts the port's dataclasses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from callboard_core.processor import events as ev
from callboard_core.processor.port import AccountStatus, PaymentMethodInfo, ProcessorEvent


def card_info(obj: Mapping[str, Any]) -> PaymentMethodInfo:
    """A payment method object as the port's PaymentMethodInfo."""
    card = obj.get("card") or {}
    return PaymentMethodInfo(
        id=str(obj["id"]),
        type=str(obj.get("type") or "card"),
        brand=card.get("brand"),
        last4=card.get("last4"),
        exp_month=card.get("exp_month"),
        exp_year=card.get("exp_year"),
        customer_id=obj.get("customer"),
    )


def account_status(obj: Mapping[str, Any]) -> AccountStatus:
    return AccountStatus(
        details_submitted=bool(obj.get("details_submitted")),
        charges_enabled=bool(obj.get("charges_enabled")),
        payouts_enabled=bool(obj.get("payouts_enabled")),
    )


def _id(value: Any) -> str | None:
    """An expandable field: the object's id, whether the event carried the object or its id."""
    if isinstance(value, dict):
        value = value.get("id")
    return str(value) if value else None


def _metadata(obj: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (obj.get("metadata") or {}).items() if v is not None}


def _card_attached(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    return ev.CardAttached(**base, customer_id=e.data.get("customer"), card=card_info(e.data))


def _setup_succeeded(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    pm = e.data.get("payment_method")
    return ev.CardSetupSucceeded(
        **base,
        setup_intent_id=str(e.data.get("id") or ""),
        customer_id=e.data.get("customer"),
        payment_method_id=_id(pm),
        card=card_info(pm) if isinstance(pm, dict) else None,
    )


def _card_detached(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    # Detached: the customer is gone from the object and shows in the previous attributes.
    customer = e.previous_attributes.get("customer") or e.data.get("customer")
    return ev.CardDetached(**base, customer_id=customer, payment_method_id=str(e.data["id"]))


def _checkout_completed(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    cs = e.data
    return ev.CheckoutCompleted(
        **base,
        checkout_id=str(cs.get("id") or ""),
        mode=str(cs.get("mode") or ""),
        paid=cs.get("payment_status") == "paid",
        payment_intent_id=_id(cs.get("payment_intent")),
        amount_cents=int(cs.get("amount_total") or 0),
        customer_id=_id(cs.get("customer")),
        metadata=_metadata(cs),
    )


def _payment_succeeded(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    pi = e.data
    return ev.PaymentSucceeded(
        **base,
        payment_intent_id=str(pi["id"]),
        amount_cents=int(pi.get("amount_received") or pi.get("amount") or 0),
        customer_id=_id(pi.get("customer")),
        metadata=_metadata(pi),
    )


def _payment_failed(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    pi = e.data
    return ev.PaymentFailed(
        **base,
        payment_intent_id=str(pi["id"]),
        customer_id=_id(pi.get("customer")),
        failure_code=str((pi.get("last_payment_error") or {}).get("code") or "payment_failed"),
        metadata=_metadata(pi),
    )


def _account_updated(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    return ev.AccountUpdated(
        **base,
        account_id=str(e.data.get("id") or e.account or ""),
        status=account_status(e.data),
        metadata=_metadata(e.data),
    )


def _transfer_reversed(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact:
    return ev.TransferReversed(**base, transfer_id=str(e.data.get("id") or ""), metadata=_metadata(e.data))


def _payout_failed(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact | None:
    if not e.account:  # the platform's own payout, not a connected account's
        return None
    reason = e.data.get("failure_message") or e.data.get("failure_code") or "the bank payout failed"
    return ev.AccountPayoutFailed(**base, account_id=e.account, reason=str(reason)[:500])


def _payout_paid(e: ProcessorEvent, base: dict[str, Any]) -> ev.ProcessorFact | None:
    return ev.AccountPayoutPaid(**base, account_id=e.account) if e.account else None


# The event types we act on; any other is recorded and ignored.
TRANSLATORS: dict[str, Callable[[ProcessorEvent, dict[str, Any]], ev.ProcessorFact | None]] = {
    "payment_method.attached": _card_attached,
    "setup_intent.succeeded": _setup_succeeded,
    "payment_method.detached": _card_detached,
    "checkout.session.completed": _checkout_completed,
    "payment_intent.succeeded": _payment_succeeded,
    "payment_intent.payment_failed": _payment_failed,
    "account.updated": _account_updated,
    "transfer.reversed": _transfer_reversed,
    "payout.failed": _payout_failed,
    "payout.paid": _payout_paid,
}


def fact_of(event: ProcessorEvent) -> ev.ProcessorFact | None:
    """The event as our own fact, or None for a type we do not act on."""
    translate = TRANSLATORS.get(event.type)
    return translate(event, {"event_id": event.id, "created": event.created}) if translate else None
