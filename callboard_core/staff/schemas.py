"""The staff console on the wire."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from callboard_core.audit.models import AuditEvent
from callboard_core.disputes.schemas import DisputeResolve, DisputeView
from callboard_core.jobs.schemas import JobStatusName
from callboard_core.ledger.schemas import Balance, StatementEntry
from callboard_core.schemas import VISIBLE, ApiModel, QueryModel

RoleName = Literal["USER", "SUPPORT", "MODERATOR", "ADMIN", "SUPERADMIN"]
UserStatusName = Literal["ACTIVE", "SUSPENDED", "DELETED"]
Reason = Annotated[str, StringConstraints(strip_whitespace=True, max_length=2000)]


class AdminUser(ApiModel):
    id: str
    email: str
    username: str | None
    name: str | None
    role: RoleName
    status: UserStatusName
    email_verified: bool
    preview_access: bool
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None


class AdminUserList(ApiModel):
    users: list[AdminUser]
    total: int = Field(description="Users matching the filters (the list itself stops at `limit`).")


class AdminUserQuery(QueryModel):
    query: Annotated[str, StringConstraints(max_length=200)] | None = None
    role: RoleName | None = None
    status: UserStatusName | None = None
    include_deleted: bool = False
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class OwnedAgent(ApiModel):
    id: str
    handle: str
    name: str
    status: str
    archived: bool
    deleted: bool


class SessionForensics(ApiModel):
    active: int
    last_started_at: datetime | None
    last_ip_address: str | None
    last_user_agent: str | None


class Consent(ApiModel):
    terms_version: str
    privacy_version: str
    ip_address: str | None
    user_agent: str | None
    accepted_at: datetime


class AuditEntry(ApiModel):
    id: str
    actor_type: str
    actor_id: str | None
    action: str
    created_at: datetime

    @classmethod
    def of(cls, e: AuditEvent) -> AuditEntry:
        return cls(
            id=e.id, actor_type=e.actor_type, actor_id=e.actor_id, action=e.action, created_at=e.created_at
        )


class AdminUserDetail(ApiModel):
    """A user as staff see them. SUPPORT gets the redacted view: `balance`, `transactions`, `auditEntries`,
    `sessions` and `consents` are null, and `redacted` says so."""

    user: AdminUser
    agents: list[OwnedAgent]
    active_api_keys: int
    redacted: bool
    balance: Balance | None
    transactions: list[StatementEntry] | None
    audit_entries: list[AuditEntry] | None
    sessions: SessionForensics | None
    consents: list[Consent] | None


class RoleUpdate(ApiModel):
    role: RoleName


class StatusUpdate(ApiModel):
    status: UserStatusName
    reason: Reason | None = None
    admin_notes: Reason | None = None


class DeleteBody(ApiModel):
    reason: Reason | None = None


class KeysReset(ApiModel):
    revoked: list[str] = Field(description="The prefixes of the keys revoked (the user's and their agents').")


class Mirror(ApiModel):
    """What the user sees, read-only, for a SUPERADMIN: their profile, agents, balance and recent entries.
    A mirror is a snapshot, never a session as the user: nothing can be done through it."""

    user: AdminUser
    agents: list[OwnedAgent]
    balance: Balance
    transactions: list[StatementEntry]


# --- agents ------------------------------------------------------------------------------------------------

AgentStatusName = Literal["ACTIVE", "INACTIVE", "SUSPENDED"]
MetricType = Literal[
    "TASK_COMPLETED", "TASK_FAILED", "RESPONSE_TIME", "QUALITY_SCORE", "DISPUTE_RAISED", "DISPUTE_RESOLVED"
]
Required = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000), VISIBLE]


class AdminAgent(ApiModel):
    id: str
    handle: str
    name: str
    owner_id: str | None
    status: AgentStatusName
    claim_status: str
    reputation_score: float
    total_tasks: int
    is_house: bool
    trust_tier: str | None
    featured: bool
    admin_notes: str | None
    archived_at: datetime | None
    deleted_at: datetime | None
    created_at: datetime
    updated_at: datetime


class AdminAgentList(ApiModel):
    agents: list[AdminAgent]
    total: int = Field(description="Agents matching the filters (the list itself stops at `limit`).")


class AdminAgentQuery(QueryModel):
    query: Annotated[str, StringConstraints(max_length=200)] | None = None
    status: AgentStatusName | None = None
    include_deleted: bool = False
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class AgentKey(ApiModel):
    id: str
    prefix: str
    scopes: list[str]
    revoked: bool
    created_at: datetime
    last_used_at: datetime | None


class AdminAgentDetail(ApiModel):
    """An agent as staff see it; SUPPORT's view has `auditEntries` null (`redacted` true)."""

    agent: AdminAgent
    owner: AdminUser | None
    api_keys: list[AgentKey]
    redacted: bool
    audit_entries: list[AuditEntry] | None


class AgentStatusUpdate(ApiModel):
    status: AgentStatusName
    reason: Reason | None = None


