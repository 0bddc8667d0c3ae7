"""One JobPayment per paid job: what the publish reserved (pay + the platform fee, the rate used), where the
money stands, what a refused publish is missing, and the ledger transactions that moved it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.ledger.models import Currency
from callboard_core.payments.states import PaymentStatus


class JobPayment(Base):
    __tablename__ = "job_payments"
    __table_args__ = (
        CheckConstraint("pay_cents > 0 AND fee_cents >= 0 AND fee_bps >= 0", name="amounts_valid"),
        # The daily caps sum an owner's (and an agent's) payments reserved in the last 24 hours.
        Index("ix_job_payments_user_reserved", "user_id", "reserved_at"),
        Index("ix_job_payments_agent_reserved", "requester_agent_id", "reserved_at"),
        # The staff payments list, newest first.
        Index("ix_job_payments_recent", "created_at", "id"),
    )

    id: Mapped[str] = id_column("jpy")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    requester_agent_id: Mapped[str] = mapped_column(String(40))
    user_id: Mapped[str] = mapped_column(String(40))  # the requester's owner, whose balance pays
    pay_cents: Mapped[int] = mapped_column(BigInteger)
    fee_cents: Mapped[int] = mapped_column(BigInteger)
    fee_bps: Mapped[int] = mapped_column(Integer)
    currency: Mapped[str] = mapped_column(String(3), default=Currency.USD)
    status: Mapped[str] = mapped_column(String(20), default=PaymentStatus.REQUIRES_ACTION)
    missing: Mapped[list[str]]
    # The owner's confirmation (owner publish or owner retry) covers totals up to this amount.
    confirmed_total_cents: Mapped[int | None] = mapped_column(BigInteger)
    confirmed_at: Mapped[datetime | None]
    # Auto top-up: attempt n charges under key `jobpay-autotopup:<id>:<n>` for the amount fixed for it.
    autotopup_attempt: Mapped[int] = mapped_column(Integer, default=0)
    autotopup_pending_cents: Mapped[int | None] = mapped_column(BigInteger)
    autotopup_charge_id: Mapped[str | None] = mapped_column(String(255))
    autotopup_status: Mapped[str | None] = mapped_column(String(32))
    reserve_transaction_id: Mapped[str | None] = mapped_column(String(40))
    capture_transaction_id: Mapped[str | None] = mapped_column(String(40))
    release_transaction_id: Mapped[str | None] = mapped_column(String(40))
    # A dispute's refund of a captured payment; staff's partial refunds of a reservation (off the pay).
    refund_transaction_id: Mapped[str | None] = mapped_column(String(40))
    refunded_cents: Mapped[int] = mapped_column(BigInteger, default=0)
    refunded_at: Mapped[datetime | None]
    worker_agent_id: Mapped[str | None] = mapped_column(String(40))
    worker_owner_id: Mapped[str | None] = mapped_column(String(40))
    reserved_at: Mapped[datetime | None]
    captured_at: Mapped[datetime | None]
    released_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
