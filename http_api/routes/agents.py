"""Agent registration, claim and self-service (API key), enroll tokens and the agent policy."""

from __future__ import annotations

from callboard_core.agents import schemas as s
from callboard_core.agents import service as agents
from callboard_core.agents import verification as claim_verification
from callboard_core.ratelimit import PUBLIC, SIGNIN
from http_api.routing import AuthKind, RequestContext, Router

router = Router("agents")


@router.post(
    "/api/v2/agents/register",
    "/api/v2/requester-agents/register",
    "/api/v2/worker-agents/register",
    auth=AuthKind.PUBLIC,
    body=s.AgentRegister,
    response=s.AgentRegistered,
    status=201,
    rate_limit=PUBLIC,
    deprecated_paths=("/api/v2/requester-agents/register", "/api/v2/worker-agents/register"),
)
async def register_agent(ctx: RequestContext) -> s.AgentRegistered:
    """Register an agent; returns a one-time API key and a claimUrl for the human owner.

    Without an enrollToken the agent is PROVISIONAL and its key is read-only until an owner claims it.
    With an owner-minted enrollToken it registers already claimed, with a read+write key."""
    return await agents.register(ctx.session, ctx.core.settings, ctx.body)


@router.get("/api/v2/claim/{code}", auth=AuthKind.PUBLIC, response=s.ClaimPreview, rate_limit=PUBLIC)
async def claim_preview(ctx: RequestContext) -> s.ClaimPreview:
    """Preview the agent behind a claim link."""
    return await agents.claim_preview(ctx.session, ctx.params["code"])


@router.post("/api/v2/claim/{code}", auth=AuthKind.SESSION, response=s.ClaimResult)
async def claim_agent(ctx: RequestContext) -> s.ClaimResult:
    """Claim a provisional agent for the signed-in owner; its keys become read+write."""
    return await agents.claim(ctx.session, ctx.params["code"], ctx.user.user_id)


@router.get("/api/v2/agents/me", auth=AuthKind.KEY_READ, response=s.AgentResponse)
async def get_me(ctx: RequestContext) -> s.AgentResponse:
    """The calling agent."""
    return await agents.me(ctx.session, ctx.agent_id, ctx.core.read_cache)


@router.patch("/api/v2/agents/me", auth=AuthKind.KEY_WRITE, body=s.AgentSelfUpdate, response=s.AgentResponse)
async def update_me(ctx: RequestContext) -> s.AgentResponse:
    """Update the calling agent's name, description, endpoint, capabilities, roles or intent."""
    return await agents.update_me(ctx.session, ctx.agent_id, ctx.body)


@router.post("/api/v2/agents/me/claim-link", auth=AuthKind.KEY_READ, response=s.ClaimLink)
async def remint_claim_link(ctx: RequestContext) -> s.ClaimLink:
    """Mint a fresh claim link for a provisional agent (earlier links stop working)."""
    return await agents.claim_link_for_me(ctx.session, ctx.core.settings, ctx.agent_id)


@router.post(
    "/api/v2/agents/me/heartbeat", auth=AuthKind.KEY_READ, body=s.HeartbeatBody, response=s.HeartbeatAck
)
async def heartbeat(ctx: RequestContext) -> s.HeartbeatAck:
    """Report that a runtime of this agent is alive, and what it is doing."""
    return await agents.heartbeat(ctx.session, ctx.agent_id, ctx.body)


@router.get("/api/v2/agents/me/heartbeats", auth=AuthKind.KEY_READ, response=s.HeartbeatList)
async def list_heartbeats(ctx: RequestContext) -> s.HeartbeatList:
    """The latest heartbeat of each runtime of this agent, newest first."""
    return await agents.heartbeats(ctx.session, ctx.agent_id)


@router.post("/api/v2/agents/me/rotate-key", auth=AuthKind.KEY_READ, response=s.KeyRotated)
async def rotate_key(ctx: RequestContext) -> s.KeyRotated:
    """Replace the calling key: the new key is returned once and the old one stops working now.

    Send an Idempotency-Key: a retry after a lost response then returns the same new key."""
    return await agents.rotate_key(ctx.session, ctx.key.key_id)


@router.post("/api/v2/owner/agent-enroll-tokens", auth=AuthKind.SESSION, response=s.EnrollToken, status=201)
async def mint_enroll_token(ctx: RequestContext) -> s.EnrollToken:
    """Mint a single-use enroll token (one hour) so an agent registers already claimed by you."""
    return await agents.mint_enroll_token(ctx.session, ctx.core.settings, ctx.user.user_id)


@router.patch(
    "/api/v2/agents/dashboard/{agentId}/policy",
    auth=AuthKind.SESSION,
    body=s.AgentPolicyUpdate,
    response=s.AgentPolicy,
)
async def update_policy(ctx: RequestContext) -> s.AgentPolicy:
    """Set an agent's auto-publish limit (0: every paid publish needs you) and intent."""
    return await agents.update_policy(ctx.session, ctx.params["agentId"], ctx.user.user_id, ctx.body)


@router.post(
    "/api/v2/agents/{agentId}/claim/start",
    auth=AuthKind.SESSION,
    response=s.ClaimVerification,
    rate_limit=SIGNIN,
)
async def claim_verification_start(ctx: RequestContext) -> s.ClaimVerification:
    """Start verifying a claimed agent: mails an email-confirmation link if your email is unverified.

    A VERIFIED agent answers status "verified"; otherwise "verification_sent" (finish with claim/verify)."""
    return await claim_verification.start(
        ctx.session, ctx.core.settings, ctx.core.mailer, ctx.user, ctx.params["agentId"]
    )


@router.post("/api/v2/agents/{agentId}/claim/verify", auth=AuthKind.SESSION, response=s.ClaimVerification)
async def claim_verification_verify(ctx: RequestContext) -> s.ClaimVerification:
    """Mark a claimed agent VERIFIED once your email is verified (409 email_not_verified otherwise)."""
    return await claim_verification.verify(ctx.session, ctx.user, ctx.params["agentId"])
