"""Activation (shared by onboarding sessions and registration drafts) and the install-token exchange.

Activation resolves the owner's policy, creates the agent under the owner (or configures the agent a draft
was linked to), records the activation, issues the one-time read+write key and a short-lived install token,
and renders the runtime kit with a key placeholder. The exchange spends the install token (compare-and-set)
and mints a fresh key for `callboard kit install`, so no plaintext key is ever stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

import runtime_kits
from callboard_core import clock
from callboard_core.agents import keys as agent_keys
from callboard_core.agents import service as agents
from callboard_core.agents.models import Agent, AgentStatus, ClaimStatus, Intent
from callboard_core.api_keys import service as api_keys
from callboard_core.api_keys.schemas import ApiKeyInfo
from callboard_core.audit import service as audit
from callboard_core.config import Settings
from callboard_core.errors import Conflict, Gone, NotFound, field_error
from callboard_core.guidance import Hint, hint
from callboard_core.ids import new_id
from callboard_core.onboarding import proposal
from callboard_core.onboarding import schemas as onboarding_schemas
from callboard_core.onboarding.models import ActivationSource, InstallToken, OnboardingActivation
from callboard_core.principals import Actor
from callboard_core.security import tokens

INSTALL_TOKEN_TTL = timedelta(minutes=15)
INSTALL_TOKEN_PREFIX = "cbi_"
ACTIVATION_KEY_LABEL = "onboarding activation"
# What a field left out of the activation body becomes when neither the body nor (ADVANCED) the agent's
# proposal sets it: no spending, every paid publish confirmed by the owner, seller work approved by the owner.
SAFE_DEFAULTS: dict[str, Any] = {
    "max_spend_cents_per_task": 0,
    "max_spend_cents_per_day": 0,
    "require_approval_over_cents": 0,
    "allowed_buyer_capabilities": [],
    "seller_autonomy": "OWNER_APPROVAL",
}
_INTENT = {"BUYER": Intent.REQUESTER, "SELLER": Intent.WORKER, "BOTH": Intent.BOTH}


@dataclass
class Subject:
    """What activation needs of an onboarding session or a registration draft."""

    source: ActivationSource
    owner_id: str
    subject_id: str
    draft: onboarding_schemas.SetupDraft
    request: onboarding_schemas.OwnerRequest | None = None  # sessions: the owner's mint
    manifest: dict[str, Any] = field(default_factory=dict)  # drafts: the agent's manifest
    linked_agent_id: str | None = None

    @property
    def role(self) -> str:
        if self.draft.role and self.draft.role != "UNDECIDED":
            return self.draft.role
        if self.request and self.request.role:
            return self.request.role
        return proposal.text(self.manifest, "role", 16) or "UNDECIDED"


@dataclass
class Outcome:
    activation: OnboardingActivation
    agent: Agent
    key: str
    key_info: ApiKeyInfo
    install_command: str
    install_token_expires_at: datetime
    runtime_kit: runtime_kits.RuntimeKit
    next_actions: list[Hint]


def view(row: OnboardingActivation) -> onboarding_schemas.ActivationView:
    return onboarding_schemas.ActivationView.model_validate(row, from_attributes=True)


def answer(outcome: Outcome) -> dict[str, Any]:
    """The activation response's fields shared by sessions and drafts (each adds its own record)."""
    return {
        "next_actions": outcome.next_actions,
        "install_token_expires_at": outcome.install_token_expires_at,
        "install_command": outcome.install_command,
        "key": outcome.key,
        "key_info": outcome.key_info,
        "runtime_kit": outcome.runtime_kit,
        "activation": view(outcome.activation),
    }


def base_url(settings: Settings) -> str:
    return settings.base_url.rstrip("/")


def kit_for(
    settings: Settings, target: str, agent: Agent, api_key: str | None = None
) -> runtime_kits.RuntimeKit:
    return runtime_kits.render_kit(
        target,
        base_url=base_url(settings),
        agent_id=agent.id,
        agent_handle=agent.handle,
        agent_name=agent.name,
        api_key=api_key,
    )


async def agent_of(session: AsyncSession, agent_id: str) -> Agent | None:
    agent = await session.get(Agent, agent_id)
    return agent if agent is not None and agent.deleted_at is None else None


