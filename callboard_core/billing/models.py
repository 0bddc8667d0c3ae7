"""The buyer profile: one row per user, created lazily (and race-safely) on the first read or write.

It holds settings only. The money figures of the BuyerBalance (balance, reserved, available) are read from
the ledger's accounts every time and are never stored here.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, Boolean, CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.ledger.models import Currency

MIN_AUTOTOPUP_AMOUNT_CENTS = 100  # a top-up below $1 costs more in processor fees than it brings
MAX_SETTING_CENTS = 1_000_000_000  # $10M: the ceiling of every cap, threshold and top-up amount
MAX_TOPUP_CENTS = 1_000_000  # $10,000: one hosted top-up at most (a larger sum is several, or a transfer)


class BuyerProfile(Base):
    """An owner's billing settings. A null cap is no limit. The processor fields stay null until the
    payment processor step attaches a customer and a default card."""

    __tablename__ = "buyer_profiles"
    __table_args__ = (
        CheckConstraint(
            "(per_task_cap_cents IS NULL OR per_task_cap_cents >= 0) "
            "AND (daily_spend_cap_cents IS NULL OR daily_spend_cap_cents >= 0)",
            name="caps_non_negative",
        ),
        CheckConstraint(
            "per_task_cap_cents IS NULL OR daily_spend_cap_cents IS NULL "
            "OR per_task_cap_cents <= daily_spend_cap_cents",
            name="per_task_cap_within_daily_cap",
        ),
        CheckConstraint(
            "autotopup_threshold_cents IS NULL OR autotopup_threshold_cents >= 0",
            name="autotopup_threshold_non_negative",
        ),
        CheckConstraint(
            f"autotopup_amount_cents IS NULL OR autotopup_amount_cents >= {MIN_AUTOTOPUP_AMOUNT_CENTS}",
            name="autotopup_amount_minimum",
        ),
        CheckConstraint(
            "NOT autotopup_enabled OR (autotopup_threshold_cents IS NOT NULL "
            "AND autotopup_amount_cents IS NOT NULL AND processor_default_payment_method_id IS NOT NULL)",
            name="autotopup_complete",
        ),
    )

    id: Mapped[str] = id_column("bpf")
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), unique=True)
    # The processor's customer (one per owner) and the owner's default saved card there.
    processor_customer_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    processor_default_payment_method_id: Mapped[str | None] = mapped_column(String(255))
    autotopup_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    autotopup_threshold_cents: Mapped[int | None] = mapped_column(BigInteger)
    autotopup_amount_cents: Mapped[int | None] = mapped_column(BigInteger)
    # Why the platform turned auto top-up off (a declined charge, the default card removed); the owner
    # clears it by disabling or enabling auto top-up.
    autotopup_disabled_reason: Mapped[str | None] = mapped_column(String(500))
    daily_spend_cap_cents: Mapped[int | None] = mapped_column(BigInteger)
    per_task_cap_cents: Mapped[int | None] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3), default=Currency.USD)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class SavedCard(Base):
    """The mirror of a card saved at the processor for an owner (`payment_methods`). A removed card's row is
    deleted: the processor keeps its history, the mirror holds what the owner can use now."""

    __tablename__ = "payment_methods"
    __table_args__ = (Index("ix_payment_methods_user", "user_id", "created_at"),)

    id: Mapped[str] = id_column("bpm")
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    processor_payment_method_id: Mapped[str] = mapped_column(String(255), unique=True)
    type: Mapped[str | None] = mapped_column(String(40))
    brand: Mapped[str | None] = mapped_column(String(40))
    last4: Mapped[str | None] = mapped_column(String(4))
    exp_month: Mapped[int | None] = mapped_column(Integer)
    exp_year: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = now_column()


class TopUpStatus(StrEnum):
    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


# target -> the states it may be reached from. A failed payment leaves the hosted checkout open: paying it
# with another card still succeeds the top-up.
TOPUP_MOVES: dict[TopUpStatus, frozenset[TopUpStatus]] = {
    TopUpStatus.SUCCEEDED: frozenset({TopUpStatus.PENDING, TopUpStatus.FAILED}),
    TopUpStatus.FAILED: frozenset({TopUpStatus.PENDING}),
}


class TopUp(Base):
    """An owner's top-up through a hosted checkout. `request_key` (the owner's Idempotency-Key, hashed)
    makes a retried request find the same row, hence the same processor idempotency key and session."""

    __tablename__ = "topups"
    __table_args__ = (
        CheckConstraint("amount_cents > 0", name="amount_positive"),
        Index("ix_topups_user", "user_id", "created_at"),
    )

    id: Mapped[str] = id_column("tup")
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    amount_cents: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3), default=Currency.USD)
    status: Mapped[str] = mapped_column(String(16), default=TopUpStatus.PENDING)
    request_key: Mapped[str | None] = mapped_column(String(64), unique=True)
    checkout_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    payment_intent_id: Mapped[str | None] = mapped_column(String(255))
    ledger_transaction_id: Mapped[str | None] = mapped_column(String(40))
    failure_code: Mapped[str | None] = mapped_column(String(80))
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class BalanceRefundStatus(StrEnum):
    PENDING = "PENDING"  # held from the balance; the processor has not answered yet (a retry finishes it)
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the processor refused: the hold went back to the balance


BALANCE_REFUND_MOVES: dict[BalanceRefundStatus, frozenset[BalanceRefundStatus]] = {
    BalanceRefundStatus.SUCCEEDED: frozenset({BalanceRefundStatus.PENDING}),
    BalanceRefundStatus.FAILED: frozenset({BalanceRefundStatus.PENDING}),
}


class BalanceRefund(Base):
    """One piece of a staff refund of an owner's unspent balance to the card that paid it: each piece refunds
    (part of) one card payment (a top-up's ledger transaction), under its own processor idempotency key."""

    __tablename__ = "balance_refunds"
    __table_args__ = (
        CheckConstraint("amount_cents > 0", name="amount_positive"),
        Index("ix_balance_refunds_request", "request_key"),
        Index("ix_balance_refunds_source", "source_transaction_id"),
    )

    id: Mapped[str] = id_column("brf")
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    request_key: Mapped[str] = mapped_column(String(200))  # the staff request's key: its pieces share it
    source_transaction_id: Mapped[str] = mapped_column(String(40))  # the TOPUP transaction refunded
    processor_payment_ref: Mapped[str] = mapped_column(String(255))  # its payment intent or charge
    amount_cents: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16), default=BalanceRefundStatus.PENDING)
    processor_refund_id: Mapped[str | None] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    staff_user_id: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
