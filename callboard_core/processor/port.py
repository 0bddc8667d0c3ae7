"""The PaymentProcessor port: what the platform asks of its payment processor, and what it hears back.

Two adapters implement it and pass one contract suite (`tests/test_processor_contract.py`): `sandbox`
(the embedded default: a processor that behaves like the real one, its objects kept in our database and
its hosted pages served by this app) and `stripe` (the real one, through the `stripe` SDK).

Rules every adapter keeps:
- Money is integer cents (`amount_cents: int`) and a lowercase ISO currency; never a float.
- Every call that creates or moves something takes an `idempotency_key` that the caller derives from our
  own ids (`topup:<topup id>`, `payout:<payout id>`, …) and hands to the processor: the same call with the
  same key returns the same object and never creates a second one; the same key with other parameters is
  refused (409 `processor_idempotency_key_reused`).
- The processor never posts to the ledger. A caller posts after its own transaction has committed the
  fact (a webhook event handled, a payout row recorded), under the ledger's own idempotency key.
- Results are small frozen dataclasses, not the processor's objects; webhooks arrive as `ProcessorEvent`
  from `parse_event`, which verifies the Stripe-style signature (`t=…,v1=…`, 300 s tolerance) for both
  adapters alike (the sandbox signs its events exactly as Stripe does).
- Refusals are core errors: an unknown object is 404 `processor_object_not_found`, a request the
  processor refuses is 409 `processor_request_refused` (details: `processor_code`), an unreachable
  processor is `ProcessorUnavailable` (503). A declined off-session charge is not an error: it is a
  `Charge` with status `failed` and its `failure_code`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from callboard_core.errors import BadRequest, Conflict, NotFound, Unavailable

WEBHOOK_TOLERANCE_SECONDS = 300

ChargeStatus = Literal["succeeded", "requires_action", "failed"]
TransferStatus = Literal["paid", "reversed"]
ProcessorRefundStatus = Literal["pending", "succeeded", "failed", "canceled"]


@dataclass(frozen=True)
class CardSetup:
    """A hosted card form. `client_secret` is the setup's secret where the processor hands one out (the
    sandbox does; a hosted Stripe Checkout session in setup mode has none)."""

    id: str
    client_secret: str | None
    url: str


@dataclass(frozen=True)
class Checkout:
    """A hosted payment page (a top-up)."""

    id: str
    url: str


@dataclass(frozen=True)
class Charge:
    """An off-session payment (auto top-up). `failure_code` is the processor's decline code
    (`card_declined`, `authentication_required`, …) when the status is not `succeeded`."""

    id: str
    status: ChargeStatus
    failure_code: str | None = None


@dataclass(frozen=True)
class AccountLink:
    url: str
    expires_at: datetime


@dataclass(frozen=True)
class AccountStatus:
    details_submitted: bool
    charges_enabled: bool
    payouts_enabled: bool


@dataclass(frozen=True)
class Transfer:
    id: str
    status: TransferStatus


@dataclass(frozen=True)
class Refund:
    id: str
    status: ProcessorRefundStatus


@dataclass(frozen=True)
class PaymentMethodInfo:
    id: str
    type: str
    brand: str | None
    last4: str | None
    exp_month: int | None
    exp_year: int | None
    customer_id: str | None = None


@dataclass(frozen=True)
class ProcessorEvent:
    """A verified webhook event. `data` is the event's object (`data.object` in Stripe's shape);
    `account` is the connected account a Connect event concerns."""

    id: str
    type: str
    data: dict[str, Any]
    created: datetime
    account: str | None = None
    previous_attributes: dict[str, Any] = field(default_factory=dict)


class ProcessorUnavailable(Unavailable):
    """The processor could not be reached or failed on its side: retry later (the same idempotency key
    makes the retry safe)."""

    code = "processor_unavailable"
    message = "The payment processor is not available right now; retry later."


def invalid_signature(reason: str) -> BadRequest:
    return BadRequest(f"The webhook signature is not valid: {reason}", code="invalid_signature")


def key_reused(key: str) -> Conflict:
    return Conflict(
        "This idempotency key was already used with other parameters; derive a new key for a new request.",
        code="processor_idempotency_key_reused",
        idempotency_key=key,
    )


def object_missing(kind: str, object_id: str) -> NotFound:
    return NotFound(
        f"The payment processor has no {kind} {object_id}.",
        code="processor_object_not_found",
        object_id=object_id,
    )


def refused(message: str, processor_code: str | None = None) -> Conflict:
    return Conflict(
        f"The payment processor refused the request: {message}",
        code="processor_request_refused",
        processor_code=processor_code,
    )


@runtime_checkable
class PaymentProcessor(Protocol):
    """See the module docstring. `name` is the adapter (`sandbox` or `stripe`)."""

    name: str

    async def create_customer(self, user_id: str, email: str, *, idempotency_key: str) -> str: ...

    async def create_card_setup(
        self, customer_id: str, return_url: str, *, idempotency_key: str
    ) -> CardSetup: ...

    async def create_checkout(
        self,
        customer_id: str,
        amount_cents: int,
        currency: str,
        return_url: str,
        metadata: dict[str, str],
        *,
        idempotency_key: str,
    ) -> Checkout: ...

    async def charge_off_session(
        self,
        customer_id: str,
        payment_method_id: str,
        amount_cents: int,
        metadata: dict[str, str],
        *,
        idempotency_key: str,
        currency: str = "usd",
    ) -> Charge: ...

    async def create_connect_account(self, owner_ref: str, email: str, *, idempotency_key: str) -> str: ...

    async def create_account_link(
        self, account_id: str, return_url: str, refresh_url: str
    ) -> AccountLink: ...

    async def account_status(self, account_id: str) -> AccountStatus: ...

    async def transfer(
        self,
        account_id: str,
        amount_cents: int,
        currency: str,
        metadata: dict[str, str],
        *,
        idempotency_key: str,
    ) -> Transfer: ...

    async def refund(
        self, charge_or_payment_id: str, amount_cents: int, *, idempotency_key: str
    ) -> Refund: ...

    async def payment_method(self, pm_id: str) -> PaymentMethodInfo: ...

    async def detach_payment_method(self, pm_id: str) -> None: ...

    def parse_event(self, payload: bytes, signature_header: str) -> ProcessorEvent: ...

    async def aclose(self) -> None: ...