async def for_subject(
    session: AsyncSession, source: ActivationSource, subject_id: str
) -> OnboardingActivation | None:
    column = (
        OnboardingActivation.onboarding_session_id
        if source is ActivationSource.ONBOARDING_SESSION
        else OnboardingActivation.registration_draft_id
    )
    return (
        await session.execute(select(OnboardingActivation).where(column == subject_id))
    ).scalar_one_or_none()


# --- policy ----------------------------------------------------------------------------------------


async def _known_tags(session: AsyncSession, slugs: list[str]) -> tuple[list[str], list[str]]:
    """(known active tag slugs, the rest), order kept: proposals and manifests may name tags loosely."""
    tags, unknown = await agents.split_capabilities(session, [x for x in slugs if x.strip()])
    return [t.slug for t in tags], unknown


async def _policy(
    session: AsyncSession, subject: Subject, body: onboarding_schemas.ActivationBody
) -> tuple[dict[str, Any], list[str]]:
    """The resolved policy: the body first, then (ADVANCED) the agent's proposal, then the safe defaults.
    Returns it with the proposed tags that are not in the taxonomy (dropped)."""
    proposed = subject.draft.proposed_policy if body.activation_mode == "ADVANCED" else None
    policy: dict[str, Any] = {}
    for name, default in SAFE_DEFAULTS.items():
        value = getattr(body, name)
        if value is None and proposed is not None:
            value = getattr(proposed, name)
        policy[name] = default if value is None else value
    dropped: list[str] = []
    if body.allowed_buyer_capabilities is not None:
        tags = await agents.resolve_capabilities(
            session, body.allowed_buyer_capabilities, "allowedBuyerCapabilities"
        )
        policy["allowed_buyer_capabilities"] = [t.slug for t in tags]
    else:
        policy["allowed_buyer_capabilities"], dropped = await _known_tags(
            session, policy["allowed_buyer_capabilities"]
        )
    # Checked on the resolved caps, wherever each came from: 0 a day means no spending at all, so any
    # per-task cap above the daily one could never be used and is a mistake to name now.
    per_task, per_day = policy["max_spend_cents_per_task"], policy["max_spend_cents_per_day"]
    if per_task > per_day:

        def origin(name: str) -> str:
            if getattr(body, name) is not None:
                return ""
            return (
                " from the agent's proposal"
                if proposed is not None and getattr(proposed, name) is not None
                else " by default" + (": no spending" if name == "max_spend_cents_per_day" else "")
            )

        sent_daily_only = body.max_spend_cents_per_day is not None and body.max_spend_cents_per_task is None
        raise field_error(
            "maxSpendCentsPerDay" if sent_daily_only else "maxSpendCentsPerTask",
            f"The per-task cap ({per_task} cents{origin('max_spend_cents_per_task')}) cannot exceed the daily cap "
            f"({per_day} cents{origin('max_spend_cents_per_day')}); send both.",
            "exceeds_daily_cap",
        )
    policy.update(
        enable_buyer=body.enable_buyer if body.enable_buyer is not None else subject.role != "SELLER",
        # Listing a seller is an explicit owner decision: never on by default.
        approve_seller_listing=bool(body.approve_seller_listing),
        is_test_mode=bool(body.is_test_mode),
        buyer_intent=body.buyer_intent if body.buyer_intent is not None else subject.draft.buyer_intent,
        seller_endpoint_url=(
            body.seller_endpoint_url
            or proposal.url(subject.draft.seller_manifest)
            or proposal.url(subject.manifest)
        ),
        availability=body.availability,
    )
    return policy, dropped


# --- the agent -------------------------------------------------------------------------------------


def _seller_tags(subject: Subject) -> list[str]:
    requested = list(subject.request.seller_capabilities or []) if subject.request else []
    return (
        requested
        + proposal.strings(subject.draft.seller_manifest, "capabilities")
        + proposal.strings(subject.manifest, "capabilities")
    )


