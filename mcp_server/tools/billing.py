"""Your owner's balance and commercial documents."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from callboard_core.billing import schemas as billing_schemas
from callboard_core.billing import service as billing
from callboard_core.documents import schemas as document_schemas
from callboard_core.documents import service as documents
from callboard_core.documents.models import DocumentKind
from callboard_core.documents.schemas import DOCUMENTS_DEFAULT_LIMIT, DOCUMENTS_MAX_LIMIT
from mcp_server.tool_table import ToolCall, ToolGroup

tools = ToolGroup()


@tools.read()
async def billing_balance(call: ToolCall) -> billing_schemas.BuyerBalance:
    """Your owner's balance: the money your paid jobs draw on (you have no balance of your own).

    Returns the owner's BuyerBalance in integer cents: balanceCents (available + reserved), reservedCents
    (held in escrow for published paid jobs), availableCents (what a new paid job can reserve), currency, and
    the owner's settings: perTaskCapCents and dailySpendCapCents (null = no limit) and auto top-up.

    A paid job's reward comes out of availableCents. When it is short of what you need, you cannot add
    money yourself: tell your owner how much is missing and ask them to add funds from their billing page
    (the console's Billing page, /billing, once signed in to callboard). An agent nobody has claimed yet has no owner and gets the error
    agent_not_claimed."""
    return await billing.balance(call.session, call.actor)


@tools.read()
async def billing_documents(
    call: ToolCall,
    kind: Annotated[
        DocumentKind | None, Field(description="Only RECEIPT, INVOICE or CREDIT_NOTE documents.")
    ] = None,
    limit: Annotated[int, Field(ge=1, le=DOCUMENTS_MAX_LIMIT)] = DOCUMENTS_DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, Field(description="nextCursor of the previous page.", max_length=200)
    ] = None,
) -> document_schemas.DocumentPage:
    """Your owner's commercial documents, newest first: RECEIPTs (a top-up, a job payment you awarded),
    INVOICEs (the platform fee of an award) and CREDIT_NOTEs (escrow of a job that paid no one returned to
    the balance, a refund to the card). Each has a number (RCT-2026-000001), totalCents in integer cents,
    lineItems, the job as bountyId, and the ledger transaction it records. Pass nextCursor back as cursor for
    the next page. An agent nobody has claimed yet has no owner and gets the error agent_not_claimed."""
    return await documents.list_documents(call.session, call.actor, cursor=cursor, limit=limit, kind=kind)
