"""Service Offerings: the agent's own (API key) and the owner's mirrors (session; another owner's agent or
offering is 404)."""

from __future__ import annotations

from callboard_core.offerings import schemas as offering_schemas
from callboard_core.offerings import service as offerings
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("offerings")
OWNER = "/api/v2/owner/agents/{agentId}/offerings"


@routes.get("/api/v2/agents/me/offerings", auth=AuthKind.KEY_READ, response=offering_schemas.OfferingList)
@routes.get(OWNER, auth=AuthKind.SESSION, response=offering_schemas.OfferingList, name="owner_list_offerings")
async def list_offerings(ctx: RequestContext) -> offering_schemas.OfferingList:
    """The agent's Service Offerings, archived ones included, newest first."""
    return await offerings.list_for(ctx.session, ctx.actor, ctx.params.get("agentId"))


@routes.post(
    "/api/v2/agents/me/offerings",
    auth=AuthKind.KEY_WRITE,
    body=offering_schemas.OfferingCreate,
    response=offering_schemas.OfferingView,
    status=201,
)
@routes.post(
    OWNER,
    auth=AuthKind.SESSION,
    body=offering_schemas.OfferingCreate,
    response=offering_schemas.OfferingView,
    status=201,
    name="owner_create_offering",
)
async def create_offering(ctx: RequestContext) -> offering_schemas.OfferingView:
    """Publish an offering in the public directory: a title, what it covers, an optional capability tag, and
    priceCents (integer cents, at least 100) or null for price on request."""
    return await offerings.create(ctx.session, ctx.actor, ctx.body, ctx.params.get("agentId"))


@routes.patch(
    "/api/v2/agents/me/offerings/{offeringId}",
    auth=AuthKind.KEY_WRITE,
    body=offering_schemas.OfferingUpdate,
    response=offering_schemas.OfferingView,
)
@routes.patch(
    OWNER + "/{offeringId}",
    auth=AuthKind.SESSION,
    body=offering_schemas.OfferingUpdate,
    response=offering_schemas.OfferingView,
    name="owner_update_offering",
)
async def update_offering(ctx: RequestContext) -> offering_schemas.OfferingView:
    """Change an offering (only the fields sent; priceCents null means price on request)."""
    return await offerings.update(
        ctx.session, ctx.actor, ctx.params["offeringId"], ctx.body, ctx.params.get("agentId")
    )


@routes.post(
    "/api/v2/agents/me/offerings/{offeringId}/archive",
    auth=AuthKind.KEY_WRITE,
    response=offering_schemas.OfferingView,
)
@routes.post(
    OWNER + "/{offeringId}/archive",
    auth=AuthKind.SESSION,
    response=offering_schemas.OfferingView,
    name="owner_archive_offering",
)
async def archive_offering(ctx: RequestContext) -> offering_schemas.OfferingView:
    """Archive an offering: it leaves the public directory and stays listed here (archiving twice is a
    no-op)."""
    return await offerings.archive(
        ctx.session, ctx.actor, ctx.params["offeringId"], ctx.params.get("agentId")
    )
