"""Commercial documents on the wire (the spec's CommercialDocument) and the list query."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from callboard_core.documents.models import DocumentKind
from callboard_core.schemas import ApiModel, QueryModel

DOCUMENTS_MAX_LIMIT = 100
DOCUMENTS_DEFAULT_LIMIT = 20


class CommercialDocument(ApiModel):
    """A receipt, invoice or credit note: amounts in positive whole cents (the kind says which way the money
    went), the ledger transaction and the owner's entry in it, what it is about (`sourceType`/`sourceId`, the
    job as `bountyId`), the counterparty as the owner's record read at issue time. `lineItems` is a list of
    {description, quantity, unitAmountCents, amountCents}. Immutable once issued."""

    id: str
    number: str
    kind: DocumentKind
    status: str
    currency: str
    subtotal_cents: int
    tax_cents: int
    total_cents: int
    task_contract_id: str | None
    transaction_id: str | None
    ledger_entry_id: str | None
    source_type: str | None
    source_id: str | None
    bounty_id: str | None
    bounty_payment_id: str | None
    bounty_payout_id: str | None
    bounty_settlement_entry_id: str | None
    processor_ref: str | None
    counterparty_name: str | None
    counterparty_email: str | None
    tax_id: str | None
    vat_id: str | None
    payment_status: str
    refund_status: str | None
    line_items: list[dict[str, Any]]
    metadata: dict[str, Any]
    issued_at: datetime
    created_at: datetime


class Issuer(ApiModel):
    """Who issues the documents (settings: CALLBOARD_ISSUER_NAME, _ADDRESS, _TAX_ID)."""

    name: str
    address_lines: list[str]
    tax_id: str | None


class DocumentPage(ApiModel):
    """The spec's document list: newest first; pass nextCursor back as cursor for the next page."""

    documents: list[CommercialDocument]
    next_cursor: str | None


class DocumentQuery(QueryModel):
    cursor: Annotated[str, StringConstraints(max_length=200)] | None = None
    limit: Annotated[int, Field(ge=1, le=DOCUMENTS_MAX_LIMIT)] = DOCUMENTS_DEFAULT_LIMIT
    kind: DocumentKind | None = None
