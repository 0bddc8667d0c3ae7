"""Webhook signatures, one code path for both adapters.

The sandbox signs its events exactly as Stripe does (`Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of
"<t>.<payload>" keyed by the webhook secret>`), and `parse_event` verifies either with the SDK's own
`stripe.Webhook.construct_event` (300 s tolerance). Signature timestamps are wall-clock time, not
`callboard_core.clock`: the SDK checks them against `time.time()`, and a signature is transport, not a
fact of the domain (tests that freeze the clock still deliver fresh webhooks).

The SDK is imported when first needed: it brings `requests` and its own API surface, about 25 MB that a
server which never signs or verifies a webhook (no paid activity yet) should not carry.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson

from callboard_core.processor.port import WEBHOOK_TOLERANCE_SECONDS, ProcessorEvent, invalid_signature

SIGNATURE_HEADER = "Stripe-Signature"


def sign(payload: bytes | str, secret: str, timestamp: int | None = None) -> str:
    """The `Stripe-Signature` header value for `payload`, as Stripe computes it."""
    import stripe

    text = payload.decode() if isinstance(payload, bytes) else payload
    return str(
        stripe.WebhookSignature.generate_signature_header(
            text, secret, timestamp=int(time.time()) if timestamp is None else timestamp
        )
    )


def parse_event(payload: bytes, signature_header: str | None, secret: str) -> ProcessorEvent:
    """Verify and decode a webhook body. A missing, malformed or wrong signature, one dated more than 300 s
    before or after now, or a body that is not an event, is 400 `invalid_signature`."""
    import stripe

    if not secret:
        raise invalid_signature("no webhook secret is configured")
    try:
        stripe.Webhook.construct_event(
            payload, signature_header, secret, tolerance=WEBHOOK_TOLERANCE_SECONDS, api_key="unused"
        )
    except stripe.SignatureVerificationError as exc:
        raise invalid_signature(str(exc)) from None
    except (ValueError, UnicodeDecodeError, IndexError):
        raise invalid_signature("the payload or the header is malformed") from None
    # The SDK refuses only signatures older than the tolerance; one dated in the future (a replay prepared
    # ahead, or a signer's clock far off) is refused beyond the same tolerance.
    if _signed_at(signature_header or "") > time.time() + WEBHOOK_TOLERANCE_SECONDS:
        raise invalid_signature("the signature's timestamp is in the future")
    try:
        body: Any = orjson.loads(payload)
        data = body["data"]
        return ProcessorEvent(
            id=str(body["id"]),
            type=str(body["type"]),
            data=dict(data["object"]),
            created=datetime.fromtimestamp(int(body["created"]), UTC),
            account=body.get("account"),
            previous_attributes=dict(data.get("previous_attributes") or {}),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise invalid_signature("the payload is not an event") from None


def event_body(
    event_id: str, event_type: str, obj: dict[str, Any], created: int, *, account: str | None = None
) -> dict[str, Any]:
    """A Stripe-shaped event object (API version pinned to the SDK's)."""
    import stripe

    body: dict[str, Any] = {
        "id": event_id,
        "object": "event",
        "api_version": stripe.api_version,
        "created": created,
        "data": {"object": obj},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "type": event_type,
    }
    if account:
        body["account"] = account
    return body


def _signed_at(signature_header: str) -> int:
    """The `t=` timestamp of a header the SDK has verified (so it is there and numeric)."""
    for part in signature_header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit():
            return int(value)
    return 0
