"""Onboarding sessions, registration drafts, activation and install tokens on the wire."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, Field, StringConstraints

from callboard_core.agents.schemas import CapabilityList, Handle, Name
from callboard_core.api_keys.schemas import ApiKeyInfo
from callboard_core.guidance import Hint, Step
from callboard_core.schemas import ApiModel, JsonObject, Omittable, Url
from runtime_kits import RuntimeKit, RuntimeTarget

MintRole = Literal["BUYER", "SELLER", "BOTH"]
SetupRole = Literal["UNDECIDED", "BUYER", "SELLER", "BOTH"]
SellerAutonomy = Literal["OWNER_APPROVAL", "AUTO_ACCEPT_WITHIN_POLICY"]
ActivationMode = Literal["SAFE_DEFAULTS", "ADVANCED"]
# runtime_kits.RUNTIME_TARGETS; tests/test_onboarding.py checks the two agree.
SessionStatusName = Literal["PENDING", "IN_PROGRESS", "ACTIVATED", "DISMISSED"]
DraftStatusName = Literal["DRAFT", "CLAIMED", "ACTIVATED"]
SourceName = Literal["onboarding_session", "registration_draft"]

# Integer cents. The ceiling keeps every amount inside a 32-bit column (the agent's auto-publish limit).
Cents = Annotated[int, Field(ge=0, le=2_000_000_000)]
Token = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Text = Annotated[str, StringConstraints(max_length=5000)]
Message = Annotated[str, StringConstraints(max_length=2000)]
MAX_FREE_FORM_BYTES = 65_536


def _bounded(value: Any) -> Any:
    """Free-form JSON is stored as sent, so its size is capped well below the body cap."""
    try:
        size = len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        raise ValueError("not storable as JSON") from None
    if size > MAX_FREE_FORM_BYTES:
        raise ValueError(f"at most {MAX_FREE_FORM_BYTES // 1024} KB of JSON")
    return value


FreeForm = Annotated[Any, AfterValidator(_bounded)]
FreeFormObject = Annotated[JsonObject, AfterValidator(_bounded)]


# --- bodies --------------------------------------------------------------------------------------


class MintBody(ApiModel):
    """What the owner wants from the agent; shown to the agent in the prompt and the setup guide."""

    role: MintRole | None = None
    seller_offer: Text | None = None
    seller_capabilities: CapabilityList | None = None
    seller_pricing: Message | None = None
    owner_guardrails: Text | None = None


class ProposedPolicy(ApiModel):
    allowed_buyer_capabilities: CapabilityList | None = None
    seller_autonomy: SellerAutonomy | None = None
    require_approval_over_cents: Cents | None = None
    max_spend_cents_per_day: Cents | None = None
    max_spend_cents_per_task: Cents | None = None


class OwnerDraftUpdate(ApiModel):
    """The owner's edit of the agent's proposal: only the fields sent change; null clears a field."""

    agent_name: Name | None = None
    proposed_handle: Handle | None = None
    role: Omittable[SetupRole] = None
    buyer_intent: Text | None = None
    seller_manifest: FreeForm | None = None
    proposed_policy: ProposedPolicy | None = None
    owner_questions: Text | None = None


class AgentSetupSave(OwnerDraftUpdate):
    """The agent's proposal (token routes and public drafts): only the fields sent change; what the agent
    proposes it may change but not clear."""

    agent_name: Omittable[Name] = None
    proposed_handle: Omittable[Handle] = None
    proposed_policy: Omittable[ProposedPolicy] = None
    last_message: Omittable[Message] = None


class PresenceBody(ApiModel):
    message: Message | None = None


class TokenBody(ApiModel):
    token: Token


class ClaimBody(ApiModel):
    token: Token
    agent_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None


class ManifestBody(ApiModel):
    manifest: FreeFormObject = Field(
        description="Free-form; `name`, `handle`, `description`, `capabilities` and `endpointUrl` are read "
        "into the draft when they are well-formed."
    )


class ActivationBody(ApiModel):
    """Fields left out come from safe defaults (SAFE_DEFAULTS) or from the agent's proposed policy, then
    safe defaults (ADVANCED)."""

    runtime_target: RuntimeTarget
    activation_mode: ActivationMode = "SAFE_DEFAULTS"
    enable_buyer: bool | None = None
    approve_seller_listing: bool | None = None
    is_test_mode: bool | None = None
    buyer_intent: Text | None = None
    max_spend_cents_per_task: Cents | None = None
    max_spend_cents_per_day: Cents | None = None
    require_approval_over_cents: Cents | None = None
    allowed_buyer_capabilities: CapabilityList | None = None
    seller_autonomy: SellerAutonomy | None = None
    seller_endpoint_url: Url | None = None
    availability: FreeFormObject | None = None


class DraftActivationBody(ActivationBody):
    token: Token


# --- views ---------------------------------------------------------------------------------------


class OwnerRequest(ApiModel):
    role: MintRole | None = None
    seller_offer: str | None = None
    seller_capabilities: list[str] | None = None
    seller_pricing: str | None = None
    owner_guardrails: str | None = None


class SetupDraft(ApiModel):
    agent_name: str | None = None
    proposed_handle: str | None = None
    role: SetupRole | None = None
    buyer_intent: str | None = None
    seller_manifest: Any = None
    proposed_policy: ProposedPolicy | None = None
    owner_questions: str | None = None
    last_message: str | None = None


class OnboardingSessionView(ApiModel):
    id: str
    workspace_slug: str
    status: SessionStatusName
    token_expires_at: datetime
    token_expired: bool
    owner_request: OwnerRequest
    draft: SetupDraft
    last_seen_at: datetime | None
    last_presence_message: str | None
    reviewed_at: datetime | None
    activated_at: datetime | None
    dismissed_at: datetime | None
    agent_id: str | None
    activation_id: str | None
    created_at: datetime
    updated_at: datetime


class SessionEnvelope(ApiModel):
    owner_visible: Literal[True] = True
    next_actions: list[Hint]
    session: OnboardingSessionView | None


class SessionList(ApiModel):
    total: int
    sessions: list[OnboardingSessionView] = Field(description="Newest first, at most 100.")


class Minted(ApiModel):
    session_id: str = Field(description="The session's id: the one its activation names.")
    workspace_slug: str
    token: str = Field(description="The agent's bearer token: shown once, valid for one hour.")
    expires_at: datetime
    prompt: str = Field(description="Paste this to the agent.")


class PresenceAck(ApiModel):
    status: Literal["online"] = "online"
    workspace_slug: str
    presence_id: str


class DraftPresenceAck(ApiModel):
    status: Literal["online"] = "online"
    slug: str


class SetupGuide(ApiModel):
    """What the agent should send, and where (the spec leaves the guide free-form)."""

    slug: str
    status: str
    token_expires_at: datetime
    instructions: list[Hint]
    owner_request: OwnerRequest | None
    draft: SetupDraft
    save_setup: Step
    presence: Step
    fields: dict[str, str]
    runtime_targets: list[str]


class ClaimedKey(ApiModel):
    key: str = Field(description="The full API key, read-only. Shown once.")
    key_info: ApiKeyInfo


class DraftView(ApiModel):
    id: str
    slug: str
    status: DraftStatusName
    claimed: bool
    token_expires_at: datetime
    manifest: JsonObject
    draft: SetupDraft
    last_seen_at: datetime | None
    last_presence_message: str | None
    claimed_at: datetime | None
    activated_at: datetime | None
    linked_agent_id: str | None
    agent_id: str | None
    activation_id: str | None
    created_at: datetime
    updated_at: datetime


class DraftEnvelope(ApiModel):
    human_claim_required: bool
    owner_visible: bool
    next_actions: list[Hint]
    draft: DraftView


class DraftStatusView(ApiModel):
    slug: str
    status: DraftStatusName
    human_claim_required: bool
    owner_visible: bool
    token_expires_at: datetime
    claimed_at: datetime | None
    activated_at: datetime | None
    agent_id: str | None
    runtime_kit: RuntimeKit | None = Field(
        description="Null until a signed-in owner has claimed and activated the draft; then rendered with "
        "a key placeholder (the key comes from the owner or the install-token exchange)."
    )
    next_actions: list[Hint]


class RegistrationStarted(ApiModel):
    slug: str
    workspace_slug: str
    token: str = Field(description="The draft's bearer token: shown once.")
    expires_at: datetime
    setup_url: str
    magic_link_next_url: str = Field(description="Where the owner lands after signing in to claim the draft.")
    prompt: str


class ActivationView(ApiModel):
    id: str
    source: SourceName
    agent_id: str | None
    runtime_target: RuntimeTarget
    activation_mode: ActivationMode
    enable_buyer: bool
    approve_seller_listing: bool
    is_test_mode: bool
    buyer_intent: str | None
    max_spend_cents_per_task: int
    max_spend_cents_per_day: int
    require_approval_over_cents: int
    allowed_buyer_capabilities: list[str]
    seller_autonomy: SellerAutonomy
    seller_endpoint_url: str | None
    availability: JsonObject | None
    created_at: datetime


class _Activated(ApiModel):
    next_actions: list[Hint]
    install_token_expires_at: datetime
    install_command: str = Field(description="Run on the agent's machine; the token inside is single use.")
    key: str = Field(description="The agent's read+write API key. Shown once.")
    key_info: ApiKeyInfo
    runtime_kit: RuntimeKit = Field(description="Rendered with a key placeholder.")
    activation: ActivationView


class SessionActivated(_Activated):
    session: OnboardingSessionView


class DraftActivated(_Activated):
    draft: DraftView


class InstallExchanged(ApiModel):
    install_command: str
    runtime_kit: RuntimeKit = Field(description="Rendered with a new read+write key (label 'kit install').")
    activation: ActivationView
    source: SourceName
    activation_id: str