def _apply(agent: Agent, policy: dict[str, Any], subject: Subject, activation_id: str, target: str) -> None:
    """The policy fields the agent model has; the rest lives on the activation record."""
    agent.requester_enabled = policy["enable_buyer"]
    agent.worker_enabled = policy["approve_seller_listing"]
    agent.auto_publish_limit_cents = policy["require_approval_over_cents"]
    if subject.role in _INTENT:  # UNDECIDED keeps the intent (BOTH for a new agent, a linked agent's own)
        agent.intent = _INTENT[subject.role]
    if policy["seller_endpoint_url"]:
        agent.endpoint_url = policy["seller_endpoint_url"]
    agent.metadata_json = {
        **(agent.metadata_json or {}),
        "onboarding": {
            "activationId": activation_id,
            "runtimeTarget": target,
            "isTestMode": policy["is_test_mode"],
        },
    }
    agent.updated_at = clock.now()


async def _new_agent(session: AsyncSession, subject: Subject) -> tuple[Agent, list[str]]:
    name = subject.draft.agent_name or proposal.text(subject.manifest, "name", 200)
    if not name:
        raise Conflict(
            "The agent has no name yet: set agentName (PATCH the session, or ask the agent to save "
            "its setup) before activating.",
            code="setup_incomplete",
            missing=["agentName"],
        )
    now = clock.now()
    description = (
        (subject.request.seller_offer if subject.request else None)
        or proposal.text(subject.draft.seller_manifest, "description", 5000)
        or proposal.text(subject.manifest, "description", 5000)
    )
    agent = Agent(
        name=name,
        handle=await agents.choose_handle(
            session, subject.draft.proposed_handle or proposal.handle(subject.manifest), name
        ),
        description=description,
        # Pull-based runtimes (MCP, coding runtimes) have no inbound endpoint; sellerEndpointUrl sets one.
        endpoint_url="",
        owner_id=subject.owner_id,
        status=AgentStatus.ACTIVE,
        claim_status=ClaimStatus.CLAIMED,
        claimed_at=now,
        capability_links=[],
    )
    session.add(agent)
    known, unknown = await _known_tags(session, _seller_tags(subject))
    await agents.set_capabilities(session, agent, known)
    return agent, unknown


async def activate(
    session: AsyncSession, settings: Settings, subject: Subject, body: onboarding_schemas.ActivationBody
) -> Outcome:
    """The caller has checked ownership and state (and holds the subject's row)."""
    policy, dropped = await _policy(session, subject, body)
    activation_id = new_id("act")
    if subject.linked_agent_id is not None:
        agent = await agent_keys.mintable_agent(session, subject.linked_agent_id, subject.owner_id)
        unknown: list[str] = []
    else:
        agent, unknown = await _new_agent(session, subject)
    _apply(agent, policy, subject, activation_id, body.runtime_target)
    await agents.flush_agent(session)  # a handle taken meanwhile: 409 handle_taken
    is_session = subject.source is ActivationSource.ONBOARDING_SESSION
    row = OnboardingActivation(
        id=activation_id,
        source=subject.source.value,
        owner_id=subject.owner_id,
        agent_id=agent.id,
        onboarding_session_id=subject.subject_id if is_session else None,
        registration_draft_id=None if is_session else subject.subject_id,
        runtime_target=body.runtime_target,
        activation_mode=body.activation_mode,
        **policy,
    )
    session.add(row)
    created = await agent_keys.mint(
        session,
        agent_id=agent.id,
        owner_id=subject.owner_id,
        scopes=api_keys.READ_WRITE,
        label=ACTIVATION_KEY_LABEL,
        actor_type="user",
        actor_id=subject.owner_id,
    )
    install_token = INSTALL_TOKEN_PREFIX + tokens.new_token(32)
    ticket = InstallToken(
        activation_id=activation_id,
        token_hash=tokens.hash_token(install_token),
        expires_at=clock.now() + INSTALL_TOKEN_TTL,
    )
    session.add(ticket)
    await session.flush()
    audit.record(
        session,
        actor_type="user",
        actor_id=subject.owner_id,
        action="onboarding.activated",
        target_type="agent",
        target_id=agent.id,
        activation_id=activation_id,
        source=str(subject.source),
    )
    command = runtime_kits.install_command(base_url(settings), install_token)
    next_actions = [
        hint(
            f"Run this on the agent's machine before {ticket.expires_at.isoformat()} (single use): {command}"
        ),
        hint(
            "Or configure the runtime yourself: runtimeKit shows the files, with the key below in place of "
            f"{runtime_kits.KEY_PLACEHOLDER}. The key is shown once; the install command replaces it with a key "
            "of its own unless it has been used by then."
        ),
        hint("The agent starts every session with {HOME}."),
        hint("Your agent: {OWNER_AGENT}", agent_id=agent.id),
    ]
    if unknown or dropped:
        next_actions.append(
            hint(
                "Not in the capability taxonomy, so not applied: "
                + ", ".join(unknown + dropped)
                + ". Request custom tags with {OWNER_REQUEST_TAG}."
            )
        )
    return Outcome(
        activation=row,
        agent=agent,
        key=created.key,
        key_info=created.key_info,
        install_command=command,
        install_token_expires_at=ticket.expires_at,
        runtime_kit=kit_for(settings, body.runtime_target, agent),
        next_actions=next_actions,
    )


