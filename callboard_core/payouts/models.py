"""Payout accounts, payouts and their attempts.

Payouts and attempts reference users, agents and jobs by plain id (no foreign keys), as the ledger does:
a money record outlives, and must never cascade with, the rows it names. Payout accounts belong to their
owner (and agent) and go with them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.ledger.models import Currency
from callboard_core.payouts.states import AttemptStatus, PayoutStatus

AGENT_HOLDER, USER_HOLDER = "agent:", "user:"  # a holder key's prefixes


def holder_key(user_id: str, agent_id: str | None) -> str:
    """The one account per holder: `user:<id>` for the owner's own account, `agent:<id>` for an agent's."""
    return f"{AGENT_HOLDER}{agent_id}" if agent_id else f"{USER_HOLDER}{user_id}"


class PayoutAccount(Base):
    """A Connect account: the owner's own (agent_id null) or one agent's. The flags are the processor's,
    persisted from `account.updated` events and status refreshes (`status_at`: the newest fact applied)."""

    __tablename__ = "payout_accounts"
    __table_args__ = (Index("ix_payout_accounts_user", "user_id"),)

    id: Mapped[str] = id_column("pac")
    holder: Mapped[str] = mapped_column(String(48), unique=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    processor_account_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    details_submitted: Mapped[bool] = mapped_column(Boolean, default=False)
    charges_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    payouts_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    status_at: Mapped[datetime | None]
    # The processor's last failed bank payout from this account (`payout.failed`; cleared by `payout.paid`):
    # the money already left the platform, so nothing moves here; the holder must fix the bank details.
    bank_payout_error: Mapped[str | None] = mapped_column(Text)
    bank_payout_failed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class Payout(Base):
    """What an award owes the worker's owner, one per capture transaction, and where it stands."""

    __tablename__ = "payouts"
    __table_args__ = (
        # The worker's scan: due payouts by status and time.
        Index("ix_payouts_due", "status", "next_attempt_at"),
        Index("ix_payouts_user", "user_id", "created_at"),
    )

    id: Mapped[str] = id_column("pyo")
    user_id: Mapped[str] = mapped_column(String(40))  # the worker's owner, who is paid
    worker_agent_id: Mapped[str | None] = mapped_column(String(40))
    job_id: Mapped[str | None] = mapped_column(String(40))
    job_payment_id: Mapped[str | None] = mapped_column(String(40))
    capture_transaction_id: Mapped[str] = mapped_column(String(40), unique=True)
    amount_cents: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3), default=Currency.USD)
    status: Mapped[str] = mapped_column(String(24), default=PayoutStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    current_attempt_id: Mapped[str | None] = mapped_column(String(40))
    payout_account_id: Mapped[str | None] = mapped_column(String(40))  # the account paid (or being paid)
    processor_account_id: Mapped[str | None] = mapped_column(String(255))
    processor_transfer_id: Mapped[str | None] = mapped_column(String(255))
    paid_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class PayoutAttempt(Base):
    """One try at paying a payout. Its id keys the ledger (`payout:<id>`, `payout_outcome:<id>`) and the
    processor transfer (`payout:<id>`), so a repeat of the same try is harmless and a new try is new money
    movement only after the previous one failed."""

    __tablename__ = "payout_attempts"
    __table_args__ = (
        UniqueConstraint("payout_id", "number", name="uq_payout_attempts_payout_number"),
        Index("ix_payout_attempts_transfer", "processor_transfer_id"),
    )

    id: Mapped[str] = id_column("pat")
    payout_id: Mapped[str] = mapped_column(ForeignKey("payouts.id", ondelete="RESTRICT"))
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=AttemptStatus.SENDING)
    payout_account_id: Mapped[str] = mapped_column(String(40))
    processor_account_id: Mapped[str] = mapped_column(String(255))
    processor_transfer_id: Mapped[str | None] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()
    finished_at: Mapped[datetime | None]
