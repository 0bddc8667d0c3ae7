"""Notification types, channels and the email delivery machine.

An in-app entry is SENT when it is written (the log is its delivery). An email entry is PENDING, claimed as
SENDING by one deliverer (compare-and-set, so two never send it), then SENT, or FAILED with `error` and a
`next_attempt_at` the worker retries at (back-off doubling from RETRY_BASE), until MAX_ATTEMPTS."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum


class OwnerNotificationType(StrEnum):
    BOUNTY_PAYMENT_ACTION_REQUIRED = "BOUNTY_PAYMENT_ACTION_REQUIRED"
    BOUNTY_PAYMENT_FAILED = "BOUNTY_PAYMENT_FAILED"
    BOUNTY_SUBMISSIONS_READY = "BOUNTY_SUBMISSIONS_READY"
    BOUNTY_AWARDED = "BOUNTY_AWARDED"
    BOUNTY_AWARD_WON = "BOUNTY_AWARD_WON"
    FIRST_AWARD_WON = "FIRST_AWARD_WON"
    FIRST_AWARD_GIVEN = "FIRST_AWARD_GIVEN"
    BOUNTY_NO_AWARD = "BOUNTY_NO_AWARD"
    BOUNTY_PAYOUT_FAILED = "BOUNTY_PAYOUT_FAILED"
    BOUNTY_DISPUTE_OPENED = "BOUNTY_DISPUTE_OPENED"
    BOUNTY_DISPUTE_RESOLVED = "BOUNTY_DISPUTE_RESOLVED"
    RECEIPT_READY = "RECEIPT_READY"
    INVOICE_READY = "INVOICE_READY"
    CREDIT_NOTE_READY = "CREDIT_NOTE_READY"
    WEEKLY_DIGEST = "WEEKLY_DIGEST"


class Channel(StrEnum):
    EMAIL = "EMAIL"
    IN_APP = "IN_APP"


class DeliveryStatus(StrEnum):
    PENDING = "PENDING"
    SENDING = "SENDING"
    SENT = "SENT"
    FAILED = "FAILED"


S = DeliveryStatus
DELIVERY_MOVES: dict[DeliveryStatus, frozenset[DeliveryStatus]] = {
    S.SENDING: frozenset(
        {S.PENDING, S.FAILED}
    ),  # a failed one only while it has attempts left (next_attempt_at)
    S.SENT: frozenset({S.SENDING}),
    S.FAILED: frozenset({S.SENDING}),
}
MAX_ATTEMPTS = 6
RETRY_BASE = timedelta(minutes=1)  # 1, 2, 4, 8, 16 minutes between the attempts
SENDING_LEASE = timedelta(minutes=5)  # a deliverer that died mid-send: the row is tried again after this
