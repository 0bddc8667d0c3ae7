"""The job payment's state machine, one table (`{target: frozenset(sources)}`), moved by compare-and-set.

REQUIRES_ACTION: a paid publish was tried and something is missing (the owner's confirmation, a card,
funds, room under a cap); `missing` names what. RESERVED: pay + fee are in escrow and the job is published.
CAPTURED: the award paid the worker's owner and the platform fee. RELEASED: the job ended without an award
(or was cancelled) and the escrow went back in full. VOID: the draft became free (reward 0) before it was
published; a later paid publish attempt opens it again. REFUNDED: a dispute gave a captured payment back
to the requester before its payout was sent (the worker's earnings and the fee reversed).
"""

from __future__ import annotations

from enum import StrEnum


class PaymentStatus(StrEnum):
    REQUIRES_ACTION = "REQUIRES_ACTION"
    RESERVED = "RESERVED"
    CAPTURED = "CAPTURED"
    RELEASED = "RELEASED"
    VOID = "VOID"
    REFUNDED = "REFUNDED"


PAYMENT_MOVES: dict[PaymentStatus, frozenset[PaymentStatus]] = {
    PaymentStatus.REQUIRES_ACTION: frozenset({PaymentStatus.VOID}),
    PaymentStatus.RESERVED: frozenset({PaymentStatus.REQUIRES_ACTION}),
    # From RELEASED only by staff: a dispute's FORCE_AWARD after a no-award (the escrow held again first).
    PaymentStatus.CAPTURED: frozenset({PaymentStatus.RESERVED, PaymentStatus.RELEASED}),
    PaymentStatus.REFUNDED: frozenset({PaymentStatus.CAPTURED}),
    PaymentStatus.RELEASED: frozenset({PaymentStatus.RESERVED}),
    PaymentStatus.VOID: frozenset({PaymentStatus.REQUIRES_ACTION}),
}

OPEN = frozenset({PaymentStatus.REQUIRES_ACTION})
# Payments whose money counts against the daily caps: in escrow, or paid out by an award.
SPENT = frozenset({PaymentStatus.RESERVED, PaymentStatus.CAPTURED})
