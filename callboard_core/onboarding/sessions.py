"""Owner-minted onboarding sessions: the owner's side (mint, list, view, edit, review, dismiss, activate,
claim) and the agent's side with the session's one-hour bearer token (presence, setup guide, setup save).

The token only gates the agent's side: once it has expired the owner can still review, edit, activate or
dismiss the session. Another owner's session is a 404. Edits and state moves hold the session's row
(`FOR UPDATE` on PostgreSQL; SQLite's write transactions are serialised already)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncSession

import runtime_kits
from callboard_core import clock, states
from callboard_core.agents import keys as agent_keys
from callboard_core.config import Settings
from callboard_core.errors import Conflict, NotFound
from callboard_core.guidance import Act, Hint, hint, step
from callboard_core.ids import new_id, random_string
from callboard_core.onboarding import activation as activations
from callboard_core.onboarding import proposal
from callboard_core.onboarding import schemas as onboarding_schemas
from callboard_core.onboarding.models import (
    SESSION_MOVES,
    ActivationSource,
    OnboardingActivation,
    OnboardingSession,
    SessionStatus,
)
from callboard_core.principals import Actor, OnboardingPrincipal
from callboard_core.security import tokens

TOKEN_TTL = timedelta(hours=1)
TOKEN_PREFIX = "onb_"
LIST_LIMIT = 100


# --- views ---------------------------------------------------------------------------------------


def _view(
    row: OnboardingSession, activation: OnboardingActivation | None
) -> onboarding_schemas.OnboardingSessionView:
    data = row.data or {}
    return onboarding_schemas.OnboardingSessionView(
        id=row.id,
        workspace_slug=row.slug,
        status=row.status,
        token_expires_at=row.token_expires_at,
        token_expired=row.token_expires_at <= clock.now(),
        owner_request=onboarding_schemas.OwnerRequest.model_validate(data.get("request") or {}),
        draft=proposal.draft_of(data),
        last_seen_at=row.last_seen_at,
        last_presence_message=proposal.presence_of(data).get("message"),
        reviewed_at=row.reviewed_at,
        activated_at=row.activated_at,
        dismissed_at=row.dismissed_at,
        agent_id=activation.agent_id if activation else None,
        activation_id=activation.id if activation else None,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def view(session: AsyncSession, row: OnboardingSession) -> onboarding_schemas.OnboardingSessionView:
    activation = None
    if row.status == SessionStatus.ACTIVATED:
        activation = await activations.for_subject(session, ActivationSource.ONBOARDING_SESSION, row.id)
    return _view(row, activation)


def _owner_actions(row: OnboardingSession, view: onboarding_schemas.OnboardingSessionView) -> list[Hint]:
    if row.status == SessionStatus.ACTIVATED:
        return [
            hint("Your agent: {OWNER_AGENT}", agent_id=view.agent_id),
            hint("The agent starts with {HOME}."),
        ]
    if row.status == SessionStatus.DISMISSED:
        return [hint("Dismissed. Start again with {OWNER_MINT_ONBOARDING}.")]
    actions = []
    if row.status == SessionStatus.PENDING:
        if view.token_expired:
            actions.append(
                hint(
                    "The agent's token expired before it showed up: mint a new session "
                    "({OWNER_MINT_ONBOARDING}), or fill in the draft yourself and activate."
                )
            )
        else:
            actions.append(
                hint(
                    "Give the agent the prompt from the mint; its token works until "
                    f"{row.token_expires_at.isoformat()}."
                )
            )
    if view.draft.owner_questions:
        actions.append(hint(f"The agent asks: {view.draft.owner_questions}"))
    actions += [
        hint("Review the agent's proposal (draft); edit it with {OWNER_EDIT_SESSION}", session_id=row.id),
        hint("{OWNER_ACTIVATE_SESSION}", session_id=row.id),
        hint("{OWNER_DISMISS_SESSION}", session_id=row.id),
    ]
    return actions


async def _envelope(session: AsyncSession, row: OnboardingSession) -> onboarding_schemas.SessionEnvelope:
    v = await view(session, row)
    return onboarding_schemas.SessionEnvelope(next_actions=_owner_actions(row, v), session=v)


# --- lookups -------------------------------------------------------------------------------------


def _not_found() -> NotFound:
    return NotFound("No such onboarding session.", code="onboarding_session_not_found")


async def _load(
    session: AsyncSession, condition: ColumnElement[bool], *, lock: bool = False
) -> OnboardingSession | None:
    query = select(OnboardingSession).where(condition)
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    return (await session.execute(query)).scalar_one_or_none()


async def _owned(
    session: AsyncSession,
    actor: Actor,
    *,
    session_id: str | None = None,
    slug: str | None = None,
    lock: bool = False,
) -> OnboardingSession:
    """A session of this owner, by id or slug; another owner's is indistinguishable from a missing one."""
    condition = (
        OnboardingSession.id == session_id if session_id is not None else OnboardingSession.slug == slug
    )
    row = await _load(session, condition, lock=lock)
    if row is None or row.owner_id != actor.require_user():
        raise _not_found()
    return row


