"""The owner's documents: list (newest first, keyset cursor, kind filter) and get one.

Whose: always the acting owner's own (`billing.service.owner_of`: the signed-in person, else the API key's
owner; an unclaimed agent's key is 403 `agent_not_claimed`). Another owner's document is a 404
`document_not_found`, the same answer as a document that does not exist. Documents are issued by the ledger
hooks in `issue`; nothing here writes.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.billing.service import owner_of
from callboard_core.config import Settings
from callboard_core.documents.models import CommercialDocument as DocumentRow
from callboard_core.documents.models import DocumentKind
from callboard_core.documents.schemas import (
    DOCUMENTS_DEFAULT_LIMIT,
    DOCUMENTS_MAX_LIMIT,
    CommercialDocument,
    DocumentPage,
    Issuer,
)
from callboard_core.errors import NotFound, field_error
from callboard_core.pagination import decode_cursor, encode_cursor
from callboard_core.principals import Actor


def view(row: DocumentRow) -> CommercialDocument:
    return CommercialDocument(
        id=row.id,
        number=row.number,
        kind=DocumentKind(row.kind),
        status=row.status,
        currency=row.currency,
        subtotal_cents=row.subtotal_cents,
        tax_cents=row.tax_cents,
        total_cents=row.total_cents,
        task_contract_id=row.task_contract_id,
        transaction_id=row.transaction_id,
        ledger_entry_id=row.ledger_entry_id,
        source_type=row.source_type,
        source_id=row.source_id,
        # The wire keeps the spec's older names (bounty*); the columns say what they hold.
        bounty_id=row.job_id,
        bounty_payment_id=row.job_payment_id,
        bounty_payout_id=row.payout_id,
        bounty_settlement_entry_id=row.settlement_entry_id,
        processor_ref=row.processor_ref,
        counterparty_name=row.counterparty_name,
        counterparty_email=row.counterparty_email,
        tax_id=row.tax_id,
        vat_id=row.vat_id,
        payment_status=row.payment_status,
        refund_status=row.refund_status,
        line_items=list(row.line_items or []),
        metadata=dict(row.meta or {}),
        issued_at=row.issued_at,
        created_at=row.created_at,
    )


async def list_documents(
    session: AsyncSession,
    actor: Actor,
    *,
    cursor: str | None = None,
    limit: int = DOCUMENTS_DEFAULT_LIMIT,
    kind: DocumentKind | None = None,
) -> DocumentPage:
    """The acting owner's documents newest first (keyset on (issued_at, id), from the owner's index)."""
    if not 1 <= limit <= DOCUMENTS_MAX_LIMIT:
        raise field_error("limit", f"limit is 1-{DOCUMENTS_MAX_LIMIT}.", "invalid_limit")
    user_id = owner_of(actor)
    query = select(DocumentRow).where(DocumentRow.owner_user_id == user_id)
    if kind is not None:
        query = query.where(DocumentRow.kind == DocumentKind(kind))
    if cursor:
        at, ident = decode_cursor(cursor)
        query = query.where(
            or_(DocumentRow.issued_at < at, and_(DocumentRow.issued_at == at, DocumentRow.id < ident))
        )
    rows = list(
        await session.scalars(
            query.order_by(DocumentRow.issued_at.desc(), DocumentRow.id.desc()).limit(limit + 1)
        )
    )
    page = rows[:limit]
    last: tuple[datetime, str] | None = (page[-1].issued_at, page[-1].id) if len(rows) > limit else None
    return DocumentPage(
        documents=[view(row) for row in page],
        next_cursor=encode_cursor(*last) if last is not None else None,
    )


async def get_document(session: AsyncSession, actor: Actor, document_id: str) -> CommercialDocument:
    """One of the acting owner's documents; another owner's (or none) is 404 `document_not_found`."""
    user_id = owner_of(actor)
    row = await session.scalar(
        select(DocumentRow).where(DocumentRow.id == document_id, DocumentRow.owner_user_id == user_id)
    )
    if row is None:
        raise NotFound(
            "No such document among yours; list your documents to find its id.",
            code="document_not_found",
        )
    return view(row)


def issuer(settings: Settings) -> Issuer:
    """The issuer printed on every document: the address on lines split at ";" or a newline."""
    lines = [x.strip() for x in settings.issuer_address.replace("\n", ";").split(";") if x.strip()]
    return Issuer(name=settings.issuer_name, address_lines=lines, tax_id=settings.issuer_tax_id)
