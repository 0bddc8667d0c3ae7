"""What payouts tell the rest of the core (through the bus): owner notifications listen."""

from __future__ import annotations

from dataclasses import dataclass

from callboard_core.bus import Event
from callboard_core.payouts.models import Payout, PayoutAccount

# The agent notification's kind for a failed payout (the owner notification's type has the same name).
PAYOUT_FAILED = "BOUNTY_PAYOUT_FAILED"


@dataclass(frozen=True)
class PayoutFailed(Event):
    """A payout attempt failed or was reversed (the money is back in payable), in that transaction."""

    payout: Payout
    reason: str


@dataclass(frozen=True)
class BankPayoutFailed(Event):
    """A connected account's bank payout failed (`payout.failed`); the account records it."""

    account: PayoutAccount
    reason: str
