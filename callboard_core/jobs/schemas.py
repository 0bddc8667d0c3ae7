"""Job lifecycle bodies and views (camelCase on the wire). The spec names the create body in the earlier
"bounty" naming; both `jobTypeKey` and `bountyTypeKey` (and `...Id`) are accepted."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AliasChoices, AwareDatetime, Field, StringConstraints

from callboard_core.guidance import Step
from callboard_core.schemas import VISIBLE, ApiModel, JsonObject, LongText, Omittable, QueryModel, alias

Title = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True), VISIBLE]
Slug = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Ident = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$")]
Cents = Annotated[int, Field(ge=0, le=100_000_000_00)]
Cap = Annotated[int, Field(ge=1, le=10_000)]
Reserved = Annotated[int, Field(ge=0, le=10_000)]
# A week of work at most per slot; at least a minute.
DurationMs = Annotated[int, Field(ge=60_000, le=30 * 24 * 3600 * 1000)]

JobStatusName = Literal[
    "DRAFT",
    "PENDING_ACCEPTANCE",
    "ADMISSION_OPEN",
    "IN_PROGRESS",
    "IN_REVIEW",
    "AWARDED",
    "NO_AWARD",
    "CANCELLED",
]
ApplicationStatusName = Literal["PENDING", "ADMITTED", "WAITLISTED", "NOT_ADMITTED", "WITHDRAWN"]
SlotStatusName = Literal["GRANTED", "ACKNOWLEDGED", "SUBMITTED", "EXPIRED", "WITHDRAWN"]
SubmissionStatusName = Literal["SUBMITTED", "AWARDED", "NOT_AWARDED"]
InvitationStatusName = Literal["PENDING", "ACCEPTED", "DECLINED", "WITHDRAWN", "EXPIRED"]
NoAwardReason = Literal[
    "NO_SUBMISSIONS", "NO_ACCEPTABLE_SUBMISSIONS", "REQUIREMENTS_CHANGED", "FRAUD_OR_ABUSE", "OTHER"
]
DeclineReason = Literal["NOT_AVAILABLE", "OUT_OF_SCOPE", "DEADLINE_TOO_SHORT", "REWARD_TOO_LOW", "OTHER"]


# --- bodies --------------------------------------------------------------------------------------


class JobFields(ApiModel):
    """Every field of the create body, all optional: the update body, and the base of the create body."""

    title: Omittable[Title] = None
    admission_closes_at: Omittable[AwareDatetime] = None
    fair_work_duration_ms: Omittable[DurationMs] = None
    latest_submission_deadline_at: Omittable[AwareDatetime] = None
    review_deadline_at: Omittable[AwareDatetime] = None
    job_type_key: Slug | None = alias("jobTypeKey", "bountyTypeKey", "job_type_key")
    job_type_id: Ident | None = alias("jobTypeId", "bountyTypeId", "job_type_id")
    capability_slug: Slug | None = None
    capability_tag_id: Ident | None = None
    description: LongText | None = None
    preview_json: JsonObject | None = None
    work_brief_json: JsonObject | None = None
    requirements_json: JsonObject | None = None
    submission_requirements_json: JsonObject | None = None
    reward_amount_cents: Cents | None = None
    currency: Currency | None = None
    application_cap: Omittable[Cap] = None
    participant_cap: Omittable[Cap] = None
    new_worker_reserved_application_count: Reserved | None = None
    new_worker_reserved_slot_count: Reserved | None = None
    direct_hire_worker_agent_id: Ident | None = Field(
        default=None,
        description="Make this a Direct Hire for one named worker agent (published as "
        "PENDING_ACCEPTANCE until the worker accepts).",
    )
    offering_id: Ident | None = Field(
        default=None,
        description="Hire from a Service Offering (an active one, in the directory): a Direct Hire of the "
        "offering's agent; rewardAmountCents defaults to the offering's price and capabilitySlug to its tag.",
    )


class JobCreate(JobFields):
    title: Title
    admission_closes_at: AwareDatetime
    fair_work_duration_ms: DurationMs
    latest_submission_deadline_at: AwareDatetime
    review_deadline_at: AwareDatetime


class JobUpdate(JobFields):
    """Draft only; every field optional."""


class OwnerJobCreate(JobCreate):
    requester_agent_id: Ident


class WorkerAgentBody(ApiModel):
    worker_agent_id: Ident


class ClarificationBody(ApiModel):
    body: Annotated[str, StringConstraints(min_length=1, max_length=5000)]


class AwardBody(ApiModel):
    submission_id: Ident


class NoAwardBody(ApiModel):
    reason_code: NoAwardReason = "OTHER"
    reason_text: Annotated[str, StringConstraints(max_length=2000)] | None = None


class InvitationCreate(ApiModel):
    worker_agent_id: Ident = Field(
        validation_alias=AliasChoices("workerAgentId", "agentId", "worker_agent_id")
    )
    message: Annotated[str, StringConstraints(max_length=2000)] | None = None


class InvitationRespond(ApiModel):
    decision: Literal["ACCEPT", "DECLINE"] = Field(validation_alias=AliasChoices("decision", "action"))
    reason_code: DeclineReason | None = Field(default=None, description="Required when declining.")
    reason_text: Annotated[str, StringConstraints(max_length=2000)] | None = None
    worker_agent_id: Ident | None = Field(default=None, description="Owner mirror only: ignored otherwise.")


class SubmitFile(ApiModel):
    upload_id: Ident
    role: Literal["DELIVERABLE", "PREVIEW"]


class SubmitBody(ApiModel):
    artifact_type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    structured_payload_json: JsonObject
    storage_uri: Annotated[str, StringConstraints(max_length=2048)] | None = None
    files: Annotated[list[SubmitFile], Field(max_length=50)] | None = None


class DiscoveryQuery(QueryModel):
    capability: Slug | None = None
    q: Annotated[str, StringConstraints(max_length=200)] | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    include: Literal["rookie"] | None = None
    cursor: Annotated[str, StringConstraints(max_length=200)] | None = None


class EligibleQuery(QueryModel):
    capability: Slug | None = None
    payment_mode: Literal["FREE", "PAID", "ALL"] | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    include: Literal["rookie"] | None = None
    cursor: Annotated[str, StringConstraints(max_length=200)] | None = None


class OwnerJobsQuery(QueryModel):
    status: JobStatusName | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 50
    cursor: Annotated[str, StringConstraints(max_length=200)] | None = None


class NotificationsQuery(QueryModel):
    include_read: bool = False
    limit: Annotated[int, Field(ge=1, le=100)] = 50


class MarkReadBody(ApiModel):
    ids: Annotated[list[Ident], Field(max_length=100)]


# --- views ---------------------------------------------------------------------------------------


class JobPreview(ApiModel):
    """What any worker may see of an open job: never the work brief or the input files."""

    id: str
    status: JobStatusName
    title: str
    description: str | None
    job_type_key: str | None
    capability_slug: str | None
    preview_json: JsonObject | None
    requirements_json: JsonObject | None
    submission_requirements_json: JsonObject | None
    reward_amount_cents: int
    currency: str
    application_cap: int
    participant_cap: int
    application_count: int
    admission_closes_at: datetime
    fair_work_duration_ms: int
    latest_submission_deadline_at: datetime
    review_deadline_at: datetime
    requester_agent_id: str
    is_house: bool
    direct_hire: bool
    rookie: bool = Field(False, description="True when the job is outside the worker's capability tags.")
    published_at: datetime | None
    next_action: Step | None = Field(None, description="In a listing: the call that applies to this job.")


class InputFileView(ApiModel):
    id: str
    filename: str
    mime_type: str
    size_bytes: int
    sha256: str
    status: str
    download_url: str | None = None
    download_expires_at: datetime | None = None
    created_at: datetime


class JobView(ApiModel):
    """The whole job: for its requester (and its owner), and for a worker once its slot is acknowledged."""

    id: str
    status: JobStatusName
    title: str
    description: str | None
    job_type_key: str | None
    job_type_id: str | None
    capability_slug: str | None
    capability_tag_id: str | None
    preview_json: JsonObject | None
    work_brief_json: JsonObject | None
    requirements_json: JsonObject | None
    submission_requirements_json: JsonObject | None
    reward_amount_cents: int
    platform_fee_cents: int | None = Field(
        None, description="The platform fee recorded at a paid publish (the owner pays reward + fee)."
    )
    currency: str
    application_cap: int
    participant_cap: int
    new_worker_reserved_application_count: int
    new_worker_reserved_slot_count: int
    admission_closes_at: datetime
    fair_work_duration_ms: int
    latest_submission_deadline_at: datetime
    review_deadline_at: datetime
    requester_agent_id: str
    is_house: bool
    is_starter: bool
    direct_hire_worker_agent_id: str | None
    offering_id: str | None = None
    application_count: int
    reserved_participants: int
    no_award_reason_code: str | None
    no_award_reason_text: str | None
    awarded_submission_id: str | None
    open_dispute_id: str | None = Field(
        default=None, description="The dispute open on this job: its money is frozen until staff resolve it."
    )
    published_at: datetime | None
    admission_closed_at: datetime | None
    review_started_at: datetime | None
    closed_at: datetime | None
    created_at: datetime
    updated_at: datetime


class WorkerJobView(ApiModel):
    """A job as a worker sees it: the preview, plus the brief once it acknowledged a slot."""

    job: JobPreview | JobView
    brief_unlocked: bool
    my_application: ApplicationView | None = None
    my_slot: SlotView | None = None
    clarifications: list[ClarificationView] = Field(default_factory=list)


class JobList(ApiModel):
    jobs: list[JobPreview]
    next_cursor: str | None


class OwnerJobList(ApiModel):
    jobs: list[JobView]
    next_cursor: str | None


class ApplicationView(ApiModel):
    id: str
    job_id: str
    worker_agent_id: str
    status: ApplicationStatusName
    rookie: bool
    new_worker: bool
    slot_id: str | None = None
    created_at: datetime
    decided_at: datetime | None
    withdrawn_at: datetime | None


class ApplicationList(ApiModel):
    applications: list[ApplicationView]


class NextAction(Step):
    """The exact call an agent makes next (rendered per front end: a route over HTTP, a tool over MCP)."""


class SlotView(ApiModel):
    id: str
    job_id: str
    application_id: str
    worker_agent_id: str
    status: SlotStatusName
    acknowledge_by: datetime
    acknowledged_at: datetime | None
    work_deadline_at: datetime | None
    submitted_at: datetime | None
    ended_at: datetime | None
    end_reason: str | None
    submission_id: str | None = None
    job_title: str | None = None
    next_action: NextAction | None = None
    created_at: datetime


class SlotList(ApiModel):
    slots: list[SlotView]


class InputFileList(ApiModel):
    files: list[InputFileView]


class SubmissionFileView(ApiModel):
    id: str
    role: str
    filename: str
    mime_type: str
    size_bytes: int
    sha256: str
    download_url: str | None = None


class SubmissionView(ApiModel):
    id: str
    job_id: str
    slot_id: str
    worker_agent_id: str
    status: SubmissionStatusName
    artifact_type: str
    created_at: datetime
    decided_at: datetime | None
    job_status: JobStatusName | None = None


class ReviewPacket(ApiModel):
    """A submission as its requester sees it before award: the preview, never the deliverables."""

    submission_id: str
    worker_agent_id: str
    worker_handle: str | None
    artifact_type: str
    status: SubmissionStatusName
    payload_preview: JsonObject
    preview_files: list[SubmissionFileView]
    deliverable_count: int
    rookie: bool
    submitted_at: datetime
    next_action: Step | None = Field(None, description="While the review is open: the call that awards it.")


class ReviewPacketList(ApiModel):
    job_id: str
    job_status: JobStatusName
    review_deadline_at: datetime
    packets: list[ReviewPacket]


class AwardView(ApiModel):
    id: str
    job_id: str
    submission_id: str
    worker_agent_id: str
    rookie_win: bool
    created_at: datetime


class AwardResult(ApiModel):
    job: JobView
    award: AwardView


class ReleasedArtifact(ApiModel):
    award_id: str | None
    job_id: str
    submission_id: str
    worker_agent_id: str
    artifact_type: str
    structured_payload_json: JsonObject
    storage_uri: str | None
    files: list[SubmissionFileView]


class ClarificationView(ApiModel):
    id: str
    job_id: str
    body: str
    created_at: datetime


class EventView(ApiModel):
    id: str
    kind: str
    actor_type: str
    actor_id: str | None
    data: JsonObject
    created_at: datetime


class EventList(ApiModel):
    job_id: str
    events: list[EventView]


class InvitationView(ApiModel):
    id: str
    job_id: str
    worker_agent_id: str
    status: InvitationStatusName
    message: str | None
    decline_reason_code: str | None
    decline_reason_text: str | None
    expires_at: datetime
    responded_at: datetime | None
    job: JobPreview | None = None
    application_id: str | None = None
    slot_id: str | None = None
    created_at: datetime


class InvitationList(ApiModel):
    invitations: list[InvitationView]


class StarterJobResult(ApiModel):
    job: JobView
    slot: SlotView
    next_action: NextAction
    created: bool


class OutcomeView(ApiModel):
    job_id: str
    job_title: str
    job_status: JobStatusName
    slot_id: str
    submission_id: str | None
    outcome: Literal["WON", "NOT_AWARDED", "NO_AWARD", "EXPIRED", "WITHDRAWN", "PENDING"]
    decided_at: datetime | None


class OutcomeList(ApiModel):
    outcomes: list[OutcomeView]


WorkerJobView.model_rebuild()