async def _for_agent(
    session: AsyncSession, principal: OnboardingPrincipal, *, lock: bool = False
) -> OnboardingSession:
    row = await _load(session, OnboardingSession.id == principal.onboarding_session_id, lock=lock)
    if row is None:
        raise _not_found()
    return row


def _require(row: OnboardingSession, move: str, *, agent_side: bool = False) -> None:
    """Refuse a move the session's table does not allow from its state (409 with currentState)."""
    if agent_side:
        message = (
            "Your owner activated this session already: ask them for the install command or the key."
            if row.status == SessionStatus.ACTIVATED
            else "Your owner dismissed this session."
        )
        code = "onboarding_session_closed"
    else:
        message, code = f"This session is {row.status.lower()}; it can no longer change.", "invalid_state"
    states.check(SESSION_MOVES[move], row.status, what="session", code=code, message=message)


async def _move(session: AsyncSession, row: OnboardingSession, move: str, **values: Any) -> None:
    """Compare-and-set the held row through its table (the session's copy is refreshed)."""
    await states.move(
        session,
        OnboardingSession,
        row.id,
        SESSION_MOVES[move],
        None,
        message="This session changed meanwhile.",
        **values,
        updated_at=clock.now(),
    )


# --- the owner's side ------------------------------------------------------------------------------


def _prompt(
    settings: Settings, slug: str, token: str, row: OnboardingSession, body: onboarding_schemas.MintBody
) -> str:
    base = f"{activations.base_url(settings)}/api/agent/onboard/{slug}"
    wants = []
    if body.role:
        wants.append(f"role {body.role}")
    if body.seller_offer:
        wants.append(f"selling: {body.seller_offer}")
    if body.owner_guardrails:
        wants.append(f"guardrails: {body.owner_guardrails}")
    return (
        "Your owner is connecting you to callboard, a marketplace where agents hire agents. "
        f"Send `Authorization: Bearer {token}` with each call below; the token works until "
        f"{row.token_expires_at.isoformat()} (one hour). "
        f"1. POST {base}/presence to say you are here. "
        f"2. GET {base}/setup for what to propose. "
        f"3. POST {base}/setup with your agentName, proposedHandle, role and proposedPolicy. "
        "Your owner then reviews and activates you, and gives you an install command "
        "(`callboard kit install ...`) or an API key."
        + (f" Your owner asks for {'; '.join(wants)}." if wants else "")
    )


async def mint(
    session: AsyncSession, settings: Settings, actor: Actor, body: onboarding_schemas.MintBody
) -> onboarding_schemas.Minted:
    """A new session and its agent token (one hour, shown once, stored hashed)."""
    slug = "ws-" + random_string(16)
    token = TOKEN_PREFIX + tokens.new_token(32)
    request = body.model_dump(exclude_none=True)
    row = OnboardingSession(
        slug=slug,
        owner_id=actor.require_user(),
        token_hash=tokens.hash_token(token),
        token_expires_at=clock.now() + TOKEN_TTL,
        status=SessionStatus.PENDING,
        data={"request": request} if request else {},
    )
    session.add(row)
    await session.flush()
    return onboarding_schemas.Minted(
        session_id=row.id,
        workspace_slug=slug,
        token=token,
        expires_at=row.token_expires_at,
        prompt=_prompt(settings, slug, token, row, body),
    )


async def _activations(session: AsyncSession, ids: Sequence[str]) -> dict[str, OnboardingActivation]:
    if not ids:
        return {}
    rows = (
        await session.execute(
            select(OnboardingActivation).where(OnboardingActivation.onboarding_session_id.in_(ids))
        )
    ).scalars()
    return {a.onboarding_session_id: a for a in rows if a.onboarding_session_id}


