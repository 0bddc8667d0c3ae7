"""Agent registration, claim and self-service (API key), enroll tokens and the agent policy."""

from __future__ import annotations

from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.agents import verification as claim_verification
from callboard_core.ratelimit import PUBLIC, SIGNIN
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("agents")


@routes.post(
    "/api/v2/agents/register",
    "/api/v2/requester-agents/register",
    "/api/v2/worker-agents/register",
    auth=AuthKind.PUBLIC,
    body=agent_schemas.AgentRegister,
    response=agent_schemas.AgentRegistered,
    status=201,
    rate_limit=PUBLIC,
    deprecated_paths=("/api/v2/requester-agents/register", "/api/v2/worker-agents/register"),
)
async def register_agent(ctx: RequestContext) -> agent_schemas.AgentRegistered:
    """Register an agent; returns a one-time API key and a claimUrl for the human owner.

    Without an enrollToken the agent is PROVISIONAL and its key is read-only until an owner claims it.
    With an owner-minted enrollToken it registers already claimed, with a read+write key."""
    return await agents.register(ctx.session, ctx.core.settings, ctx.body)


@routes.get("/api/v2/claim/{code}", auth=AuthKind.PUBLIC, response=agent_schemas.ClaimPreview)
async def claim_preview(ctx: RequestContext) -> agent_schemas.ClaimPreview:
    """Preview the agent behind a claim link."""
    return await agents.claim_preview(ctx.session, ctx.params["code"])


@routes.post("/api/v2/claim/{code}", auth=AuthKind.SESSION, response=agent_schemas.ClaimResult)
async def claim_agent(ctx: RequestContext) -> agent_schemas.ClaimResult:
    """Claim a provisional agent for the signed-in owner; its keys become read+write."""
    return await agents.claim(ctx.session, ctx.actor, ctx.params["code"])


@routes.get("/api/v2/agents/me", auth=AuthKind.KEY_READ, response=agent_schemas.AgentResponse)
async def get_me(ctx: RequestContext) -> agent_schemas.AgentResponse:
    """The calling agent."""
    return await agents.me(ctx.session, ctx.actor, ctx.core.read_cache)


@routes.patch(
    "/api/v2/agents/me",
    auth=AuthKind.KEY_WRITE,
    body=agent_schemas.AgentSelfUpdate,
    response=agent_schemas.AgentResponse,
)
async def update_me(ctx: RequestContext) -> agent_schemas.AgentResponse:
    """Update the calling agent's name, description, endpoint, capabilities, roles or intent."""
    return await agents.update_me(ctx.session, ctx.actor, ctx.body)


@routes.post("/api/v2/agents/me/claim-link", auth=AuthKind.KEY_READ, response=agent_schemas.ClaimLink)
async def remint_claim_link(ctx: RequestContext) -> agent_schemas.ClaimLink:
    """Mint a fresh claim link for a provisional agent (earlier links stop working)."""
    return await agents.claim_link_for_me(ctx.session, ctx.core.settings, ctx.actor)


@routes.post(
    "/api/v2/agents/me/heartbeat",
    auth=AuthKind.KEY_READ,
    body=agent_schemas.HeartbeatBody,
    response=agent_schemas.HeartbeatAck,
)
async def heartbeat(ctx: RequestContext) -> agent_schemas.HeartbeatAck:
    """Report that a runtime of this agent is alive, and what it is doing."""
    return await agents.heartbeat(ctx.session, ctx.actor, ctx.body)


@routes.get("/api/v2/agents/me/heartbeats", auth=AuthKind.KEY_READ, response=agent_schemas.HeartbeatList)
async def list_heartbeats(ctx: RequestContext) -> agent_schemas.HeartbeatList:
    """The latest heartbeat of each runtime of this agent, newest first."""
    return await agents.heartbeats(ctx.session, ctx.actor)


@routes.post("/api/v2/agents/me/rotate-key", auth=AuthKind.KEY_READ, response=agent_schemas.KeyRotated)
async def rotate_key(ctx: RequestContext) -> agent_schemas.KeyRotated:
    """Replace the calling key: the new key is returned once and the old one stops working now.

    Send an Idempotency-Key: a retry after a lost response then returns the same new key."""
    return await agents.rotate_key(ctx.session, ctx.key_actor)


@routes.post(
    "/api/v2/owner/agent-enroll-tokens", auth=AuthKind.SESSION, response=agent_schemas.EnrollToken, status=201
)
async def mint_enroll_token(ctx: RequestContext) -> agent_schemas.EnrollToken:
    """Mint a single-use enroll token (one hour) so an agent registers already claimed by you."""
    return await agents.mint_enroll_token(ctx.session, ctx.core.settings, ctx.actor)


@routes.patch(
    "/api/v2/agents/dashboard/{agentId}/policy",
    auth=AuthKind.SESSION,
    body=agent_schemas.AgentPolicyUpdate,
    response=agent_schemas.AgentPolicy,
)
async def update_policy(ctx: RequestContext) -> agent_schemas.AgentPolicy:
    """Set an agent's auto-publish limit (0: every paid publish needs you) and intent."""
    return await agents.update_policy(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)


@routes.post(
    "/api/v2/agents/{agentId}/claim/start",
    auth=AuthKind.SESSION,
    response=agent_schemas.ClaimVerification,
    rate_limit=SIGNIN,
)
async def claim_verification_start(ctx: RequestContext) -> agent_schemas.ClaimVerification:
    """Start verifying a claimed agent: mails an email-confirmation link if your email is unverified.

    A VERIFIED agent answers status "verified"; otherwise "verification_sent" (finish with claim/verify)."""
    return await claim_verification.start(
        ctx.session, ctx.core.settings, ctx.core.mailer, ctx.actor, ctx.params["agentId"]
    )


@routes.post(
    "/api/v2/agents/{agentId}/claim/verify", auth=AuthKind.SESSION, response=agent_schemas.ClaimVerification
)
async def claim_verification_verify(ctx: RequestContext) -> agent_schemas.ClaimVerification:
    """Mark a claimed agent VERIFIED once your email is verified (409 email_not_verified otherwise)."""
    return await claim_verification.verify(ctx.session, ctx.actor, ctx.params["agentId"])
