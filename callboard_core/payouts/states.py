"""The payout and attempt machines (moved through `callboard_core.states`).

Payout: PENDING (due at `next_attempt_at`) → SENDING (an attempt is at the processor) → PAID; with no
ready payout account it waits in WAITING_FOR_ACCOUNT until an account becomes ready; a refused or reversed
attempt leaves it FAILED with the back-off's `next_attempt_at` (null once the retries are spent: staff
must look). A reversal after PAID (`transfer.reversed`) sends it back to FAILED too. A dispute that refunds
the award cancels a payout not yet sent (CANCELLED); while a dispute is open on its job it is not sent.

Attempt: SENDING → PAID, or FAILED (refused by the processor, or reversed before we settled it), or
REVERSED (reversed after we settled it).
"""

from __future__ import annotations

from enum import StrEnum


class PayoutStatus(StrEnum):
    WAITING_FOR_ACCOUNT = "WAITING_FOR_ACCOUNT"
    PENDING = "PENDING"
    SENDING = "SENDING"
    PAID = "PAID"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"  # a dispute refunded the award before the payout was sent


class AttemptStatus(StrEnum):
    SENDING = "SENDING"
    PAID = "PAID"
    FAILED = "FAILED"
    REVERSED = "REVERSED"


P = PayoutStatus
PAYOUT_MOVES: dict[PayoutStatus, frozenset[PayoutStatus]] = {
    P.WAITING_FOR_ACCOUNT: frozenset({P.PENDING, P.FAILED}),
    P.PENDING: frozenset({P.WAITING_FOR_ACCOUNT}),
    P.SENDING: frozenset({P.PENDING, P.FAILED}),
    P.PAID: frozenset({P.SENDING}),
    P.FAILED: frozenset({P.SENDING, P.PAID}),
    P.CANCELLED: frozenset({P.WAITING_FOR_ACCOUNT, P.PENDING, P.FAILED}),
}
# Due for the worker: PENDING and FAILED at their time; SENDING once its lease ran out (a crashed send).
DUE = (P.PENDING, P.FAILED, P.SENDING)

A = AttemptStatus
ATTEMPT_MOVES: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    A.PAID: frozenset({A.SENDING}),
    A.FAILED: frozenset({A.SENDING}),
    A.REVERSED: frozenset({A.PAID}),
}
