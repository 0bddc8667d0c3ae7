"""Committed ledger postings counted on /metrics, by kind (an after-commit handler of `LedgerPosted`).
The metrics module knows no domain; the ledger names its own kinds there."""

from __future__ import annotations

from callboard_core import metrics
from callboard_core.ledger.events import LedgerPosted
from callboard_core.ledger.models import TransactionKind


def declare() -> None:
    """Every kind shows from the first scrape, at 0."""
    for kind in TransactionKind:
        metrics.MONEY_OPERATIONS.labels(kind=kind.value)


async def count_posting(event: LedgerPosted) -> None:
    metrics.MONEY_OPERATIONS.labels(kind=event.kind.value).inc()
    if event.kind is TransactionKind.PAYOUT_FAILED:
        metrics.PAYOUT_FAILURES.inc()
