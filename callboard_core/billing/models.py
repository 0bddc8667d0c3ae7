"""The buyer profile: one row per user, created lazily (and race-safely) on the first read or write.

It holds settings only. The money figures of the BuyerBalance (balance, reserved, available) are read from
the ledger's accounts every time and are never stored here.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.ledger.models import Currency

MIN_AUTOTOPUP_AMOUNT_CENTS = 100  # a top-up below $1 costs more in processor fees than it brings
MAX_SETTING_CENTS = 1_000_000_000  # $10M: the ceiling of every cap, threshold and top-up amount


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
