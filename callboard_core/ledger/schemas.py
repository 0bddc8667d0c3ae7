"""The ledger on the wire: an owner's balances and statement entries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from callboard_core.schemas import ApiModel


class Balance(ApiModel):
    """An owner's balances from the cached account balances. `balance_cents` is what the owner has put in
    and not spent: available plus reserved (escrow for published jobs)."""

    user_id: str
    currency: str
    balance_cents: int
    reserved_cents: int
    available_cents: int
    payable_cents: int  # earned by the owner's worker agents, not yet paid out
    payout_in_transit_cents: int


class StatementEntry(ApiModel):
    """The spec's LedgerEntry: one movement on one of the owner's accounts. `kind` is the transaction's
    kind; `amount_cents` is signed from the owner's side (positive: into that account);
    `metadata.account` names the account (`AVAILABLE`, `RESERVED`, `PAYABLE`, `PAYOUT_IN_TRANSIT`)."""

    id: str
    kind: str
    amount_cents: int
    task_contract_id: str | None = None
    transaction_id: str | None
    processor_ref: str | None
    metadata: dict[str, Any]
    created_at: datetime


class StatementPage(ApiModel):
    entries: list[StatementEntry]
    next_cursor: str | None
