from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, Field, StringConstraints, WithJsonSchema

from callboard_core.api_keys.schemas import ApiKeyInfo
from callboard_core.guidance import Hint
from callboard_core.schemas import ApiModel, JsonObject, Omittable, QueryModel, Url

AgentStatusName = Literal["ACTIVE", "INACTIVE", "SUSPENDED"]
ClaimStatusName = Literal["PROVISIONAL", "CLAIMED", "VERIFIED"]
IntentName = Literal["REQUESTER", "WORKER", "BOTH"]
PricingModelName = Literal["PER_CALL", "PER_TASK", "SUBSCRIPTION", "CUSTOM"]
AuthMethodName = Literal["API_KEY", "OAUTH2", "BEARER_TOKEN", "NONE"]
Handle = Annotated[
    str, StringConstraints(min_length=3, max_length=40, pattern=r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Description = Annotated[str, StringConstraints(max_length=5000)]
CapabilityList = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=64)]], Field(max_length=50)
]


class AgentBountyProfileSummary(ApiModel):
    claim_status: ClaimStatusName
    requester_enabled: bool
    worker_enabled: bool
    auto_publish_limit_cents: int
    claimed_at: datetime | None
    verified_at: datetime | None


class AgentResponse(ApiModel):
    id: str
    name: str
    handle: str
    owner_id: str | None = Field(description="The owning user; null while the agent is provisional.")
    endpoint_url: str
    description: str | None = None
    capabilities: list[str]
    pricing_model: PricingModelName
    price_per_unit: float
    currency: str | None = None
    sla_response_ms: float | None = None
    sla_uptime_pct: float | None = None
    auth_method: AuthMethodName
    status: AgentStatusName
    reputation_score: float
    total_tasks: int
    success_rate: float
    avg_response_ms: float
    dispute_rate: float
    metadata: JsonObject | None = None
    sample_input: JsonObject | None = None
    sample_output: JsonObject | None = None
    processor_account_id: str | None = None
    processor_onboarding_complete: bool = False
    processor_charges_enabled: bool = False
    processor_payouts_enabled: bool = False
    bounty_profile: AgentBountyProfileSummary | None = None
    created_at: datetime
    updated_at: datetime


class AgentDashboardResponse(AgentResponse):
    """The dashboard view: the public record plus the owner-only fields."""

    intent: IntentName
    archived: bool
    archived_at: datetime | None
    is_house: bool
    last_heartbeat_at: datetime | None
    active_key_count: int


class AgentRegister(ApiModel):
    name: Name
    endpoint_url: Url
    handle: Handle | None = None
    description: Description | None = None
    capabilities: CapabilityList | None = None
    intent: IntentName = "BOTH"
    enroll_token: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None


class AgentRegistered(ApiModel):
    agent: AgentResponse
    api_key: str = Field(description="The full API key. Shown once; store it now.")
    key_info: ApiKeyInfo
    claim_url: str | None = Field(
        description="Give this to the human owner; null when enrolled already claimed."
    )
    claim_expires_at: datetime | None
    next_actions: list[Hint]


class AgentSelfUpdate(ApiModel):
    """The agent's own profile. It may turn its worker role off, not on: that lists it in the public
    directory, which is its owner's choice (an unclaimed agent has no owner yet and may)."""

    name: Omittable[Name] = None
    description: Description | None = None
    endpoint_url: Omittable[Url] = None
    capabilities: CapabilityList | None = None
    requester_enabled: bool | None = None
    worker_enabled: bool | None = None
    intent: IntentName | None = None


class AgentCreate(ApiModel):
    name: Name
    endpoint_url: Url
    capabilities: CapabilityList
    handle: Handle | None = None
    description: Description | None = None
    owner_id: str | None = Field(
        default=None, max_length=64, description="Ignored: the owner is the session user."
    )
    pricing_model: PricingModelName | None = None
    price_per_unit: Annotated[float, Field(ge=0, le=1e9)] | None = None
    currency: Annotated[str, StringConstraints(pattern=r"^[a-zA-Z]{3}$")] | None = None
    sla_response_ms: Annotated[float, Field(ge=0, le=1e9)] | None = None
    sla_uptime_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    auth_method: AuthMethodName | None = None
    metadata: JsonObject | None = None
    sample_input: JsonObject | None = None
    sample_output: JsonObject | None = None


class AgentUpdate(ApiModel):
    name: Omittable[Name] = None
    endpoint_url: Omittable[Url] = None
    capabilities: CapabilityList | None = None
    handle: Omittable[Handle] = None
    description: Description | None = None
    pricing_model: Omittable[PricingModelName] = None
    price_per_unit: Omittable[Annotated[float, Field(ge=0, le=1e9)]] = None
    sla_response_ms: Annotated[float, Field(ge=0, le=1e9)] | None = None
    sla_uptime_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    auth_method: Omittable[AuthMethodName] = None
    metadata: JsonObject | None = None
    sample_input: JsonObject | None = None
    sample_output: JsonObject | None = None


class AgentCreated(ApiModel):
    agent: AgentDashboardResponse
    api_key: str = Field(description="The runtime API key (read+write). Shown once.")
    key_info: ApiKeyInfo


class AgentPolicyUpdate(ApiModel):
    auto_publish_limit_cents: Annotated[int, Field(ge=0, le=2_000_000_000)] | None = (
        None  # the column is 32-bit: $20M
    )
    intent: IntentName | None = None
    worker_enabled: Omittable[bool] = Field(
        default=None,
        description="Let the agent take work: its worker role, which lists it in the public directory. Only "
        "the owner turns it on.",
    )


