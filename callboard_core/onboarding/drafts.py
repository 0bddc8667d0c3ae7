"""Registration drafts: an agent with no human account registers a manifest and gets a draft (slug and a
bearer token); a signed-in owner claims the draft with that token and activates it.

The agent's routes are public (no account) but need the draft's token as `Authorization: Bearer`; it lasts
DRAFT_TOKEN_TTL. Claiming keeps the draft under review and issues no credentials; activation creates the
agent, the key and the install token (see activation.py). Until then the status withholds the kit."""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.agents import keys as agent_keys
from callboard_core.config import Settings
from callboard_core.errors import Conflict, Gone, NotFound, Unauthenticated
from callboard_core.guidance import Act, Hint, hint, step
from callboard_core.ids import new_id, random_string
from callboard_core.onboarding import activation as activations
from callboard_core.onboarding import proposal
from callboard_core.onboarding import schemas as onboarding_schemas
from callboard_core.onboarding.models import (
    DRAFT_MOVES,
    ActivationSource,
    DraftStatus,
    OnboardingActivation,
    RegistrationDraft,
)
from callboard_core.onboarding.sessions import guide_for
from callboard_core.principals import Actor
from callboard_core.security import tokens

# Long enough for the agent's human to sign in and claim; the owner's actions after the claim ignore it.
DRAFT_TOKEN_TTL = timedelta(days=7)
TOKEN_PREFIX = "rgt_"
ALTERNATIVES = [
    hint("{REGISTER_MANIFEST} (a draft your owner claims and activates)"),
    hint("{OWNER_MINT_ONBOARDING} (your owner starts an onboarding session for you)"),
    hint("{REGISTER_AGENT} (a provisional agent with a claim link)"),
]


def start() -> NoReturn:
    raise Gone(
        "Public registration is unavailable. Register a manifest instead, or ask your owner for an "
        "onboarding session.",
        code="public_registration_unavailable",
        alternatives=ALTERNATIVES,
    )


# --- views ---------------------------------------------------------------------------------------


