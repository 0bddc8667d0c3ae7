"""What the payment processor tells us, as our own types: the only processor news a domain package reads.

Each adapter's webhook payload is turned into one of these by `processor/translate.py` (both adapters speak
Stripe's shapes: the sandbox mimics them), and the webhook intake publishes it on the bus, in the unit of
work that records the event once. A handler must converge: the processor may send an event twice, out of
order, or after the synchronous path (a confirm route, an off-session charge) already recorded the fact;
money moves only under the ledger's idempotency keys and states only by compare-and-set.

`metadata` is what we ourselves attached to the object when we created it (`purpose`, `topupId`,
`userId`, `attemptId`, `owner_ref`), never the processor's own data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from callboard_core.bus import Event
from callboard_core.processor.port import AccountStatus, PaymentMethodInfo


@dataclass(frozen=True, kw_only=True)
class ProcessorFact(Event):
    """Every processor fact carries its event's id and time (the processor's clock)."""

    event_id: str
    created: datetime


@dataclass(frozen=True, kw_only=True)
class CardAttached(ProcessorFact):
    """A card was attached to a customer (`payment_method.attached`)."""

    customer_id: str | None
    card: PaymentMethodInfo


@dataclass(frozen=True, kw_only=True)
class CardSetupSucceeded(ProcessorFact):
    """A hosted card form was completed (`setup_intent.succeeded`); `card` when the event carried its
    details, else only `payment_method_id` (the details come with `CardAttached`)."""

    setup_intent_id: str
    customer_id: str | None
    payment_method_id: str | None
    card: PaymentMethodInfo | None = None


@dataclass(frozen=True, kw_only=True)
class CardDetached(ProcessorFact):
    """A card was detached from the customer it belonged to (`payment_method.detached`)."""

    customer_id: str | None
    payment_method_id: str


@dataclass(frozen=True, kw_only=True)
class CheckoutCompleted(ProcessorFact):
    """A hosted checkout finished (`checkout.session.completed`): a payment (`mode` "payment", `paid` when
    the money arrived) or a card setup (`mode` "setup")."""

    checkout_id: str
    mode: str
    paid: bool
    payment_intent_id: str | None
    amount_cents: int
    customer_id: str | None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PaymentSucceeded(ProcessorFact):
    """A payment arrived (`payment_intent.succeeded`)."""

    payment_intent_id: str
    amount_cents: int
    customer_id: str | None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PaymentFailed(ProcessorFact):
    """A payment failed (`payment_intent.payment_failed`), with the processor's decline code."""

    payment_intent_id: str
    customer_id: str | None
    failure_code: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AccountUpdated(ProcessorFact):
    """A connected account's flags changed (`account.updated`)."""

    account_id: str
    status: AccountStatus
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class TransferReversed(ProcessorFact):
    """A transfer to a connected account was reversed (`transfer.reversed`)."""

    transfer_id: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AccountPayoutFailed(ProcessorFact):
    """A connected account's payout to its bank failed (`payout.failed`)."""

    account_id: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class AccountPayoutPaid(ProcessorFact):
    """A connected account's payout reached its bank (`payout.paid`)."""

    account_id: str
