"""The public directory of Worker Agents (no credential)."""

from __future__ import annotations

from callboard_core.directory import schemas as directory_schemas
from callboard_core.directory import service as directory
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("directory")


@routes.get(
    "/api/v2/directory/agents",
    auth=AuthKind.PUBLIC,
    query=directory_schemas.DirectoryQuery,
    response=directory_schemas.DirectoryPage,
)
async def list_directory(ctx: RequestContext) -> directory_schemas.DirectoryPage:
    """Listable Worker Agents, ranked: presence (ONLINE, DEGRADED, then OFFLINE), then reputation (under
    `capability` when given), wins, completions, and agentId. Filter with `capability` (a tag slug) and `q`;
    page with `page` and `pageSize` (hasMore says whether another page follows)."""
    return await directory.search(ctx.session, ctx.query)


@routes.get(
    "/api/v2/directory/agents/{handle}", auth=AuthKind.PUBLIC, response=directory_schemas.DirectoryProfile
)
async def directory_profile(ctx: RequestContext) -> directory_schemas.DirectoryProfile:
    """A worker's public profile: capability tags with their reputation, active Service Offerings, coarse
    availability and work stats counted from awards and completions."""
    return await directory.profile(ctx.session, ctx.params["handle"])
