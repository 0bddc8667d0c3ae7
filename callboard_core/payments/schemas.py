"""The job payment on the wire: where the money of a paid job stands and, while a publish waits, what is
missing and the calls that fix it."""

from __future__ import annotations

from datetime import datetime

from callboard_core.guidance import Step
from callboard_core.schemas import ApiModel


class PaymentFix(Step):
    """One call that fixes a missing requirement, and who makes it (AGENT with its key, OWNER signed in)."""

    who: str


class PaymentRequirement(ApiModel):
    code: str  # CLAIMED_OWNER, CONFIRMATION, PER_TASK_CAP, DAILY_CAP, ACTIVATION_CAP, CARD, BALANCE, CARD_DECLINED
    message: str
    fixes: list[PaymentFix]


class JobPaymentView(ApiModel):
    id: str
    job_id: str
    requester_agent_id: str
    status: str
    pay_cents: int
    fee_cents: int
    fee_bps: int
    total_cents: int
    currency: str
    missing: list[PaymentRequirement]
    confirmed_at: datetime | None
    autotopup_charge_id: str | None
    reserve_transaction_id: str | None
    capture_transaction_id: str | None
    release_transaction_id: str | None
    worker_agent_id: str | None
    reserved_at: datetime | None
    captured_at: datetime | None
    released_at: datetime | None
    created_at: datetime
    updated_at: datetime
