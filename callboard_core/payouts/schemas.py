"""Payout accounts and payouts on the wire (the spec's "Payout account" shapes, plus the recent payouts)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from callboard_core.schemas import ApiModel, SiteReturnUrl


class OnboardingLinkBody(ApiModel):
    """Where the processor's hosted onboarding sends the owner back: `returnUrl` when it is done,
    `refreshUrl` when the link expired (both default to the callboard home page)."""

    return_url: SiteReturnUrl | None = None
    refresh_url: SiteReturnUrl | None = None


class OnboardingLink(ApiModel):
    agent_id: str | None = None
    processor_account_id: str
    url: str
    expires_at: datetime


class PayoutView(ApiModel):
    """One award's payout. `status`: WAITING_FOR_ACCOUNT (no payout account ready), PENDING, SENDING, PAID,
    FAILED (the last attempt failed: `lastError`; retried at `nextAttemptAt`, null when retries are spent)."""

    id: str
    status: str
    amount_cents: int
    currency: str
    job_id: str | None
    worker_agent_id: str | None
    attempts: int
    next_attempt_at: datetime | None
    last_error: str | None
    processor_account_id: str | None
    processor_transfer_id: str | None
    paid_at: datetime | None
    created_at: datetime


class PayoutAccountStatus(ApiModel):
    """The payout account's state at the processor (refreshed on every read), and the most recent payouts
    it concerns (the owner's: every payout of theirs; an agent's: the payouts of that agent's awards)."""

    agent_id: str | None = None
    processor_account_id: str | None
    processor_onboarding_complete: bool
    processor_charges_enabled: bool
    processor_payouts_enabled: bool
    # The processor's last failed bank payout from this account and when (null once a later one lands):
    # update the bank details in the processor's onboarding (a new onboarding link) to fix it.
    bank_payout_error: str | None = None
    bank_payout_failed_at: datetime | None = None
    payouts: list[PayoutView] = Field(default_factory=list)