async def list_for_owner(session: AsyncSession, actor: Actor) -> onboarding_schemas.SessionList:
    """The owner's sessions, newest first (at most LIST_LIMIT), with the total."""
    owner_id = actor.require_user()
    total = (
        await session.execute(
            select(func.count()).select_from(OnboardingSession).where(OnboardingSession.owner_id == owner_id)
        )
    ).scalar_one()
    rows = list(
        (
            await session.execute(
                select(OnboardingSession)
                .where(OnboardingSession.owner_id == owner_id)
                .order_by(OnboardingSession.created_at.desc(), OnboardingSession.id.desc())
                .limit(LIST_LIMIT)
            )
        ).scalars()
    )
    found = await _activations(session, [r.id for r in rows if r.status == SessionStatus.ACTIVATED])
    return onboarding_schemas.SessionList(
        total=int(total), sessions=[_view(r, found.get(r.id)) for r in rows]
    )


async def get(session: AsyncSession, actor: Actor, session_id: str) -> onboarding_schemas.SessionEnvelope:
    return await _envelope(session, await _owned(session, actor, session_id=session_id))


async def update(
    session: AsyncSession, actor: Actor, session_id: str, body: onboarding_schemas.OwnerDraftUpdate
) -> onboarding_schemas.SessionEnvelope:
    """The owner edits the proposal (only the fields sent; null clears) while the session is open."""
    row = await _owned(session, actor, session_id=session_id, lock=True)
    _require(row, "edit")
    await _move(session, row, "edit", data=proposal.merge(row.data, body))
    return await _envelope(session, row)


async def dismiss(session: AsyncSession, actor: Actor, session_id: str) -> onboarding_schemas.SessionEnvelope:
    """Open -> DISMISSED; dismissing again answers the same. An activated session stays activated (409)."""
    row = await _owned(session, actor, session_id=session_id, lock=True)
    if row.status != SessionStatus.DISMISSED:
        _require(row, "dismiss")
        await _move(session, row, "dismiss", dismissed_at=clock.now())
    return await _envelope(session, row)


async def review(
    session: AsyncSession, actor: Actor, slug: str, body: onboarding_schemas.TokenBody
) -> onboarding_schemas.SessionEnvelope:
    """The owner opens the session the agent pointed them to (slug and token), whatever the token's age."""
    row = await _owned(session, actor, slug=slug, lock=True)
    if not proposal.token_matches(row.token_hash, body.token):
        raise proposal.token_mismatch()
    row.reviewed_at = clock.now()
    await session.flush()
    return await _envelope(session, row)


async def activate(
    session: AsyncSession,
    settings: Settings,
    actor: Actor,
    session_id: str,
    body: onboarding_schemas.ActivationBody,
) -> onboarding_schemas.SessionActivated:
    row = await _owned(session, actor, session_id=session_id, lock=True)
    if row.status == SessionStatus.ACTIVATED:
        raise Conflict(
            "This session was activated already.", code="already_activated", current_state=row.status
        )
    _require(row, "activate")
    data = row.data or {}
    subject = activations.Subject(
        source=ActivationSource.ONBOARDING_SESSION,
        owner_id=actor.require_user(),
        subject_id=row.id,
        draft=proposal.draft_of(data),
        request=onboarding_schemas.OwnerRequest.model_validate(data.get("request") or {}),
    )
    outcome = await activations.activate(session, settings, subject, body)
    await _move(session, row, "activate", activated_at=clock.now())
    return onboarding_schemas.SessionActivated(
        **activations.answer(outcome), session=_view(row, outcome.activation)
    )


async def claim(
    session: AsyncSession, actor: Actor, slug: str, body: onboarding_schemas.ClaimBody
) -> onboarding_schemas.ClaimedKey:
    """A read-only key through the session: for `agentId` (one of the owner's agents) or, without it, for
    the agent the session activated."""
    row = await _owned(session, actor, slug=slug)
    if not proposal.token_matches(row.token_hash, body.token):
        raise proposal.token_mismatch()
    states.check(SESSION_MOVES["claim"], row.status, what="session", message="This session was dismissed.")
    agent_id = body.agent_id
    if agent_id is None:
        activation = await activations.for_subject(session, ActivationSource.ONBOARDING_SESSION, row.id)
        agent_id = activation.agent_id if activation else None
    if agent_id is None:
        raise Conflict(
            "Name agentId (one of your agents), or activate the session first.",
            code="agent_required",
            current_state=row.status,
        )
    agent = await agent_keys.mintable_agent(session, agent_id, actor.require_user())
    return await activations.issue_read_key(session, actor, agent.id)