class AgentMetadataUpdate(ApiModel):
    reason: Required
    trust_tier: Annotated[str, StringConstraints(strip_whitespace=True, max_length=32)] | None = None
    featured: bool | None = None
    notes: Annotated[str, StringConstraints(max_length=5000)] | None = None


class HandleUpdate(ApiModel):
    handle: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$")]
    reason: Required


class HouseUpdate(ApiModel):
    is_house: bool
    reason: Reason | None = None


class ReputationCorrection(ApiModel):
    metric_type: MetricType
    score: Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]
    reason: Required
    weight: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] | None = None


class ReputationCorrected(ApiModel):
    agent: AdminAgent
    delta: float = Field(description="The points applied now: score times weight (1 when not sent).")


class KeyRevoked(ApiModel):
    id: str
    prefix: str
    revoked: bool = Field(description="False when the key was revoked already.")


# --- overview, moderation, money, audit --------------------------------------------------------------------


class Overview(ApiModel):
    """Counts for the console's home (no money: SUPPORT sees it too)."""

    users: dict[str, int] = Field(description="By status.")
    agents: dict[str, int] = Field(description="By status (deleted agents left out).")
    jobs: dict[str, int] = Field(description="By status (starter jobs left out).")
    bug_reports: dict[str, int] = Field(description="By status.")
    pending_tag_requests: int
    pending_waitlist: int


class ModerationItem(ApiModel):
    kind: Literal["TAG_REQUEST", "BUG_REPORT", "SUSPENDED_AGENT"]
    id: str
    summary: str
    created_at: datetime


class ModerationQueue(ApiModel):
    items: list[ModerationItem] = Field(description="Oldest first: what waits longest comes first.")


class Analytics(ApiModel):
    days: int
    since: datetime
    new_users: int
    new_agents: int
    jobs_published: int
    jobs_awarded: int
    money: dict[str, int] = Field(description="Cents moved in the window, by ledger transaction kind.")
    platform_fees_cents: int


class AnalyticsQuery(QueryModel):
    days: Annotated[int, Field(ge=1, le=366)] = 30


class AuditLogEntry(ApiModel):
    id: str
    actor_type: str
    actor_id: str | None
    actor_role: str | None = Field(default=None, description="A person's role when they acted.")
    request_id: str | None = Field(default=None, description="The request the action was made in.")
    action: str
    target_type: str
    target_id: str | None
    data: dict[str, Any] | None
    created_at: datetime


class AuditLog(ApiModel):
    entries: list[AuditLogEntry]


class AuditLogQuery(QueryModel):
    query: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        default=None, description="An actor's or a target's id."
    )
    action: Annotated[str, StringConstraints(max_length=64)] | None = None
    target_type: Annotated[str, StringConstraints(max_length=32)] | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class AdminPayment(ApiModel):
    id: str
    job_id: str
    user_id: str
    requester_agent_id: str
    worker_agent_id: str | None
    status: str
    pay_cents: int
    fee_cents: int
    currency: str
    created_at: datetime


class AdminPaymentList(ApiModel):
    payments: list[AdminPayment]


class PaymentQuery(QueryModel):
    query: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        default=None, description="A job's, an owner's or a payment's id."
    )
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class AdminEntry(ApiModel):
    id: str
    account_kind: str
    holder_id: str
    amount_cents: int
    balance_after_cents: int | None


class AdminTransaction(ApiModel):
    id: str
    kind: str
    idempotency_key: str
    user_id: str | None
    job_id: str | None
    processor_ref: str | None
    reverses_id: str | None
    amount_cents: int = Field(description="The sum of the transaction's credits (it sums to zero).")
    metadata: dict[str, Any]
    created_at: datetime


class AdminTransactionList(ApiModel):
    transactions: list[AdminTransaction]


class AdminTransactionDetail(ApiModel):
    transaction: AdminTransaction
    entries: list[AdminEntry]


EscrowStatus = Literal["HELD", "CAPTURED", "RELEASED"]
PaymentMethod = Literal["BALANCE", "CARD"]


class TransactionQuery(QueryModel):
    query: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        default=None, description="An owner's, a job's or a processor reference's id."
    )
    escrow_status: EscrowStatus | None = Field(
        default=None, description="HELD: reservations; CAPTURED: captures; RELEASED: releases."
    )
    payment_method: PaymentMethod | None = Field(
        default=None, description="CARD: money in from a card (top-ups); BALANCE: moves within balances."
    )
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class FirstCycle(ApiModel):
    """How far accounts got through their first cycle (counts of accounts; no money)."""

    signed_up: int
    with_agent: int = Field(description="Accounts owning at least one claimed agent.")
    published_first_job: int = Field(
        description="Accounts whose agents published a job (starter jobs aside)."
    )
    gave_first_award: int
    won_first_award: int = Field(description="Accounts whose agents won an award.")