async def issue_read_key(session: AsyncSession, actor: Actor, agent_id: str) -> onboarding_schemas.ClaimedKey:
    """The onboarding claim's key: read-only, for an agent of the signed-in owner."""
    actor_type, actor_id = actor.audit
    created = await agent_keys.mint(
        session,
        agent_id=agent_id,
        owner_id=actor.require_user(),
        scopes=[api_keys.READ],
        label="onboarding claim",
        actor_type=actor_type,
        actor_id=actor_id,
    )
    return onboarding_schemas.ClaimedKey(key=created.key, key_info=created.key_info)


# --- the install-token exchange --------------------------------------------------------------------


async def exchange(
    session: AsyncSession, settings: Settings, token: str
) -> onboarding_schemas.InstallExchanged:
    """Spend the install token (compare-and-set: of two concurrent exchanges one wins) and mint a new
    read+write key for the activated agent, returned inside the runtime kit. A failure later in the request
    rolls the spend back with everything else."""
    now = clock.now()
    token_hash = tokens.hash_token(token)
    won = (
        await session.execute(
            update(InstallToken)
            .where(
                InstallToken.token_hash == token_hash,
                InstallToken.used_at.is_(None),
                InstallToken.expires_at > now,
            )
            .values(used_at=now)
            .returning(InstallToken.id, InstallToken.activation_id)
            .execution_options(synchronize_session=False)
        )
    ).one_or_none()
    if won is None:
        row = (
            await session.execute(select(InstallToken.used_at).where(InstallToken.token_hash == token_hash))
        ).one_or_none()
        if row is None:
            raise NotFound("No such install token.", code="install_token_not_found")
        if row.used_at is not None:
            raise Gone("This install token was used already; each works once.", code="install_token_used")
        raise Gone(
            "This install token has expired; use the key from the activation, or mint a new key for the "
            "agent (signed in, on the API keys page).",
            code="install_token_expired",
        )
    activation = await session.get(OnboardingActivation, won.activation_id)
    if activation is None or activation.agent_id is None:
        raise NotFound("The activated agent no longer exists.", code="agent_not_found")
    agent = await agent_keys.mintable_agent(session, activation.agent_id, activation.owner_id)
    created = await agent_keys.mint(
        session,
        agent_id=agent.id,
        owner_id=activation.owner_id,
        scopes=api_keys.READ_WRITE,
        label="kit install",
        actor_type="install_token",
        actor_id=won.id,
    )
    # One live key per runtime: the activation's key, shown for configuring the runtime by hand, goes when
    # the kit brings its own, unless something has used it already.
    await api_keys.revoke_unused(
        session, agent.id, label=ACTIVATION_KEY_LABEL, reason="replaced by the key of callboard kit install"
    )
    await session.execute(
        update(InstallToken)
        .where(InstallToken.id == won.id)
        .values(api_key_id=created.key_info.id)
        .execution_options(synchronize_session=False)
    )
    return onboarding_schemas.InstallExchanged(
        install_command=runtime_kits.install_command(base_url(settings), token),
        runtime_kit=kit_for(settings, activation.runtime_target, agent, created.key),
        activation=view(activation),
        source=activation.source,
        activation_id=activation.id,
    )
