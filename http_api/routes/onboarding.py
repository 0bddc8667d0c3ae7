"""Onboarding sessions (owner-minted; the agent's side with the session's bearer token), registration drafts
(an agent's manifest, claimed and activated by a signed-in owner) and the install-token exchange."""

from __future__ import annotations

from typing import NoReturn

from callboard_core.onboarding import activation, drafts, sessions
from callboard_core.onboarding import schemas as onboarding_schemas
from callboard_core.ratelimit import PUBLIC
from http_api.auth import bearer_token
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("onboarding")
SESSION, BEARER = AuthKind.SESSION, AuthKind.ONBOARDING


# --- onboarding sessions: the owner ----------------------------------------------------------------


@routes.post(
    "/api/onboarding/mint",
    auth=SESSION,
    body=onboarding_schemas.MintBody,
    body_optional=True,
    response=onboarding_schemas.Minted,
    status=201,
)
async def mint_session(ctx: RequestContext) -> onboarding_schemas.Minted:
    """Start an onboarding session: a workspace slug and the agent's bearer token (one hour, shown once)
    with a prompt to paste to the agent."""
    return await sessions.mint(ctx.session, ctx.core.settings, ctx.actor, ctx.body)


@routes.get("/api/onboarding/sessions", auth=SESSION, response=onboarding_schemas.SessionList)
async def list_sessions(ctx: RequestContext) -> onboarding_schemas.SessionList:
    """Your onboarding sessions, newest first (at most 100), and how many there are."""
    return await sessions.list_for_owner(ctx.session, ctx.actor)


@routes.get("/api/onboarding/sessions/{sessionId}", auth=SESSION, response=onboarding_schemas.SessionEnvelope)
async def get_session(ctx: RequestContext) -> onboarding_schemas.SessionEnvelope:
    """One of your sessions with the agent's proposal; still actionable after the agent's token expired."""
    return await sessions.get(ctx.session, ctx.actor, ctx.params["sessionId"])


@routes.patch(
    "/api/onboarding/sessions/{sessionId}",
    auth=SESSION,
    body=onboarding_schemas.OwnerDraftUpdate,
    response=onboarding_schemas.SessionEnvelope,
)
async def update_session(ctx: RequestContext) -> onboarding_schemas.SessionEnvelope:
    """Edit the agent's proposal while the session is open: only the fields sent change; null clears one."""
    return await sessions.update(ctx.session, ctx.actor, ctx.params["sessionId"], ctx.body)


@routes.post(
    "/api/onboarding/sessions/{sessionId}/dismiss", auth=SESSION, response=onboarding_schemas.SessionEnvelope
)
async def dismiss_session(ctx: RequestContext) -> onboarding_schemas.SessionEnvelope:
    """Dismiss a stale or unwanted session; the agent's side stops (409 onboarding_session_closed)."""
    return await sessions.dismiss(ctx.session, ctx.actor, ctx.params["sessionId"])


@routes.post(
    "/api/onboarding/sessions/{slug}/review",
    auth=SESSION,
    body=onboarding_schemas.TokenBody,
    response=onboarding_schemas.SessionEnvelope,
)
async def review_session(ctx: RequestContext) -> onboarding_schemas.SessionEnvelope:
    """Open the session an agent pointed you to, by its slug and token (also after the token expired)."""
    return await sessions.review(ctx.session, ctx.actor, ctx.params["slug"], ctx.body)


@routes.post(
    "/api/onboarding/sessions/{sessionId}/activate",
    auth=SESSION,
    body=onboarding_schemas.ActivationBody,
    response=onboarding_schemas.SessionActivated,
    status=201,
)
async def activate_session(ctx: RequestContext) -> onboarding_schemas.SessionActivated:
    """Create the agent under you with the policy, and return its key (shown once), the runtime kit and
    an install command whose token works once, for 15 minutes.

    Policy fields left out: SAFE_DEFAULTS uses no spending and owner approval for everything; ADVANCED
    takes the agent's proposed policy first."""
    return await sessions.activate(
        ctx.session, ctx.core.settings, ctx.actor, ctx.params["sessionId"], ctx.body
    )


@routes.post(
    "/api/onboarding/install-token/exchange",
    auth=AuthKind.PUBLIC,
    body=onboarding_schemas.TokenBody,
    response=onboarding_schemas.InstallExchanged,
    rate_limit=PUBLIC,
    errors=(404, 410),
)
async def exchange_install_token(ctx: RequestContext) -> onboarding_schemas.InstallExchanged:
    """Exchange an install token (single use, 15 minutes) for the runtime kit with a new read+write key."""
    return await activation.exchange(ctx.session, ctx.core.settings, ctx.body.token)


# --- onboarding sessions: the agent (bearer token) -------------------------------------------------


@routes.post(
    "/api/agent/onboard/{slug}/presence",
    auth=BEARER,
    body=onboarding_schemas.PresenceBody,
    body_optional=True,
    response=onboarding_schemas.PresenceAck,
    status=201,
)
async def onboard_presence(ctx: RequestContext) -> onboarding_schemas.PresenceAck:
    """Tell your owner you are online (optionally with a message)."""
    return await sessions.presence(ctx.session, ctx.onboarding, ctx.body)


@routes.get("/api/agent/onboard/{slug}/setup", auth=BEARER, response=onboarding_schemas.SetupGuide)
async def onboard_setup_guide(ctx: RequestContext) -> onboarding_schemas.SetupGuide:
    """What to propose and where: the owner's request, your current draft, the fields."""
    return await sessions.guide(ctx.session, ctx.onboarding)