class LiquidityFigures(ApiModel):
    open_jobs: int
    jobs_published: int
    with_applications: int = Field(description="Published jobs that got at least one application.")
    applications_per_job: float
    awarded: int
    award_rate: float = Field(description="Awarded among published jobs that reached a decision.")


class Liquidity(ApiModel):
    """Marketplace liquidity over all time: organic jobs (neither starter jobs nor requested by a house
    agent), with house and starter activity reported apart."""

    organic: LiquidityFigures
    house: LiquidityFigures
    starter_jobs: int
    starter_jobs_completed: int


class ModeratedJob(ApiModel):
    id: str
    title: str
    status: str
    requester_agent_id: str
    requester_handle: str
    owner_id: str | None
    reward_amount_cents: int
    published_at: datetime | None
    why: list[str]


class JobModerationQueue(ApiModel):
    jobs: list[ModeratedJob] = Field(description="Newest first.")


class AdjustmentBody(ApiModel):
    """A hand-made credit (positive) or debit (negative) of the owner's available balance."""

    amount_cents: Annotated[int, Field(ge=-10_000_000, le=10_000_000)] = Field(
        description="Cents: positive credits the balance (a credit note), negative debits it (an invoice)."
    )
    reason: Required
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, description="The same key again applies the adjustment once (answers the first)."
    )


class IssuedDocument(ApiModel):
    id: str
    kind: str
    number: str


class Adjusted(ApiModel):
    transaction: AdminTransaction
    balance: Balance
    document: IssuedDocument | None


# --- tasks (jobs, as staff run them) ------------------------------------------------------------------------

RiskName = Literal[
    "ALL", "NEEDS_ATTENTION", "DISPUTED", "DISPUTE_DUE_SOON", "DISPUTE_BREACHED", "OVERDUE", "STUCK"
]


class AdminTaskQuery(QueryModel):
    query: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        default=None, description="Part of the title, or a job id."
    )
    status: JobStatusName | None = None
    risk: RiskName = Field(
        default="ALL",
        description="NEEDS_ATTENTION: disputed, overdue or stuck. DISPUTED: a dispute is open. "
        "DISPUTE_DUE_SOON / DISPUTE_BREACHED: its SLA indicator. OVERDUE: in review past its review "
        "deadline. STUCK: a deadline passed over an hour ago and the job did not move, or its payout "
        "failed with no retry left.",
    )
    include_archived: bool = False
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class AdminTask(ApiModel):
    id: str
    title: str
    status: JobStatusName
    requester_agent_id: str
    owner_id: str | None
    reward_amount_cents: int
    open_dispute_id: str | None
    dispute_sla_state: str | None
    review_deadline_at: datetime
    overdue: bool
    archived: bool
    created_at: datetime
    updated_at: datetime


class AdminTaskList(ApiModel):
    tasks: list[AdminTask]
    total: int = Field(description="Tasks matching the filters (the list itself stops at `limit`).")


class TaskPayment(ApiModel):
    status: str
    pay_cents: int
    fee_cents: int
    refunded_cents: int
    payout_status: str | None


class StaffNote(ApiModel):
    actor_id: str | None
    note: str
    created_at: datetime


class AdminTaskDetail(ApiModel):
    """A task (job) as staff see it. SUPPORT gets the redacted view: `payment` and `auditEntries` are null."""

    task: AdminTask
    job: dict[str, Any] = Field(description="The job as its requester sees it (JobView).")
    disputes: list[DisputeView] = Field(description="Its disputes, newest first.")
    notes: list[StaffNote]
    redacted: bool
    payment: TaskPayment | None
    audit_entries: list[AuditEntry] | None


class TaskAction(ApiModel):
    """One staff action on a task. `note` says why (required). cancel: stop a job that is not over (its
    escrow returned). dispute: open a dispute on it (`reasonCode`), freezing its money. note: a staff note
    (the first response to an open dispute). resolve: settle its open dispute (`resolve`, ADMIN and
    SUPERADMIN). archive / restore: hide a closed job from this list, or bring it back."""

    action: Literal["cancel", "dispute", "note", "resolve", "archive", "restore"]
    note: Required
    reason_code: Literal[
        "THEFT_CLAIM", "ARTIFACT_MISUSE", "PAYOUT_ISSUE", "PAYMENT_DISPUTE", "POLICY_ABUSE", "OTHER"
    ] = "OTHER"
    resolve: DisputeResolve | None = Field(
        default=None,
        description="resolve: the dispute resolution (the same body as resolving the dispute itself).",
    )


class TaskRefund(ApiModel):
    """A partial refund of a paid job's escrow to its requester's balance (the reward shrinks by it)."""

    amount_cents: Annotated[int, Field(ge=1, le=10_000_000)]
    reason: Required
    idempotency_key: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, description="The same key again applies the refund once (answers the first)."
    )


class TaskRefunded(ApiModel):
    task: AdminTask
    payment: TaskPayment
    transaction_id: str
    document: IssuedDocument | None


class AwardOverride(ApiModel):
    submission_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    reason: Required
