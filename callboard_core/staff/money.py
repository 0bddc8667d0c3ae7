"""Money moved by staff: a balance adjustment (ADMIN and SUPERADMIN). Both legs are in the ledger (the
owner's available balance against the platform's adjustments account); the ledger issues the document (a
credit note for a credit, an invoice for a debit); a debit never takes the balance below zero (409
`insufficient_funds`); the same `idempotencyKey` applies it once. Audited in the same transaction.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.audit import service as audit
from callboard_core.billing import refunds
from callboard_core.billing import schemas as billing_schemas
from callboard_core.billing import service as billing
from callboard_core.billing.models import BuyerProfile
from callboard_core.db.rows import write_gathered
from callboard_core.documents.models import CommercialDocument
from callboard_core.errors import NotFound
from callboard_core.ids import new_id
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerTransaction
from callboard_core.principals import Actor
from callboard_core.security.permissions import Permission
from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff.reports import transaction as transaction_detail
from callboard_core.users.models import User


async def _owner_of_profile(session: AsyncSession, profile_id: str) -> str:
    """The user a buyer profile id names: the row's, or (no row yet) the user whose id it is derived from."""
    user_id = await session.scalar(select(BuyerProfile.user_id).where(BuyerProfile.id == profile_id))
    if user_id is None and profile_id.startswith("bpf_"):
        candidate = "usr_" + profile_id.removeprefix("bpf_")
        if await session.get(User, candidate) is not None and billing.profile_id(candidate) == profile_id:
            user_id = candidate
    if user_id is None:
        raise NotFound("No such buyer profile.", code="buyer_profile_not_found", buyerProfileId=profile_id)
    return str(user_id)


async def refund_to_card(
    session: AsyncSession,
    core: refunds.RefundPorts,
    actor: Actor,
    profile_id: str,
    body: billing_schemas.BalanceRefundBody,
) -> tuple[str, str]:
    """Refund part of the owner's unspent balance to the cards that paid it (billing/refunds.py): its
    steps run in their own units of work around the processor's calls. (The user's id, the request key.)"""
    actor.require(Permission.ADJUST_BALANCE)
    user_id = await _owner_of_profile(session, profile_id)
    return user_id, await refunds.run(core, actor, user_id, body)


async def adjust(
    session: AsyncSession, actor: Actor, profile_id: str, body: staff_schemas.AdjustmentBody
) -> staff_schemas.Adjusted:
    actor.require(Permission.ADJUST_BALANCE)
    user_id = await _owner_of_profile(session, profile_id)
    before = (await ledger.balances(session, user_id)).available_cents
    key = f"staff_adjustment:{profile_id}:{body.idempotency_key or new_id('adj')}"
    replay = await session.scalar(
        select(LedgerTransaction.id).where(LedgerTransaction.idempotency_key == key)
    )
    txn = await ledger.adjust(
        session,
        user_id=user_id,
        amount_cents=body.amount_cents,
        key=key,
        reason=body.reason,
        staff_user_id=actor.user_id,
    )
    balance = await ledger.balances(session, user_id)
    await write_gathered(session)  # the posting's documents, written with the commit otherwise
    document = await session.scalar(
        select(CommercialDocument).where(CommercialDocument.transaction_id == txn.id)
    )
    if replay is None:  # a retry answers the first adjustment and audits nothing twice
        audit.by(
            session,
            actor,
            "buyer_profile.adjusted",
            "buyer_profile",
            profile_id,
            userId=user_id,
            amountCents=body.amount_cents,
            reason=body.reason,
            transactionId=txn.id,
            before=before,
            after=balance.available_cents,
        )
    return staff_schemas.Adjusted(
        transaction=(await transaction_detail(session, txn.id)).transaction,
        balance=balance,
        document=staff_schemas.IssuedDocument(id=document.id, kind=document.kind, number=document.number)
        if document is not None
        else None,
    )
