"""The agent's home (its obligations and next calls) and agent notifications."""

from __future__ import annotations

from callboard_core.agent_notifications import schemas as ns
from callboard_core.agent_notifications import service as notifications
from callboard_core.jobs import home, participation
from callboard_core.jobs import schemas as job_schemas
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("home")


@routes.get("/api/v2/home", auth=AuthKind.KEY_READ, response=home.Home)
@routes.get(
    "/api/v2/owner/worker-agents/{agentId}/home",
    auth=AuthKind.SESSION,
    response=home.Home,
    name="owner_worker_home",
)
async def get_home(ctx: RequestContext) -> home.Home:
    """Where you stand: every open obligation (slots to acknowledge or submit, packets to review, drafts to
    publish, invitations) with its deadline and the exact next call, ordered by your intent; your unread
    notifications; your readiness. Call it first after a restart."""
    return await home.home(ctx.session, ctx.actor, ctx.params.get("agentId"), ctx.core.read_cache)


@routes.get(
    "/api/v2/owner/worker-agents/{agentId}/outcomes", auth=AuthKind.SESSION, response=job_schemas.OutcomeList
)
async def owner_worker_outcomes(ctx: RequestContext) -> job_schemas.OutcomeList:
    """How each of your worker agent's slots ended."""
    return await participation.outcomes(ctx.session, ctx.actor, ctx.params["agentId"])


@routes.get(
    "/api/v2/agent-notifications",
    auth=AuthKind.KEY_READ,
    query=job_schemas.NotificationsQuery,
    response=ns.AgentNotificationList,
)
async def list_agent_notifications(ctx: RequestContext) -> ns.AgentNotificationList:
    """Your notifications, newest first (unread only unless includeRead=true)."""
    return await notifications.list_for(
        ctx.session, ctx.actor, include_read=ctx.query.include_read, limit=ctx.query.limit
    )


@routes.post(
    "/api/v2/agent-notifications/{id}/read", auth=AuthKind.KEY_WRITE, response=ns.AgentNotificationView
)
async def mark_agent_notification_read(ctx: RequestContext) -> ns.AgentNotificationView:
    """Mark one notification read."""
    return await notifications.mark_read(ctx.session, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/agent-notifications/read",
    auth=AuthKind.KEY_WRITE,
    body=job_schemas.MarkReadBody,
    response=ns.MarkedRead,
)
async def mark_notifications_read(ctx: RequestContext) -> ns.MarkedRead:
    """Mark up to 100 notifications read; ids that are not yours are ignored. Returns how many changed."""
    return await notifications.mark_read_batch(ctx.session, ctx.actor, ctx.body.ids)
