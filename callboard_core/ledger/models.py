"""The ledger's tables: accounts (with a cached balance), transactions and their immutable entries.

Sign convention: an account's balance is the sum of its entries; a positive entry adds to the account, a
negative one takes from it, and every transaction's entries sum to zero. Owner accounts hold what the
platform owes the owner (so they are never negative); PROCESSOR_CLEARING is the processor's side of the
books (a top-up takes from it, so it runs negative by the money that came in and has not gone out again).

The database refuses a transaction whose entries do not sum to zero (or number fewer than two) when it
commits (migration 0014: a deferred constraint trigger on PostgreSQL, a deferred foreign key on SQLite).

Entries and transactions are immutable: the ORM refuses to update or delete them (`before_update` and
`before_delete` raise) and the database refuses UPDATE with a trigger (PostgreSQL and SQLite, migration
0004), and DELETE too on PostgreSQL. A plain SQL DELETE stays possible on SQLite only because the test
suite wipes every table after each test that way (PostgreSQL's wipe is a TRUNCATE, which row triggers do
not see); no code path deletes ledger rows.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    String,
    UniqueConstraint,
    event,
)
from sqlalchemy.orm import Mapped, Mapper, mapped_column

from callboard_core.db import Base, id_column, now_column

PLATFORM_HOLDER = "platform"  # holder_id of the platform's accounts (one row per kind and currency)


class Currency(StrEnum):
    USD = "usd"


class AccountKind(StrEnum):
    OWNER_AVAILABLE = "OWNER_AVAILABLE"  # funds the owner may spend
    OWNER_RESERVED = "OWNER_RESERVED"  # escrow for the owner's published paid jobs
    OWNER_PAYABLE = "OWNER_PAYABLE"  # earned by the owner's worker agents, not yet paid out
    OWNER_PAYOUT_IN_TRANSIT = "OWNER_PAYOUT_IN_TRANSIT"  # sent to the processor, not yet settled
    PLATFORM_FEES = "PLATFORM_FEES"  # fee revenue
    PROCESSOR_CLEARING = "PROCESSOR_CLEARING"  # money at the processor: top-ups in, payouts and refunds out
    PLATFORM_ADJUSTMENTS = "PLATFORM_ADJUSTMENTS"  # staff adjustments and dispute resolutions

    @property
    def is_owner(self) -> bool:
        return self.startswith("OWNER_")

    @property
    def short(self) -> str:
        """The name an owner's statement shows (`AVAILABLE`, `RESERVED`, …)."""
        return self.removeprefix("OWNER_")


OWNER_KINDS = tuple(k for k in AccountKind if k.is_owner)
PLATFORM_KINDS = tuple(k for k in AccountKind if not k.is_owner)
# The platform's own side of the books may run negative; an owner's money and fee revenue may not.
NEGATIVE_ALLOWED = frozenset({AccountKind.PROCESSOR_CLEARING, AccountKind.PLATFORM_ADJUSTMENTS})


class TransactionKind(StrEnum):
    TOPUP = "TOPUP"
    RESERVE = "RESERVE"
    RELEASE = "RELEASE"
    CAPTURE = "CAPTURE"
    PAYOUT = "PAYOUT"
    PAYOUT_SETTLED = "PAYOUT_SETTLED"
    PAYOUT_FAILED = "PAYOUT_FAILED"
    PAYOUT_REVERSED = "PAYOUT_REVERSED"  # a settled transfer the processor took back (`reverses_id`)
    REFUND = "REFUND"
    ADJUSTMENT = "ADJUSTMENT"
    CAPTURE_REVERSED = "CAPTURE_REVERSED"  # a dispute gave an award's pay and fee back (`reverses_id`)


class LedgerAccount(Base):
    """One account per (kind, holder, currency). `balance_cents` is a cache of the sum of the account's
    entries, moved only by `ledger.service.post` (guarded compare-and-set) and proven by `verify`."""

    __tablename__ = "ledger_accounts"
    __table_args__ = (
        UniqueConstraint("kind", "holder_id", "currency", name="uq_ledger_accounts_kind_holder_currency"),
        Index("ix_ledger_accounts_holder", "holder_id"),
        CheckConstraint("allow_negative OR balance_cents >= 0", name="non_negative"),
    )

    id: Mapped[str] = id_column("lac")
    kind: Mapped[str] = mapped_column(String(32))
    # The owner's user id, or PLATFORM_HOLDER. No foreign key: ledger history outlives (and must never
    # cascade with, or block) the rows it refers to.
    holder_id: Mapped[str] = mapped_column(String(40))
    currency: Mapped[str] = mapped_column(String(3), default=Currency.USD)
    allow_negative: Mapped[bool] = mapped_column(Boolean, default=False)
    balance_cents: Mapped[int] = mapped_column(BigInteger, default=0)
    # How many entries have moved the balance: the same guarded UPDATE moves both, and each entry records
    # the version it made (`LedgerEntry.account_version`, unique per account).
    version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = now_column()


class LedgerTransaction(Base):
    """A balanced group of entries, posted once per idempotency key (built from our own ids)."""

    __tablename__ = "ledger_transactions"
    __table_args__ = (
        Index("ix_ledger_transactions_job", "job_id"),
        Index("ix_ledger_transactions_user", "user_id", "created_at"),
    )

    id: Mapped[str] = id_column("ltx")
    kind: Mapped[str] = mapped_column(String(24))
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    # References, not foreign keys (see LedgerAccount.holder_id).
    job_id: Mapped[str | None] = mapped_column(String(40))
    user_id: Mapped[str | None] = mapped_column(String(40))  # the owner the transaction concerns
    processor_ref: Mapped[str | None] = mapped_column(String(255))
    # The transaction this one reverses (a reversal is its own kind: PAYOUT_REVERSED).
    reverses_id: Mapped[str | None] = mapped_column(String(40))
    # `metadata` is taken on declarative classes: the attribute is `meta`, the column `metadata`.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    created_at: Mapped[datetime] = now_column()


class LedgerEntry(Base):
    """One signed movement on one account; immutable (see the module docstring)."""

    __tablename__ = "ledger_entries"
    __table_args__ = (
        # An owner's statement: each account's entries newest first, keyset on (created_at, id).
        Index("ix_ledger_entries_account", "account_id", "created_at", "id"),
        Index("ix_ledger_entries_transaction", "transaction_id"),
        Index("uq_ledger_entries_account_version", "account_id", "account_version", unique=True),
        CheckConstraint("amount_cents <> 0", name="non_zero"),
    )

    id: Mapped[str] = id_column("led")
    transaction_id: Mapped[str] = mapped_column(ForeignKey("ledger_transactions.id", ondelete="RESTRICT"))
    account_id: Mapped[str] = mapped_column(ForeignKey("ledger_accounts.id", ondelete="RESTRICT"))
    amount_cents: Mapped[int] = mapped_column(BigInteger)
    # The account's version this entry made and the balance it left: a balance is provably its last
    # entry's, and each entry's is the running sum of the account's entries in version order (`verify`).
    account_version: Mapped[int | None] = mapped_column(BigInteger)
    balance_after_cents: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = now_column()


class ImmutableLedgerRow(RuntimeError):
    """A code path tried to change a posted ledger row: a bug, never a client error."""


def _refuse_change(_mapper: Mapper[Any], _connection: Any, target: Any) -> None:
    raise ImmutableLedgerRow(
        f"{type(target).__name__} {target.id} is immutable; post a correcting transaction"
    )


for _model in (LedgerEntry, LedgerTransaction):
    event.listen(_model, "before_update", _refuse_change)
    event.listen(_model, "before_delete", _refuse_change)
