"""Committed ledger postings counted on /metrics, by kind (a ledger hook: `register()` from `Core.build`).
The metrics module knows no domain; the ledger names its own kinds there."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import metrics
from callboard_core.db.uow import after_commit
from callboard_core.ledger import hooks
from callboard_core.ledger.models import LedgerTransaction, TransactionKind


async def _count_posting(session: AsyncSession, txn: LedgerTransaction) -> None:
    kind = TransactionKind(txn.kind)

    async def committed() -> None:
        metrics.MONEY_OPERATIONS.labels(kind=kind.value).inc()
        if kind is TransactionKind.PAYOUT_FAILED:
            metrics.PAYOUT_FAILURES.inc()

    if session.info.get("uow") is not None:
        after_commit(session, committed)
    else:  # a session of its own (the worker's short transactions): counted at posting
        await committed()


def register() -> None:
    """Count every ledger posting (idempotent); every kind shows from the first scrape, at 0."""
    for kind in TransactionKind:
        metrics.MONEY_OPERATIONS.labels(kind=kind.value)
        hooks.on_posted(kind, _count_posting)
