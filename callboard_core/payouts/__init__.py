"""Paying the worker's owner: payout accounts (Connect) and the payouts of awards.

`models` holds `PayoutAccount` (the owner's own, or one per agent: the processor account and its flags),
`Payout` (one per capture: what is owed for an award, where it stands) and `PayoutAttempt` (one per try:
each has its own ledger and processor keys, so a retry after a failed attempt is a new posting).
`states` the payout and attempt tables, `accounts` the payout accounts (onboarding links, status refresh,
the processor's account events), `service` the payouts (queued when the ledger posts a capture, sent by the
worker in three steps, failed and retried with back-off), `events` what they publish (`PayoutFailed`,
`BankPayoutFailed`). Their handlers are in the core's one table (`callboard_core/handlers.py`).
"""
