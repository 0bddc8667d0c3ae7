"""The owner's dashboard for agents (session): create, view, edit, list, lifecycle, seller workers."""

from __future__ import annotations

from callboard_core.agents import dashboard, lifecycle
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("dashboard")


@routes.post(
    "/agents/dashboard",
    auth=AuthKind.SESSION,
    body=agent_schemas.AgentCreate,
    response=agent_schemas.AgentCreated,
    status=201,
)
async def create_agent(ctx: RequestContext) -> agent_schemas.AgentCreated:
    """Create an agent you own (claimed at once) and its read+write runtime API key, shown once.

    `ownerId` in the body is ignored: the owner is the signed-in user."""
    return await dashboard.create(ctx.session, ctx.actor, ctx.body)


# Declared before /agents/dashboard/{agentId}, so "mine" is not taken for an agent id.
@routes.get(
    "/agents/dashboard/mine",
    auth=AuthKind.SESSION,
    query=agent_schemas.AgentListQuery,
    response=agent_schemas.AgentList,
)
async def list_my_agents(ctx: RequestContext) -> agent_schemas.AgentList:
    """Your agents, newest first, filtered; archived ones only with includeArchived=true."""
    return await dashboard.list_mine(ctx.session, ctx.actor, ctx.query)


@routes.get(
    "/agents/dashboard/{agentId}", auth=AuthKind.SESSION, response=agent_schemas.AgentDashboardResponse
)
async def get_agent(ctx: RequestContext) -> agent_schemas.AgentDashboardResponse:
    """One of your agents, with the owner-only fields."""
    return await dashboard.get(ctx.session, ctx.actor, ctx.params["agentId"])


@routes.put(
    "/agents/dashboard/{agentId}",
    auth=AuthKind.SESSION,
    body=agent_schemas.AgentUpdate,
    response=agent_schemas.AgentDashboardResponse,
)
async def update_agent(ctx: RequestContext) -> agent_schemas.AgentDashboardResponse:
    """Edit one of your agents; only the fields sent change. A new handle must be free (409 handle_taken)."""
    return await dashboard.update(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)


@routes.post(
    "/agents/dashboard/{agentId}/deactivate",
    auth=AuthKind.SESSION,
    body=agent_schemas.AgentLifecycleBody,
    body_optional=True,
    response=agent_schemas.AgentDashboardResponse,
)
async def deactivate_agent(ctx: RequestContext) -> agent_schemas.AgentDashboardResponse:
    """ACTIVE -> INACTIVE: hidden from discovery and blocked from new work; its API keys stay valid."""
    return await lifecycle.deactivate(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body.reason)


@routes.post(
    "/agents/dashboard/{agentId}/reactivate",
    auth=AuthKind.SESSION,
    response=agent_schemas.AgentDashboardResponse,
)
async def reactivate_agent(ctx: RequestContext) -> agent_schemas.AgentDashboardResponse:
    """INACTIVE -> ACTIVE. Archived agents must be unarchived first; a suspension is lifted only by staff."""
    return await lifecycle.reactivate(ctx.session, ctx.actor, ctx.params["agentId"])


@routes.post(
    "/agents/dashboard/{agentId}/archive",
    auth=AuthKind.SESSION,
    body=agent_schemas.AgentLifecycleBody,
    body_optional=True,
    response=agent_schemas.AgentDashboardResponse,
)
async def archive_agent(ctx: RequestContext) -> agent_schemas.AgentDashboardResponse:
    """Archive: the agent becomes INACTIVE and every one of its API keys is revoked.

    Refused with 409 and a `blockers` list while work or money is in flight."""
    return await lifecycle.archive(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body.reason)


@routes.post(
    "/agents/dashboard/{agentId}/unarchive",
    auth=AuthKind.SESSION,
    response=agent_schemas.AgentDashboardResponse,
)
async def unarchive_agent(ctx: RequestContext) -> agent_schemas.AgentDashboardResponse:
    """Archived -> INACTIVE. Its keys stay revoked: mint a new one (POST /api-keys/dashboard)."""
    return await lifecycle.unarchive(ctx.session, ctx.actor, ctx.params["agentId"])


@routes.delete(
    "/agents/dashboard/{agentId}",
    auth=AuthKind.SESSION,
    body=agent_schemas.AgentDeleteBody,
    response=agent_schemas.AgentDeleted,
)
async def delete_agent(ctx: RequestContext) -> agent_schemas.AgentDeleted:
    """Delete an agent for good; confirmHandle must equal its handle.

    With marketplace history the mode is SOFT (a tombstone; the handle stays reserved); otherwise HARD
    (removed outright). Refused with 409 and a `blockers` list while work or money is in flight."""
    return await lifecycle.delete_agent(ctx.session, ctx.actor, ctx.params["agentId"], ctx.body)


@routes.get(
    "/agents/dashboard/{agentId}/lifecycle-blockers",
    auth=AuthKind.SESSION,
    response=agent_schemas.LifecycleBlockers,
)
async def lifecycle_blockers(ctx: RequestContext) -> agent_schemas.LifecycleBlockers:
    """What keeps this agent from being archived or deleted; empty means both would succeed."""
    return await lifecycle.lifecycle_blockers(ctx.session, ctx.actor, ctx.params["agentId"])


@routes.get(
    "/seller-workers/dashboard",
    auth=AuthKind.SESSION,
    query=agent_schemas.SellerWorkersQuery,
    response=agent_schemas.SellerWorkers,
)
async def seller_workers(ctx: RequestContext) -> agent_schemas.SellerWorkers:
    """The latest heartbeat of each runtime (worker) of one of your agents."""
    return await agents.seller_workers(ctx.session, ctx.actor, ctx.query.seller_agent_id)
