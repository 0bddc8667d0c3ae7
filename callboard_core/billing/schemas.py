"""The buyer balance on the wire (the spec's BuyerBalanceSnapshot) and the owner's settings bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, StringConstraints

from callboard_core.billing.models import MAX_SETTING_CENTS, MAX_TOPUP_CENTS, MIN_AUTOTOPUP_AMOUNT_CENTS
from callboard_core.guidance import Hint
from callboard_core.ledger.schemas import Balance, StatementEntry
from callboard_core.ledger.service import STATEMENT_MAX_LIMIT
from callboard_core.schemas import ApiModel, QueryModel, SiteReturnUrl

# Whole cents; a string, a fraction or a boolean is refused rather than coerced.
SettingCents = Annotated[StrictInt, Field(ge=0, le=MAX_SETTING_CENTS)]
TopUpCents = Annotated[StrictInt, Field(ge=MIN_AUTOTOPUP_AMOUNT_CENTS, le=MAX_SETTING_CENTS)]


class PaymentMethod(ApiModel):
    """A saved card at the processor. `id` is ours, `processorPaymentMethodId` the processor's; the routes
    that name a card take either."""

    id: str
    processor_payment_method_id: str
    type: str | None
    brand: str | None
    last4: str | None
    exp_month: int | None
    exp_year: int | None
    is_default: bool


class BuyerBalance(ApiModel):
    """The owner's balance and billing settings. The money figures come from the ledger: `balance_cents` =
    available + reserved, `reserved_cents` is escrow for published paid jobs, `available_cents` may be spent.
    A null cap is no limit."""

    id: str
    user_id: str
    balance_cents: int
    reserved_cents: int
    available_cents: int
    currency: str
    auto_topup_enabled: bool
    processor_customer_id: str | None
    processor_default_payment_method_id: str | None
    auto_topup_threshold_cents: int | None
    auto_topup_amount_cents: int | None
    daily_spend_cap_cents: int | None
    per_task_cap_cents: int | None
    auto_topup_disabled_reason: str | None = None
    payment_methods: list[PaymentMethod] = Field(default_factory=list)


class LimitsUpdate(ApiModel):
    """Spend caps: a number sets the cap, null clears it (no limit), an omitted field stays as it is."""

    per_task_cap_cents: SettingCents | None = None
    daily_spend_cap_cents: SettingCents | None = None


class AutoTopupUpdate(ApiModel):
    """Turn auto top-up on or off. Threshold and amount: a number sets it, null clears it, omitted keeps it;
    enabling needs both (from the body or already set) and a default saved card."""

    enabled: StrictBool
    threshold_cents: SettingCents | None = None
    amount_cents: TopUpCents | None = None


class StatementQuery(QueryModel):
    cursor: Annotated[str, StringConstraints(max_length=200)] | None = None
    limit: Annotated[int, Field(ge=1, le=STATEMENT_MAX_LIMIT)] = 50


class BillingStatement(ApiModel):
    """The spec's statement response: the profile and one page of the owner's ledger entries, newest first."""

    profile: BuyerBalance
    entries: list[StatementEntry]
    next_cursor: str | None


# --- saved cards and top-ups -------------------------------------------------------------------------------

ProcessorId = Annotated[str, StringConstraints(min_length=1, max_length=255)]
HostedTopUpCents = Annotated[StrictInt, Field(ge=MIN_AUTOTOPUP_AMOUNT_CENTS, le=MAX_TOPUP_CENTS)]


class AddPaymentMethodBody(ApiModel):
    """Optional: where the hosted card form sends the owner back (this site's origin; default: home)."""

    return_url: SiteReturnUrl | None = None


class CardSetupStarted(ApiModel):
    """A card form at the processor: `clientSecret` for the processor's own card element (null where the
    processor hands out none), or open `url`, the hosted form. The card is mirrored when the processor
    reports it saved (or at once with POST /me/billing/payment-methods/confirm)."""

    client_secret: str | None
    customer_id: str
    url: str
    setup_id: str


class ConfirmPaymentMethodBody(ApiModel):
    """The processor's id of the card just saved (the `payment_method` of the confirmed SetupIntent)."""

    payment_method_id: ProcessorId


class PaymentMethodConfirmed(ApiModel):
    status: Literal["confirmed"] = "confirmed"
    payment_method: PaymentMethod
    profile: BuyerBalance


class DefaultPaymentMethodUpdated(ApiModel):
    status: Literal["updated"] = "updated"
    profile: BuyerBalance


class PaymentMethodDeleted(ApiModel):
    status: Literal["deleted"] = "deleted"


class TopUpBody(ApiModel):
    """Add money with a hosted checkout: whole cents, at least 100 ($1) and at most 1,000,000 ($10,000)."""

    amount_cents: HostedTopUpCents
    return_url: SiteReturnUrl | None = None


class TopUpView(ApiModel):
    id: str
    amount_cents: int
    status: Literal["PENDING", "SUCCEEDED", "FAILED"]
    failure_code: str | None
    created_at: datetime


class TopUpStarted(ApiModel):
    """The hosted checkout to pay: open `url`. The balance grows when the processor reports the payment."""

    url: str
    session_id: str
    topup_id: str


class RequesterPaymentMethod(ApiModel):
    """Whether the owner's paid jobs can be funded by card: `ready` when a default saved card exists
    (`paymentMethod`, else null); `setupRoute` names the route that starts a card setup."""

    ready: bool
    payment_method: PaymentMethod | None
    processor_customer_id: str | None
    auto_topup_enabled: bool
    setup_route: Hint


class BalanceRefundBody(ApiModel):
    """Refund part of an owner's unspent balance to the cards that paid it (staff)."""

    amount_cents: Annotated[int, Field(ge=1, le=10_000_000)]
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None,
        description="The same key again refunds once; it also finishes a refund the processor left pending.",
    )


class BalanceRefundPiece(ApiModel):
    id: str
    amount_cents: int
    status: Literal["PENDING", "SUCCEEDED", "FAILED"]
    processor_refund_id: str | None
    error: str | None
    created_at: datetime


class BalanceRefundResult(ApiModel):
    status: Literal["PENDING", "SUCCEEDED", "PARTIAL", "FAILED"] = Field(
        description="PENDING: the processor did not answer for a piece (its money stays held): repeat the "
        "request with the same idempotencyKey."
    )
    refunds: list[BalanceRefundPiece] = Field(description="One piece per card payment refunded.")
    balance: Balance
