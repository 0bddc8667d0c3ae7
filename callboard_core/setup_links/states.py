"""The setup link machine: PENDING → STARTED (the owner opened the processor's flow; each start keeps it
STARTED) → COMPLETED (the processor said so: terminal). EXPIRED is never stored: a link past its
`expires_at` that is not COMPLETED reads as EXPIRED and can no longer be started; a flow started before
the expiry still completes it."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum


class SetupLinkKind(StrEnum):
    CARD = "CARD"
    PAYOUT = "PAYOUT"


class SetupLinkStatus(StrEnum):
    PENDING = "PENDING"
    STARTED = "STARTED"
    COMPLETED = "COMPLETED"
    EXPIRED = "EXPIRED"


S = SetupLinkStatus
SETUP_LINK_MOVES: dict[SetupLinkStatus, frozenset[SetupLinkStatus]] = {
    S.STARTED: frozenset({S.PENDING}),
    S.COMPLETED: frozenset({S.PENDING, S.STARTED}),
}
SETUP_LINK_TTL = timedelta(days=7)  # as claim links: long enough for an owner to get to it