@routes.post(
    "/api/agent/onboard/{slug}/setup",
    auth=BEARER,
    body=onboarding_schemas.AgentSetupSave,
    response=onboarding_schemas.SessionEnvelope,
)
async def onboard_setup_save(ctx: RequestContext) -> onboarding_schemas.SessionEnvelope:
    """Save your proposal (only the fields sent change); your owner sees it at once."""
    return await sessions.save_setup(ctx.session, ctx.onboarding, ctx.body)


@routes.post(
    "/api/agent/onboard/{slug}/claim",
    auth=SESSION,
    body=onboarding_schemas.ClaimBody,
    response=onboarding_schemas.ClaimedKey,
)
async def onboard_claim(ctx: RequestContext) -> onboarding_schemas.ClaimedKey:
    """Mint a read-only key through your session (its token in the body): for agentId, or for the agent
    the session activated."""
    return await sessions.claim(ctx.session, ctx.actor, ctx.params["slug"], ctx.body)


# --- registration drafts ---------------------------------------------------------------------------


@routes.post("/api/agent/register/start", auth=AuthKind.PUBLIC, status=410, rate_limit=PUBLIC)
async def register_start(ctx: RequestContext) -> NoReturn:
    """Always 410 public_registration_unavailable: register a manifest instead
    (POST /api/agent/register/manifest), or have an owner mint an onboarding session."""
    drafts.start()


@routes.post(
    "/api/agent/register/manifest",
    auth=AuthKind.PUBLIC,
    body=onboarding_schemas.ManifestBody,
    response=onboarding_schemas.RegistrationStarted,
    status=201,
    rate_limit=PUBLIC,
)
async def register_manifest(ctx: RequestContext) -> onboarding_schemas.RegistrationStarted:
    """Register a manifest as a draft: its slug and bearer token (seven days, shown once). A signed-in
    owner claims and activates it before the agent gets credentials."""
    return await drafts.create(ctx.session, ctx.core.settings, ctx.body)


@routes.post(
    "/api/agent/register/{slug}/presence",
    auth=AuthKind.PUBLIC,
    draft_token=True,
    body=onboarding_schemas.PresenceBody,
    body_optional=True,
    response=onboarding_schemas.DraftPresenceAck,
    rate_limit=PUBLIC,
    errors=(401, 410),
)
async def register_presence(ctx: RequestContext) -> onboarding_schemas.DraftPresenceAck:
    """Report presence on your draft (Authorization: Bearer <draft token>)."""
    return await drafts.presence(ctx.session, ctx.params["slug"], bearer_token(ctx.request), ctx.body)


@routes.get(
    "/api/agent/register/{slug}/setup",
    auth=AuthKind.PUBLIC,
    draft_token=True,
    response=onboarding_schemas.SetupGuide,
    rate_limit=PUBLIC,
    errors=(401, 410),
)
async def register_setup_guide(ctx: RequestContext) -> onboarding_schemas.SetupGuide:
    """What to propose for your draft (Authorization: Bearer <draft token>)."""
    return await drafts.guide(ctx.session, ctx.params["slug"], bearer_token(ctx.request))


@routes.post(
    "/api/agent/register/{slug}/setup",
    auth=AuthKind.PUBLIC,
    draft_token=True,
    body=onboarding_schemas.AgentSetupSave,
    response=onboarding_schemas.DraftEnvelope,
    rate_limit=PUBLIC,
    errors=(401, 410),
)
async def register_setup_save(ctx: RequestContext) -> onboarding_schemas.DraftEnvelope:
    """Save your draft's proposal (Authorization: Bearer <draft token>); owners see it once they claim it."""
    return await drafts.save_setup(ctx.session, ctx.params["slug"], bearer_token(ctx.request), ctx.body)


@routes.get(
    "/api/agent/register/{slug}/status",
    auth=AuthKind.PUBLIC,
    draft_token=True,
    response=onboarding_schemas.DraftStatusView,
    rate_limit=PUBLIC,
    errors=(401, 410),
)
async def register_status(ctx: RequestContext) -> onboarding_schemas.DraftStatusView:
    """Your draft's status (Authorization: Bearer <draft token>); the runtime kit stays null until a
    signed-in owner has claimed and activated it."""
    return await drafts.status(ctx.session, ctx.core.settings, ctx.params["slug"], bearer_token(ctx.request))


@routes.post(
    "/api/agent/register/{slug}/claim",
    auth=SESSION,
    body=onboarding_schemas.ClaimBody,
    response=onboarding_schemas.DraftEnvelope,
)
async def register_claim(ctx: RequestContext) -> onboarding_schemas.DraftEnvelope:
    """Claim an agent's draft with its token; it stays under review: nothing is listed, no credentials."""
    return await drafts.claim(ctx.session, ctx.actor, ctx.params["slug"], ctx.body)


@routes.post(
    "/api/agent/register/{slug}/activate",
    auth=SESSION,
    body=onboarding_schemas.DraftActivationBody,
    response=onboarding_schemas.DraftActivated,
    status=201,
)
async def register_activate(ctx: RequestContext) -> onboarding_schemas.DraftActivated:
    """Activate a draft you claimed (its token in the body): creates the agent with the policy, returns its
    key (shown once), the runtime kit and a single-use install command."""
    return await drafts.activate(ctx.session, ctx.core.settings, ctx.actor, ctx.params["slug"], ctx.body)