class AgentPolicy(ApiModel):
    agent_id: str
    auto_publish_limit_cents: int
    intent: IntentName
    worker_enabled: bool


FREE_JSON_MAX_BYTES = 16_384


def _bounded_json(value: Any) -> Any:
    if value is not None and len(orjson.dumps(value)) > FREE_JSON_MAX_BYTES:
        raise ValueError(f"at most {FREE_JSON_MAX_BYTES} bytes of JSON")
    return value


# Free-form JSON, stated as such: a generated client or an MCP inspector sees every JSON kind, not `{}`;
# bounded, as every string field is (a heartbeat is written every few minutes).
FreeJson = Annotated[
    Any,
    AfterValidator(_bounded_json),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "object"},
                {"type": "array"},
                {"type": "string"},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
            ],
            "description": "Free-form JSON, at most 16 KB serialized.",
        }
    ),
]


class HeartbeatBody(ApiModel):
    runtime_id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    role_mode: IntentName
    status: Literal["ONLINE", "DEGRADED", "OFFLINE"] | None = None
    runtime: Annotated[str, StringConstraints(max_length=128)] | None = None
    version: Annotated[str, StringConstraints(max_length=64)] | None = None
    capabilities_json: FreeJson = None
    metadata_json: FreeJson = None
    current_bounty_id: Annotated[str, StringConstraints(max_length=64)] | None = None
    current_participation_slot_id: Annotated[str, StringConstraints(max_length=64)] | None = None
    current_action: Annotated[str, StringConstraints(max_length=256)] | None = None
    last_error: Annotated[str, StringConstraints(max_length=4000)] | None = None


class HeartbeatRecord(ApiModel):
    id: str
    agent_id: str
    runtime_id: str
    role_mode: IntentName
    status: str
    runtime: str | None
    version: str | None
    capabilities_json: Any | None
    metadata_json: Any | None
    current_bounty_id: str | None
    current_participation_slot_id: str | None
    current_action: str | None
    last_error: str | None
    beat_count: int
    last_seen_at: datetime
    created_at: datetime
    updated_at: datetime


class HeartbeatAck(ApiModel):
    status: Literal["ok"] = "ok"
    heartbeat: HeartbeatRecord
    server_time: datetime


class HeartbeatList(ApiModel):
    heartbeats: list[HeartbeatRecord]


class SellerWorkerHeartbeat(ApiModel):
    id: str
    seller_agent_id: str
    worker_id: str
    status: str
    capabilities: list[str]
    last_seen_at: datetime
    created_at: datetime
    updated_at: datetime
    runtime: str | None = None
    version: str | None = None
    current_task_id: str | None = None
    last_error: str | None = None
    metadata: Any | None = None


class SellerWorkers(ApiModel):
    workers: list[SellerWorkerHeartbeat]


class ClaimLink(ApiModel):
    claim_url: str
    expires_at: datetime


class ClaimPreview(ApiModel):
    agent: AgentPublicCard
    claim_status: ClaimStatusName
    claimable: bool
    expires_at: datetime


class AgentPublicCard(ApiModel):
    id: str
    name: str
    handle: str
    description: str | None
    capabilities: list[str]
    endpoint_url: str
    created_at: datetime


class ClaimResult(ApiModel):
    agent: AgentResponse
    upgraded_key_count: int


class ClaimVerification(ApiModel):
    status: Literal["verification_sent", "verified"]
    agent_id: str
    claim_status: ClaimStatusName
    verified_at: datetime | None = None


class KeyRotated(ApiModel):
    key: str = Field(description="The new API key. Shown once; the old key stops working now.")
    key_info: ApiKeyInfo
    revoked_key_id: str


class EnrollToken(ApiModel):
    enroll_token: str = Field(description="Plaintext, shown once; single use; expires in one hour.")
    expires_at: datetime
    prompt: str
    register_url: str


class LifecycleBlocker(ApiModel):
    kind: str
    message: str
    count: int = 1
    ref_ids: list[str] = Field(default_factory=list)


class LifecycleBlockers(ApiModel):
    agent_id: str
    blockers: list[LifecycleBlocker]


class AgentDeleteBody(ApiModel):
    confirm_handle: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class AgentDeleted(ApiModel):
    status: Literal["deleted"] = "deleted"
    agent_id: str
    mode: Literal["SOFT", "HARD"]


class AgentLifecycleBody(ApiModel):
    """Optional body of deactivate and archive: why (kept in the audit log)."""

    reason: Annotated[str, StringConstraints(max_length=500)] | None = None


class AgentList(ApiModel):
    agents: list[AgentDashboardResponse]
    total: int
    limit: int
    offset: int


ClaimPreview.model_rebuild()


class AgentListQuery(QueryModel):
    """GET /agents/dashboard/mine: the owner's agents, filtered."""

    capability: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    min_price: Annotated[float, Field(ge=0)] | None = None
    max_price: Annotated[float, Field(ge=0)] | None = None
    min_reputation: float | None = None
    status: AgentStatusName | None = None
    include_archived: bool = False
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    offset: Annotated[int, Field(ge=0, le=1_000_000)] = 0


class SellerWorkersQuery(QueryModel):
    seller_agent_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
