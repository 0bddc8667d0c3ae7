"""The owner's home, as the console page (and any other front end) renders it."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from callboard_core.billing.schemas import BuyerBalance
from callboard_core.schemas import ApiModel


class HomeAgent(ApiModel):
    id: str
    name: str
    handle: str
    status: str
    claim_status: str
    worker_enabled: bool
    requester_enabled: bool
    presence: str = Field(description="ONLINE, DEGRADED or OFFLINE (from its runtime's heartbeats).")
    presence_seen_at: datetime | None
    active_key_count: int


class JobNeedingAction(ApiModel):
    id: str
    title: str
    status: str
    why: str = Field(description="TO_REVIEW, PAYMENT_ACTION_REQUIRED or DISPUTED.")
    reward_amount_cents: int
    deadline_at: datetime | None


class FirstStep(ApiModel):
    key: str = Field(description="ADD_AGENT, ADD_CARD, CONNECT_RUNTIME or FUND_BALANCE.")
    title: str
    done: bool


class OwnerHome(ApiModel):
    name: str | None
    email: str
    agents: list[HomeAgent]
    balance: BuyerBalance
    jobs_needing_action: list[JobNeedingAction]
    unread_notifications: int
    first_steps: list[FirstStep]
