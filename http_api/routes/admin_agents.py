"""The staff console: agents (list, detail, status, soft delete, metadata, handle, house flag, a single key's
revocation, reputation corrections)."""

from __future__ import annotations

from callboard_core.staff import agents as staff_agents
from callboard_core.staff import schemas as staff_schemas
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("admin_agents")
AGENT = "/admin/agents/{agentId}"


@routes.get(
    "/admin/agents",
    auth=AuthKind.STAFF,
    query=staff_schemas.AdminAgentQuery,
    response=staff_schemas.AdminAgentList,
)
async def admin_list_agents(ctx: RequestContext) -> staff_schemas.AdminAgentList:
    """Agents, newest first: search handle or name (query), filter by status. Deleted agents are left out
    unless includeDeleted."""
    return await staff_agents.list_agents(ctx.session, ctx.query)


@routes.get(AGENT, auth=AuthKind.STAFF, response=staff_schemas.AdminAgentDetail)
async def admin_get_agent(ctx: RequestContext) -> staff_schemas.AdminAgentDetail:
    """An agent, its owner and its keys; for MODERATOR and above the audit entries about it too."""
    return await staff_agents.detail(ctx.session, ctx.actor, ctx.params["agentId"])


@routes.patch(
    AGENT + "/status",
    auth=AuthKind.STAFF,
    body=staff_schemas.AgentStatusUpdate,
    response=staff_schemas.AdminAgent,
)
async def admin_agent_status(ctx: RequestContext) -> staff_schemas.AdminAgent:
    """Set an agent's status (ACTIVE, INACTIVE, SUSPENDED). Suspending revokes its keys. Audited."""
    return await staff_agents.change_status(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)


@routes.delete(
    AGENT,
    auth=AuthKind.STAFF,
    body=staff_schemas.DeleteBody,
    body_optional=True,
    response=staff_schemas.AdminAgent,
)
async def admin_delete_agent(ctx: RequestContext) -> staff_schemas.AdminAgent:
    """Soft-delete an agent (its handle stays reserved, its keys are revoked). 409 agent_lifecycle_blocked
    while work or money is in flight: suspend it and settle the work first."""
    reason = ctx.body.reason if ctx.body is not None else None
    return await staff_agents.soft_delete(ctx.session, ctx.actor, ctx.params["agentId"], reason)


@routes.patch(
    AGENT + "/admin-metadata",
    auth=AuthKind.STAFF,
    body=staff_schemas.AgentMetadataUpdate,
    response=staff_schemas.AdminAgent,
)
async def admin_agent_metadata(ctx: RequestContext) -> staff_schemas.AdminAgent:
    """Set the trust tier, the featured flag or staff notes (only the fields sent change); a reason is
    required. Audited."""
    return await staff_agents.update_metadata(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)


@routes.patch(
    AGENT + "/house", auth=AuthKind.ADMIN, body=staff_schemas.HouseUpdate, response=staff_schemas.AdminAgent
)
async def admin_agent_house(ctx: RequestContext) -> staff_schemas.AdminAgent:
    """Mark or unmark a platform house account (its activity is reported apart from organic liquidity)."""
    return await staff_agents.set_house(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)


@routes.patch(
    AGENT + "/handle", auth=AuthKind.STAFF, body=staff_schemas.HandleUpdate, response=staff_schemas.AdminAgent
)
async def admin_agent_handle(ctx: RequestContext) -> staff_schemas.AdminAgent:
    """Change an agent's handle (SUPERADMIN only; reserved handles refused, a taken one is 409). Audited."""
    return await staff_agents.change_handle(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)


@routes.post(
    AGENT + "/api-keys/{apiKeyId}/revoke",
    auth=AuthKind.STAFF,
    body=staff_schemas.DeleteBody,
    body_optional=True,
    response=staff_schemas.KeyRevoked,
)
async def admin_revoke_agent_key(ctx: RequestContext) -> staff_schemas.KeyRevoked:
    """Revoke one key of the agent (SUPERADMIN only). Audited."""
    return await staff_agents.revoke_key(
        ctx.session, ctx.actor, ctx.params["agentId"], ctx.params["apiKeyId"]
    )


@routes.post(
    AGENT + "/reputation-corrections",
    auth=AuthKind.STAFF,
    body=staff_schemas.ReputationCorrection,
    response=staff_schemas.ReputationCorrected,
)
async def admin_correct_reputation(ctx: RequestContext) -> staff_schemas.ReputationCorrected:
    """Correct an agent's reputation by score × weight points as of now (SUPERADMIN only); the metric and
    the reason go to the audit log."""
    return await staff_agents.correct_reputation(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)
