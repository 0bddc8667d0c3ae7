"""Issuing documents from the ledger: each new posting of a kind below issues its documents in the posting's
own database transaction (`on_posted`, an in-transaction handler of `LedgerPosted`), so a document exists
exactly when its money moved. An idempotent replay of a posting publishes nothing (and the unique
(transaction, kind) index would refuse a second document anyway). What was issued is published as
`DocumentsIssued` (owner notifications listen). The documents of a posting that rides with the commit's
statement (an award's capture, PostgreSQL) are issued as the transaction's last work, like the posting, their
numbers carried by the award's closing statement (`numbering.Waiting`): no round trip of their own.

    TOPUP       RECEIPT to the owner: money received (processorRef: the payment intent), PAID.
    CAPTURE     INVOICE to the requester's owner for the platform fee (the service the platform sold; tax 0,
                none when the fee is 0), then a RECEIPT for the job payment (lines: job pay, platform fee),
                both PAID from escrow, linked to the job (bountyId) and its payment (bountyPaymentId).
    RELEASE     CREDIT_NOTE to the requester's owner: the escrow of a job that paid no one is back in the
                balance (lines: job pay and fee returned when the posting says them), REFUNDED.
    REFUND      CREDIT_NOTE: unspent balance went back to the card, REFUNDED.
    ADJUSTMENT  a credit to the owner is a CREDIT_NOTE, a debit an INVOICE (PAID from the balance).

RESERVE (escrow held, nothing sold yet) and the payout postings (the worker's own money leaving) issue none.
Each document links the ledger transaction and the owner's entry in it; amounts are positive cents.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock
from callboard_core.db.lookup import held
from callboard_core.db.rows import can_ride, insert_dicts_at_commit, naming_its_tables
from callboard_core.db.uow import at_commit as gather_at_commit
from callboard_core.documents.events import DocumentsIssued, IssuedDocument
from callboard_core.documents.models import (
    CommercialDocument,
    DocumentKind,
    DocumentPaymentStatus,
    DocumentRefundStatus,
    DocumentStatus,
    SourceType,
)
from callboard_core.documents.numbering import Waiting, next_numbers
from callboard_core.ids import new_id
from callboard_core.jobs.models import Job
from callboard_core.ledger.events import LedgerPosted
from callboard_core.ledger.models import (
    AccountKind,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    TransactionKind,
)
from callboard_core.users.models import User


@dataclass
class _Draft:
    """What differs between documents; `_issue` fills in the rest from the transaction and the owner."""

    kind: DocumentKind
    lines: list[dict[str, Any]]
    source_type: SourceType
    source_id: str | None
    payment_status: DocumentPaymentStatus
    refund_status: DocumentRefundStatus | None = None
    job_id: str | None = None
    job_payment_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def _line(kind: str, description: str, cents: int) -> dict[str, Any]:
    return {
        "kind": kind,
        "description": description,
        "quantity": 1,
        "unitAmountCents": cents,
        "amountCents": cents,
    }


Written = Sequence[tuple[LedgerAccount, LedgerEntry]]


async def _owner_entry(
    session: AsyncSession, txn: LedgerTransaction, account: AccountKind, written: Written | None
) -> tuple[str, int] | None:
    """(entry id, signed amount) of the owner's entry on `account` in the transaction; None when the posting
    moved no such account of its owner (a hand-made posting of the kind: nothing to document)."""
    if txn.user_id is None:
        return None
    if written is not None:  # the posting that just wrote them: no query
        for acct, entry in written:
            if acct.kind == account and acct.holder_id == txn.user_id:
                return entry.id, entry.amount_cents
        return None
    row = (
        await session.execute(
            select(LedgerEntry.id, LedgerEntry.amount_cents)
            .join(LedgerAccount, LedgerAccount.id == LedgerEntry.account_id)
            .where(
                LedgerEntry.transaction_id == txn.id,
                LedgerAccount.kind == account,
                LedgerAccount.holder_id == txn.user_id,
            )
        )
    ).first()
    return None if row is None else (str(row.id), int(row.amount_cents))


async def _job_title(session: AsyncSession, job_id: str | None) -> str:
    job = await session.get(Job, job_id) if job_id else None  # the award's job: in the identity map
    title = job.title if job is not None else None
    return f'"{title}"' if title else f"job {job_id}"


def _document(txn: LedgerTransaction, entry_id: str, draft: _Draft, number: str, user: Any) -> dict[str, Any]:
    """One document's row, numbered; `user` is the owner (None for a ledger-only user id: no counterparty).
    Column values, not a mapped object: the row is written once and never changed, and building the ORM
    object of a 30-column row cost more than its INSERT (~0.1 ms each, measured)."""
    assert txn.user_id is not None
    total = sum(int(line["amountCents"]) for line in draft.lines)
    meta = {**draft.meta, "ledgerTransactionKind": txn.kind}
    if user is not None and user.company:
        meta["company"] = user.company
    return {
        "id": new_id("doc"),  # now: a receipt names its invoice before either is written
        "number": number,
        "kind": str(draft.kind),
        "status": str(DocumentStatus.ISSUED),
        "currency": "usd",
        "owner_user_id": txn.user_id,
        "subtotal_cents": total,
        "tax_cents": 0,  # no sales tax or VAT is charged yet: explicit, not missing
        "total_cents": total,
        "task_contract_id": None,
        "transaction_id": txn.id,
        "ledger_entry_id": entry_id,
        "source_type": draft.source_type,
        "source_id": draft.source_id,
        "job_id": draft.job_id,
        "job_payment_id": draft.job_payment_id,
        "payout_id": None,
        "settlement_entry_id": None,
        "processor_ref": txn.processor_ref,
        "counterparty_name": (user.name or user.username) if user is not None else None,
        "counterparty_email": user.email if user is not None else None,
        "tax_id": None,  # the user record holds no tax or VAT id yet
        "vat_id": None,
        "payment_status": draft.payment_status,
        "refund_status": draft.refund_status,
        "line_items": draft.lines,
        "metadata": meta,
        "issued_at": txn.created_at,
        "created_at": clock.now(),
    }


# --- what each transaction kind issues -------------------------------------------------------------------
# A plan builds the drafts from the transaction and the signed amount of the owner's entry on its account.


async def _topup(session: AsyncSession, txn: LedgerTransaction, amount: int) -> list[_Draft]:
    return [
        _Draft(
            kind=DocumentKind.RECEIPT,
            lines=[_line("TOPUP", "Balance top-up", amount)],
            source_type=SourceType.TOPUP,
            source_id=txn.processor_ref,
            payment_status=DocumentPaymentStatus.PAID,
        )
    ]


async def _capture(session: AsyncSession, txn: LedgerTransaction, amount: int) -> list[_Draft]:
    pay, fee = int(txn.meta["payCents"]), int(txn.meta["feeCents"])
    title = await _job_title(session, txn.job_id)
    payment_id = txn.meta.get("jobPaymentId")

    def draft(kind: DocumentKind, lines: list[dict[str, Any]]) -> _Draft:
        return _Draft(
            kind=kind,
            lines=lines,
            source_type=SourceType.JOB_PAYMENT,
            source_id=payment_id or txn.job_id,
            payment_status=DocumentPaymentStatus.PAID,
            job_id=txn.job_id,
            job_payment_id=payment_id,
            meta={k: txn.meta[k] for k in ("workerAgentId",) if txn.meta.get(k)},
        )

    fee_line = _line("PLATFORM_FEE", f"Platform fee for {title}", fee)
    receipt = draft(DocumentKind.RECEIPT, [_line("JOB_PAY", f"Payment for {title}", pay)])
    if not fee:
        return [receipt]
    receipt.lines.append(fee_line)
    return [draft(DocumentKind.INVOICE, [fee_line]), receipt]


async def _release(session: AsyncSession, txn: LedgerTransaction, amount: int) -> list[_Draft]:
    if txn.meta.get("hold"):  # a dispute's hold going back: the owner's own money, never charged
        return []
    title = await _job_title(session, txn.job_id)
    pay, fee = txn.meta.get("payCents"), txn.meta.get("feeCents")
    if isinstance(pay, int) and isinstance(fee, int) and pay > 0 and fee >= 0 and pay + fee == amount:
        lines = [_line("JOB_PAY", f"Payment returned for {title}", pay)]
        if fee:
            lines.append(_line("PLATFORM_FEE", f"Platform fee returned for {title}", fee))
    else:  # the posting does not split the amount: one line for the whole escrow
        lines = [_line("ESCROW", f"Escrow returned for {title}", amount)]
    return [
        _Draft(
            kind=DocumentKind.CREDIT_NOTE,
            lines=lines,
            source_type=SourceType.JOB_RELEASE,
            source_id=txn.job_id,
            payment_status=DocumentPaymentStatus.CREDITED,
            refund_status=DocumentRefundStatus.REFUNDED,
            job_id=txn.job_id,
            job_payment_id=txn.meta.get("jobPaymentId"),
            meta={"creditedTo": "BALANCE"},
        )
    ]


async def _refund(session: AsyncSession, txn: LedgerTransaction, amount: int) -> list[_Draft]:
    return [
        _Draft(
            kind=DocumentKind.CREDIT_NOTE,
            lines=[_line("REFUND", "Unspent balance refunded to your card", -amount)],
            source_type=SourceType.REFUND,
            source_id=txn.processor_ref,
            payment_status=DocumentPaymentStatus.CREDITED,
            refund_status=DocumentRefundStatus.REFUNDED,
            meta={"creditedTo": "CARD"},
        )
    ]


async def _adjustment(session: AsyncSession, txn: LedgerTransaction, amount: int) -> list[_Draft]:
    reason = str(txn.meta.get("reason") or "")
    credit = amount > 0
    return [
        _Draft(
            kind=DocumentKind.CREDIT_NOTE if credit else DocumentKind.INVOICE,
            lines=[_line("ADJUSTMENT", f"Adjustment: {reason}", abs(amount))],
            source_type=SourceType.ADJUSTMENT,
            source_id=txn.id,
            payment_status=DocumentPaymentStatus.CREDITED if credit else DocumentPaymentStatus.PAID,
            job_id=txn.job_id,
            meta={"reason": reason},
        )
    ]


Plan = Callable[[AsyncSession, LedgerTransaction, int], Awaitable[list[_Draft]]]

# The transaction kind -> (the owner's account whose entry the documents link, the plan).
PLANS: dict[TransactionKind, tuple[AccountKind, Plan]] = {
    TransactionKind.TOPUP: (AccountKind.OWNER_AVAILABLE, _topup),
    TransactionKind.CAPTURE: (AccountKind.OWNER_RESERVED, _capture),
    TransactionKind.RELEASE: (AccountKind.OWNER_AVAILABLE, _release),
    TransactionKind.CAPTURE_REVERSED: (AccountKind.OWNER_AVAILABLE, _release),
    TransactionKind.REFUND: (AccountKind.OWNER_AVAILABLE, _refund),
    TransactionKind.ADJUSTMENT: (AccountKind.OWNER_AVAILABLE, _adjustment),
}


# What a document shows of its owner (not the whole account row): built once, every posting reads it.
# It names its one table: a posting waiting for the commit (`ledger._post_at_commit`) need not be written
# before it.
_COUNTERPARTY = naming_its_tables(
    select(User.name, User.username, User.email, User.company).where(User.id == bindparam("p_user"))
)


async def issue_for(
    session: AsyncSession, txn: LedgerTransaction, written: Written | None = None, *, at_commit: bool = False
) -> list[IssuedDocument]:
    """The documents of a new ledger transaction, issued in the caller's database transaction (`written`:
    the entries the posting wrote, when the caller has them). A receipt issued with an invoice in the same
    transaction names it (`metadata.invoiceNumber`). `at_commit` (the posting rides with the commit's
    statement, PostgreSQL, in a unit of work): they are issued as the transaction's last work, their numbers
    carried by a statement it sends anyway (an award's closing statement) or else taken then, and `[]` is
    returned now (`DocumentsIssued` is published then)."""
    account, plan = PLANS[TransactionKind(txn.kind)]
    found = await _owner_entry(session, txn, account, written)
    if found is None:
        return []
    entry_id, amount = found
    # Once for all the documents: the owner's name, username, email and company (the session's own copy
    # when the posting's caller read the account with its rows: an award reads the payer with its job).
    user: Any = None
    if txn.user_id:
        user = held(session, User, txn.user_id)
        if user is None:
            user = (await session.execute(_COUNTERPARTY, {"p_user": txn.user_id})).first()
    drafts = await plan(session, txn, amount)
    if not drafts:
        return []
    if at_commit and can_ride(session):  # as the posting itself waits (db/rows.ride_at_commit)
        waiting = Waiting(session, [draft.kind for draft in drafts], txn.created_at)
        await gather_at_commit(
            session, "documents", [_Unnumbered(txn, entry_id, drafts, user, waiting)], _issue_waiting
        )
        return []
    numbers = await next_numbers(session, [draft.kind for draft in drafts], txn.created_at)
    return await _issue(session, txn, entry_id, drafts, user, numbers)


@dataclass
class _Unnumbered:
    """A posting's documents waiting for the commit, and their numbers."""

    txn: LedgerTransaction
    entry_id: str
    drafts: list[_Draft]
    user: Any
    waiting: Waiting


async def _issue_waiting(session: AsyncSession, unnumbered: list[_Unnumbered]) -> None:
    """The transaction's last work: each waiting posting's documents, numbered (carried, or now)."""
    for each in unnumbered:
        numbers = await each.waiting.numbers(session)
        issued = await _issue(session, each.txn, each.entry_id, each.drafts, each.user, numbers)
        if issued:
            await bus.publish(session, DocumentsIssued(tuple(issued)))


async def _issue(
    session: AsyncSession,
    txn: LedgerTransaction,
    entry_id: str,
    drafts: list[_Draft],
    user: Any,
    numbers: list[str],
) -> list[IssuedDocument]:
    rows: list[dict[str, Any]] = []
    for draft, number in zip(drafts, numbers, strict=True):
        for earlier in rows:
            if earlier["kind"] == DocumentKind.INVOICE and draft.kind == DocumentKind.RECEIPT:
                draft.meta.update(invoiceId=earlier["id"], invoiceNumber=earlier["number"])
        rows.append(_document(txn, entry_id, draft, number, user))
    # Written with the transaction's last work (on PostgreSQL in its one statement, db/rows.py): nothing in
    # the issuing transaction reads them but a staff action, which writes them first (`write_gathered`).
    await insert_dicts_at_commit(session, cast(Table, CommercialDocument.__table__), rows)
    return [
        IssuedDocument(
            id=row["id"],
            number=row["number"],
            kind=row["kind"],
            owner_user_id=row["owner_user_id"],
            total_cents=row["total_cents"],
            currency=row["currency"],
        )
        for row in rows
    ]


async def on_posted(session: AsyncSession, event: LedgerPosted) -> None:
    """`LedgerPosted`: a posting of a documented kind issues its documents (other kinds issue none)."""
    if event.kind not in PLANS:
        return
    issued = await issue_for(session, event.transaction, event.entries, at_commit=event.at_commit)
    if issued:
        await bus.publish(session, DocumentsIssued(tuple(issued)))
