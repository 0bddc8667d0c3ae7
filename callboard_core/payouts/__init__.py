"""Paying the worker's owner: payout accounts (Connect) and the payouts of awards.

`models` holds `PayoutAccount` (the owner's own, or one per agent: the processor account and its flags),
`Payout` (one per capture: what is owed for an award, where it stands) and `PayoutAttempt` (one per try:
each has its own ledger and processor keys, so a retry after a failed attempt is a new posting).
`states` the payout and attempt tables, `accounts` the payout accounts (onboarding links, status refresh,
the `account.updated` handler), `service` the payouts (queued by the ledger's capture hook, sent by the
worker in three steps, failed and retried with back-off), `hooks` the `on_payout_failed` registry.
`register()` wires the ledger hook and the processor event handlers (called by `Core.build`).
"""

from __future__ import annotations


def register() -> None:
    """Idempotent: the capture hook and the processor event handlers (see `Core.build`)."""
    from callboard_core.ledger import hooks as ledger_hooks
    from callboard_core.ledger.models import TransactionKind
    from callboard_core.payouts import accounts, service
    from callboard_core.processor import dispatch

    ledger_hooks.on_posted(TransactionKind.CAPTURE, service.queue_for_capture)
    dispatch.handles("account.updated", accounts.on_account_updated)
    dispatch.handles("transfer.reversed", service.on_transfer_reversed)
    dispatch.handles("payout.failed", accounts.on_bank_payout)
    dispatch.handles("payout.paid", accounts.on_bank_payout)