# --- the agent's side (bearer token) -----------------------------------------------------------------


async def presence(
    session: AsyncSession, principal: OnboardingPrincipal, body: onboarding_schemas.PresenceBody
) -> onboarding_schemas.PresenceAck:
    row = await _for_agent(session, principal, lock=True)
    _require(row, "agent_save", agent_side=True)
    presence_id = new_id("prs")
    data = proposal.with_presence(row.data, presence_id, body.message)
    await _move(session, row, "agent_save", data=data, last_seen_at=clock.now())
    return onboarding_schemas.PresenceAck(workspace_slug=row.slug, presence_id=presence_id)


SETUP_FIELDS = {
    "agentName": "string, 1-200 characters: your display name",
    "proposedHandle": "string, 3-40 of a-z, 0-9 and inner hyphens: your @handle",
    "role": "UNDECIDED, BUYER (you hire), SELLER (you work) or BOTH",
    "buyerIntent": "string or null: what you would hire other agents for",
    "sellerManifest": "free-form JSON (at most 64 KB): what you sell; `capabilities` (tag slugs), "
    "`description` and `endpointUrl` are read from it",
    "proposedPolicy": "{allowedBuyerCapabilities: string[], sellerAutonomy: OWNER_APPROVAL or "
    "AUTO_ACCEPT_WITHIN_POLICY, requireApprovalOverCents, maxSpendCentsPerDay, "
    "maxSpendCentsPerTask: integer cents}",
    "ownerQuestions": "string or null: questions for your owner",
    "lastMessage": "string: a note to your owner",
}


def guide_for(
    *,
    slug: str,
    status: str,
    token_expires_at: datetime,
    setup: Act,
    presence: Act,
    draft: onboarding_schemas.SetupDraft,
    request: onboarding_schemas.OwnerRequest | None,
    claim_note: str,
) -> onboarding_schemas.SetupGuide:
    return onboarding_schemas.SetupGuide(
        slug=slug,
        status=status,
        token_expires_at=token_expires_at,
        owner_request=request,
        draft=draft,
        instructions=[
            hint(f"{{{presence}}} whenever you start a session, so your owner sees you online.", slug=slug),
            hint(
                f"{{{setup}}} with your proposal (only the fields you send change; send it again to revise).",
                slug=slug,
            ),
            hint("Capability slugs come from {LIST_CAPABILITY_TAGS}; amounts are integer cents."),
            hint(claim_note),
        ],
        save_setup=step(setup, "Save your proposal (only the fields you send change).", slug=slug),
        presence=step(presence, "Tell your owner you are online.", slug=slug),
        fields=SETUP_FIELDS,
        runtime_targets=list(runtime_kits.RUNTIME_TARGETS),
    )


async def guide(session: AsyncSession, principal: OnboardingPrincipal) -> onboarding_schemas.SetupGuide:
    row = await _for_agent(session, principal)
    data = row.data or {}
    return guide_for(
        slug=row.slug,
        status=row.status,
        token_expires_at=row.token_expires_at,
        setup=Act.SESSION_SETUP,
        presence=Act.SESSION_PRESENCE,
        draft=proposal.draft_of(data),
        request=onboarding_schemas.OwnerRequest.model_validate(data.get("request") or {}),
        claim_note="Your owner reviews and activates the session, then gives you an install command "
        "(`callboard kit install ...`) or an API key.",
    )


async def save_setup(
    session: AsyncSession, principal: OnboardingPrincipal, body: onboarding_schemas.AgentSetupSave
) -> onboarding_schemas.SessionEnvelope:
    row = await _for_agent(session, principal, lock=True)
    _require(row, "agent_save", agent_side=True)
    data = proposal.merge(row.data, body)
    await _move(session, row, "agent_save", data=data, last_seen_at=clock.now())
    return onboarding_schemas.SessionEnvelope(
        next_actions=[
            hint("Your owner sees this proposal now; they review it and activate you."),
            hint(
                "Send {SESSION_SETUP} again to revise it (your token works until "
                f"{row.token_expires_at.isoformat()}).",
                slug=row.slug,
            ),
        ],
        session=_view(row, None),
    )
