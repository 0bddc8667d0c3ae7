"""Commercial documents and their numbering counters.

A document is issued once, in the database transaction of the ledger posting it describes, and never changes:
the ORM refuses to update or delete it (`before_update` / `before_delete` raise) and the database refuses
UPDATE with a trigger (PostgreSQL and SQLite, migration 0007) and DELETE too on PostgreSQL (as for the
ledger: SQLite's test wipe is a DELETE). A correction is a new document (a credit note), never an edit.

Links are plain ids, not foreign keys: a document outlives (and must never cascade with, or block the deletion
of) the user, job or ledger rows it names, as ledger rows do.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, Index, Integer, String, UniqueConstraint, event
from sqlalchemy.orm import Mapped, Mapper, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.ledger.models import Currency


class DocumentKind(StrEnum):
    RECEIPT = "RECEIPT"  # money the platform received from the owner (a top-up, a job payment)
    INVOICE = "INVOICE"  # a service the platform sold the owner (the platform fee; a staff debit)
    CREDIT_NOTE = "CREDIT_NOTE"  # money given back (escrow released, a refund to the card, a staff credit)

    @property
    def prefix(self) -> str:
        return NUMBER_PREFIX[self]


NUMBER_PREFIX = {DocumentKind.RECEIPT: "RCT", DocumentKind.INVOICE: "INV", DocumentKind.CREDIT_NOTE: "CRN"}


class DocumentStatus(StrEnum):
    ISSUED = "ISSUED"  # the only status: documents are immutable once issued


class DocumentPaymentStatus(StrEnum):
    PAID = "PAID"  # receipts and invoices: settled when issued (from the card or the balance)
    CREDITED = "CREDITED"  # credit notes: the amount went back to the balance or the card


class DocumentRefundStatus(StrEnum):
    REFUNDED = "REFUNDED"  # a credit note for escrow released or a refund to the card


class SourceType(StrEnum):
    """What the document is about (`sourceId` names it)."""

    TOPUP = "TOPUP"  # sourceId: the processor's payment intent
    JOB_PAYMENT = "JOB_PAYMENT"  # sourceId: the job payment (or the job when no payment id was given)
    JOB_RELEASE = "JOB_RELEASE"  # sourceId: the job whose escrow came back
    REFUND = "REFUND"  # sourceId: the processor's refund
    ADJUSTMENT = "ADJUSTMENT"  # sourceId: the ledger transaction


class CommercialDocument(Base):
    """One receipt, invoice or credit note of one owner, linked to its ledger transaction and the owner's
    entry in it. Amounts are positive whole cents; the kind says which way the money went."""

    __tablename__ = "commercial_documents"
    __table_args__ = (
        # The owner's documents newest first, keyset on (issued_at, id); with or without the kind filter.
        Index("ix_commercial_documents_owner", "owner_user_id", "issued_at", "id"),
        Index("ix_commercial_documents_owner_kind", "owner_user_id", "kind", "issued_at", "id"),
        # One document of a kind per ledger transaction: a second issue for the same posting cannot land.
        UniqueConstraint("transaction_id", "kind", name="uq_commercial_documents_transaction_kind"),
        CheckConstraint(
            "subtotal_cents >= 0 AND tax_cents >= 0 AND total_cents = subtotal_cents + tax_cents",
            name="amounts",
        ),
    )

    id: Mapped[str] = id_column("doc")
    number: Mapped[str] = mapped_column(String(32), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=DocumentStatus.ISSUED)
    currency: Mapped[str] = mapped_column(String(3), default=Currency.USD)
    owner_user_id: Mapped[str] = mapped_column(String(40))
    subtotal_cents: Mapped[int] = mapped_column(BigInteger)
    tax_cents: Mapped[int] = mapped_column(BigInteger, default=0)
    total_cents: Mapped[int] = mapped_column(BigInteger)
    task_contract_id: Mapped[str | None] = mapped_column(String(40))
    transaction_id: Mapped[str] = mapped_column(String(40))
    ledger_entry_id: Mapped[str | None] = mapped_column(String(40))
    source_type: Mapped[str | None] = mapped_column(String(24))
    source_id: Mapped[str | None] = mapped_column(String(255))
    job_id: Mapped[str | None] = mapped_column(String(40))
    job_payment_id: Mapped[str | None] = mapped_column(String(40))
    payout_id: Mapped[str | None] = mapped_column(String(40))
    settlement_entry_id: Mapped[str | None] = mapped_column(String(40))
    processor_ref: Mapped[str | None] = mapped_column(String(255))
    # The counterparty as the owner's user record read at issue time (a later rename does not reach it).
    counterparty_name: Mapped[str | None] = mapped_column(String(200))
    counterparty_email: Mapped[str | None] = mapped_column(String(320))
    tax_id: Mapped[str | None] = mapped_column(String(64))
    vat_id: Mapped[str | None] = mapped_column(String(64))
    payment_status: Mapped[str] = mapped_column(String(16))
    refund_status: Mapped[str | None] = mapped_column(String(16))
    line_items: Mapped[Any] = mapped_column(default=list)
    # `metadata` is taken on declarative classes: the attribute is `meta`, the column `metadata`.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    issued_at: Mapped[datetime] = now_column()
    created_at: Mapped[datetime] = now_column()


class DocumentCounter(Base):
    """The last number issued per (kind, year). Moved only by `numbering.next_number` (an atomic upsert in
    the issuing transaction), so numbers are gapless: a rolled-back posting takes its number back with it."""

    __tablename__ = "document_counters"

    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    year: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_number: Mapped[int] = mapped_column(BigInteger)


class ImmutableDocument(RuntimeError):
    """A code path tried to change an issued document: a bug, never a client error."""


def _refuse_change(_mapper: Mapper[Any], _connection: Any, target: Any) -> None:
    raise ImmutableDocument(f"document {target.number} is immutable; issue a credit note instead")


event.listen(CommercialDocument, "before_update", _refuse_change)
event.listen(CommercialDocument, "before_delete", _refuse_change)