def _view(row: RegistrationDraft, activation: OnboardingActivation | None) -> onboarding_schemas.DraftView:
    data = row.data or {}
    return onboarding_schemas.DraftView(
        id=row.id,
        slug=row.slug,
        status=row.status,
        claimed=row.owner_id is not None,
        token_expires_at=row.token_expires_at,
        manifest=row.manifest,
        draft=proposal.draft_of(data),
        last_seen_at=row.last_seen_at,
        last_presence_message=proposal.presence_of(data).get("message"),
        claimed_at=row.claimed_at,
        activated_at=row.activated_at,
        linked_agent_id=row.linked_agent_id,
        agent_id=activation.agent_id if activation else None,
        activation_id=activation.id if activation else None,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def _activation(session: AsyncSession, row: RegistrationDraft) -> OnboardingActivation | None:
    if row.status != DraftStatus.ACTIVATED:
        return None
    return await activations.for_subject(session, ActivationSource.REGISTRATION_DRAFT, row.id)


def _agent_actions(row: RegistrationDraft) -> list[Hint]:
    slug = row.slug
    if row.status == DraftStatus.DRAFT:
        return [
            hint(
                "Ask your owner to sign in and claim this draft with your token: {OWNER_CLAIM_DRAFT} "
                f"(after signing in they land on {_claim_page(slug)}).",
                slug=slug,
            ),
            hint("Meanwhile, {DRAFT_SETUP} with your proposal; poll {DRAFT_STATUS}.", slug=slug),
        ]
    if row.status == DraftStatus.CLAIMED:
        return [
            hint(
                "Your owner claimed this draft and is reviewing it; nothing is published and no credentials "
                "are issued until they activate it. Poll {DRAFT_STATUS}.",
                slug=slug,
            )
        ]
    return [
        hint(
            "Your owner activated you: ask them for the install command (`callboard kit install ...`) or the "
            "API key; runtimeKit shows where the key goes."
        ),
        hint("Then start with {HOME}."),
    ]


def _owner_actions(row: RegistrationDraft, activation: OnboardingActivation | None) -> list[Hint]:
    if activation is not None:
        return [hint("Your agent: {OWNER_AGENT}", agent_id=activation.agent_id)]
    return [
        hint("Review the agent's manifest and proposal (draft)."),
        hint("{OWNER_ACTIVATE_DRAFT} with the token and the policy to create the agent.", slug=row.slug),
    ]


def _claim_page(slug: str) -> str:
    return f"/onboarding/drafts/{slug}"


# --- lookups -------------------------------------------------------------------------------------


def _not_found() -> NotFound:
    return NotFound("No such registration draft.", code="registration_draft_not_found")


async def _by_slug(session: AsyncSession, slug: str, *, lock: bool = False) -> RegistrationDraft | None:
    query = select(RegistrationDraft).where(RegistrationDraft.slug == slug)
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    return (await session.execute(query)).scalar_one_or_none()


def missing_token() -> Unauthenticated:
    return Unauthenticated(
        "Send the draft's token as 'Authorization: Bearer <token>'.", code="missing_draft_token"
    )


async def _for_agent(
    session: AsyncSession, slug: str, token: str | None, *, lock: bool = False
) -> RegistrationDraft:
    """The draft behind the slug, if token is its live bearer token (401 otherwise, as for any credential)."""
    if not token:
        raise missing_token()
    row = await _by_slug(session, slug, lock=lock) if len(token) <= 256 else None
    if (
        row is None
        or not proposal.token_matches(row.token_hash, token)
        or row.token_expires_at <= clock.now()
    ):
        raise Unauthenticated(
            "The draft token is not valid for this draft, or has expired.", code="invalid_draft_token"
        )
    return row


# --- the agent's side ------------------------------------------------------------------------------


async def create(
    session: AsyncSession, settings: Settings, body: onboarding_schemas.ManifestBody
) -> onboarding_schemas.RegistrationStarted:
    """A draft from the agent's manifest; well-formed `name`, `handle` and `role` seed its proposal."""
    manifest = body.manifest
    draft: dict[str, object] = {}
    if name := proposal.text(manifest, "name", 200):
        draft["agent_name"] = name
    if handle := proposal.handle(manifest):
        draft["proposed_handle"] = handle
    if (role := proposal.text(manifest, "role", 16)) in ("UNDECIDED", "BUYER", "SELLER", "BOTH"):
        draft["role"] = role
    slug = "rg-" + random_string(16)
    token = TOKEN_PREFIX + tokens.new_token(32)
    row = RegistrationDraft(
        slug=slug,
        token_hash=tokens.hash_token(token),
        status=DraftStatus.DRAFT,
        token_expires_at=clock.now() + DRAFT_TOKEN_TTL,
        manifest=manifest,
        data={"draft": draft},
    )
    session.add(row)
    await session.flush()
    base = activations.base_url(settings)
    setup_url = f"{base}/api/agent/register/{slug}/setup"
    # Addresses, as a claim link is one: the prompt is pasted into an agent that knows no base URL yet.
    prompt = (
        f"Your registration draft is {slug}. Send `Authorization: Bearer {token}` on the draft's addresses "
        f"(valid until {row.token_expires_at.isoformat()}; shown once, keep it). "
        f"Read {setup_url} for what to propose, send your proposal to that same address, and poll "
        f"{base}/api/agent/register/{slug}/status. A human owner must sign in, claim the draft with this "
        "token and activate it before you get marketplace credentials."
    )
    return onboarding_schemas.RegistrationStarted(
        slug=slug,
        workspace_slug=slug,
        token=token,
        expires_at=row.token_expires_at,
        setup_url=setup_url,
        magic_link_next_url=_claim_page(slug),
        prompt=prompt,
    )


async def presence(
    session: AsyncSession, slug: str, token: str | None, body: onboarding_schemas.PresenceBody
) -> onboarding_schemas.DraftPresenceAck:
    row = await _for_agent(session, slug, token, lock=True)
    row.data = proposal.with_presence(row.data, new_id("prs"), body.message)
    row.last_seen_at = row.updated_at = clock.now()
    await session.flush()
    return onboarding_schemas.DraftPresenceAck(slug=row.slug)


async def guide(session: AsyncSession, slug: str, token: str | None) -> onboarding_schemas.SetupGuide:
    row = await _for_agent(session, slug, token)
    return guide_for(
        slug=row.slug,
        status=row.status,
        token_expires_at=row.token_expires_at,
        setup=Act.DRAFT_SETUP,
        presence=Act.DRAFT_PRESENCE,
        draft=proposal.draft_of(row.data),
        request=None,
        claim_note="A human owner signs in, claims this draft with your token and activates it; only then do "
        "you get credentials (GET the status route to see).",
    )


async def save_setup(
    session: AsyncSession, slug: str, token: str | None, body: onboarding_schemas.AgentSetupSave
) -> onboarding_schemas.DraftEnvelope:
    row = await _for_agent(session, slug, token, lock=True)
    edit = DRAFT_MOVES["edit"]
    message = "Your owner activated this draft already."
    states.check(edit, row.status, what="draft", code="draft_closed", message=message)
    now = clock.now()
    data = proposal.merge(row.data, body)
    await states.move(
        session,
        RegistrationDraft,
        row.id,
        edit,
        None,
        message=message,
        code="draft_closed",
        data=data,
        last_seen_at=now,
        updated_at=now,
    )
    claimed = row.owner_id is not None
    return onboarding_schemas.DraftEnvelope(
        human_claim_required=not claimed,
        owner_visible=claimed,
        next_actions=_agent_actions(row),
        draft=_view(row, None),
    )


async def status(
    session: AsyncSession, settings: Settings, slug: str, token: str | None
) -> onboarding_schemas.DraftStatusView:
    """The kit is withheld until a signed-in owner has claimed and activated the draft, and then carries a
    key placeholder: the key itself reaches the agent through its owner."""
    row = await _for_agent(session, slug, token)
    activation = await _activation(session, row)
    kit = None
    if activation is not None and activation.agent_id is not None:
        agent = await activations.agent_of(session, activation.agent_id)
        kit = activations.kit_for(settings, activation.runtime_target, agent) if agent else None
    return onboarding_schemas.DraftStatusView(
        slug=row.slug,
        status=row.status,
        human_claim_required=row.owner_id is None,
        owner_visible=row.owner_id is not None,
        token_expires_at=row.token_expires_at,
        claimed_at=row.claimed_at,
        activated_at=row.activated_at,
        agent_id=activation.agent_id if activation else None,
        runtime_kit=kit,
        next_actions=_agent_actions(row),
    )


# --- the owner's side ------------------------------------------------------------------------------


async def claim(
    session: AsyncSession, actor: Actor, slug: str, body: onboarding_schemas.ClaimBody
) -> onboarding_schemas.DraftEnvelope:
    """The signed-in owner takes an unclaimed draft whose token they hold (claiming again is a no-op).
    `agentId` links one of the owner's agents: activation then configures it instead of creating one.
    A draft claimed by another owner is a 404, like an unknown one; so is a wrong token on an unclaimed draft."""
    owner_id = actor.require_user()
    row = await _by_slug(session, slug, lock=True)
    if row is None or (row.owner_id is not None and row.owner_id != owner_id):
        raise _not_found()
    matches = proposal.token_matches(row.token_hash, body.token)
    if row.owner_id is None:
        if not matches:
            raise _not_found()
        if row.token_expires_at <= clock.now():
            raise Gone(
                "This draft's token has expired; the agent registers its manifest again.",
                code="draft_expired",
            )
        await states.move(
            session,
            RegistrationDraft,
            row.id,
            DRAFT_MOVES["claim"],
            DraftStatus.CLAIMED,
            RegistrationDraft.owner_id.is_(None),
            message="This draft was claimed meanwhile.",
            owner_id=owner_id,
            claimed_at=clock.now(),
        )
    elif not matches:
        raise proposal.token_mismatch()
    if body.agent_id is not None and body.agent_id != row.linked_agent_id:
        states.check(
            DRAFT_MOVES["edit"], row.status, what="draft", message="This draft was activated already."
        )
        row.linked_agent_id = (await agent_keys.mintable_agent(session, body.agent_id, owner_id)).id
    row.updated_at = clock.now()
    await session.flush()
    activation = await _activation(session, row)
    return onboarding_schemas.DraftEnvelope(
        human_claim_required=False,
        owner_visible=True,
        next_actions=_owner_actions(row, activation),
        draft=_view(row, activation),
    )


async def activate(
    session: AsyncSession,
    settings: Settings,
    actor: Actor,
    slug: str,
    body: onboarding_schemas.DraftActivationBody,
) -> onboarding_schemas.DraftActivated:
    owner_id = actor.require_user()
    row = await _by_slug(session, slug, lock=True)
    if row is None or (row.owner_id is not None and row.owner_id != owner_id):
        raise _not_found()
    matches = proposal.token_matches(row.token_hash, body.token)
    if row.owner_id is None:
        if not matches:
            raise _not_found()
        raise Conflict(
            "Claim the draft first (signed in, with the agent's draft token), then activate it.",
            code="claim_required",
            current_state=row.status,
            next_action=step(Act.OWNER_CLAIM_DRAFT, "Claim the draft with the agent's token.", slug=row.slug),
        )
    if not matches:
        raise proposal.token_mismatch()
    if row.status == DraftStatus.ACTIVATED:
        raise Conflict(
            "This draft was activated already.", code="already_activated", current_state=row.status
        )
    subject = activations.Subject(
        source=ActivationSource.REGISTRATION_DRAFT,
        owner_id=owner_id,
        subject_id=row.id,
        draft=proposal.draft_of(row.data),
        manifest=row.manifest,
        linked_agent_id=row.linked_agent_id,
    )
    outcome = await activations.activate(session, settings, subject, body)
    now = clock.now()
    await states.move(
        session,
        RegistrationDraft,
        row.id,
        DRAFT_MOVES["activate"],
        DraftStatus.ACTIVATED,
        message="This draft changed meanwhile.",
        activated_at=now,
        updated_at=now,
    )
    return onboarding_schemas.DraftActivated(
        **activations.answer(outcome), draft=_view(row, outcome.activation)
    )
