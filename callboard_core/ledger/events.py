"""What the ledger tells the rest of the core (through the bus; it knows no listener)."""

from __future__ import annotations

from dataclasses import dataclass

from callboard_core.bus import Event
from callboard_core.ledger.models import LedgerAccount, LedgerEntry, LedgerTransaction, TransactionKind


@dataclass(frozen=True)
class LedgerPosted(Event):
    """A transaction was written for the first time (an idempotent replay of its key publishes nothing),
    with the (account, entry) pairs it wrote, so listeners need no query to read them. `at_commit`: the
    posting rides with the transaction's last statement (`ledger._post_at_commit`): its entries are still to
    be written, and so may be what it issues (documents numbered then: `documents.issue`)."""

    transaction: LedgerTransaction
    entries: tuple[tuple[LedgerAccount, LedgerEntry], ...]
    at_commit: bool = False

    @property
    def kind(self) -> TransactionKind:
        return TransactionKind(self.transaction.kind)
