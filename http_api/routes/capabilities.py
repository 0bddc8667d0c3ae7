"""The capability taxonomy: public reads, custom tag requests, and staff administration."""

from __future__ import annotations

from callboard_core.capabilities import schemas as capability_schemas
from callboard_core.capabilities import service as capabilities
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("capabilities")


# --- public --------------------------------------------------------------------------------------


@routes.get(
    "/capabilities",
    auth=AuthKind.PUBLIC,
    query=capability_schemas.TreeQuery,
    response=capability_schemas.CapabilityTree,
)
async def list_capabilities(ctx: RequestContext) -> capability_schemas.CapabilityTree:
    """Active categories with their active (canonical) tags, in sort order.

    `query` keeps the categories whose name matches, and elsewhere only the tags whose name, slug or alias
    contains it."""
    return await capabilities.tree(ctx.session, ctx.query.query)


@routes.get(
    "/capabilities/tags",
    auth=AuthKind.PUBLIC,
    query=capability_schemas.TagQuery,
    response=capability_schemas.TagList,
)
async def search_tags(ctx: RequestContext) -> capability_schemas.TagList:
    """Search active tags by name, slug or alias (case-insensitive substring); exact matches first."""
    return await capabilities.search_tags(ctx.session, ctx.query.query, ctx.query.category_id)


@routes.post(
    "/capabilities/requests",
    auth=AuthKind.SESSION,
    body=capability_schemas.TagRequestCreate,
    response=capability_schemas.CapabilityTagRequest,
    status=201,
)
async def request_tag(ctx: RequestContext) -> capability_schemas.CapabilityTagRequest:
    """Request a custom capability tag; staff review it before it is used for matching.

    409 `tag_exists` (with the tag's slug) when an active tag already has this name, slug or alias."""
    return await capabilities.request_tag(ctx.session, ctx.actor, ctx.body)


# --- staff ---------------------------------------------------------------------------------------


@routes.get(
    "/admin/capabilities",
    auth=AuthKind.STAFF,
    query=capability_schemas.TreeQuery,
    response=capability_schemas.CapabilityTree,
)
async def admin_list_capabilities(ctx: RequestContext) -> capability_schemas.CapabilityTree:
    """Every category, HIDDEN and DEPRECATED included, with every tag."""
    return await capabilities.admin_tree(ctx.session, ctx.query.query)


@routes.post(
    "/admin/capabilities/categories",
    auth=AuthKind.STAFF,
    body=capability_schemas.CategoryCreate,
    response=capability_schemas.CapabilityCategory,
    status=201,
)
async def admin_create_category(ctx: RequestContext) -> capability_schemas.CapabilityCategory:
    """Create a category; the slug is made from the name when absent (409 when taken)."""
    return await capabilities.create_category(ctx.session, ctx.actor, ctx.body)


@routes.patch(
    "/admin/capabilities/categories/{categoryId}",
    auth=AuthKind.STAFF,
    body=capability_schemas.CategoryUpdate,
    response=capability_schemas.CapabilityCategory,
)
async def admin_update_category(ctx: RequestContext) -> capability_schemas.CapabilityCategory:
    """Update a category (slug, name, description, sortOrder, status)."""
    return await capabilities.update_category(ctx.session, ctx.actor, ctx.params["categoryId"], ctx.body)


@routes.get(
    "/admin/capabilities/tags",
    auth=AuthKind.STAFF,
    query=capability_schemas.TagQuery,
    response=capability_schemas.TagList,
)
async def admin_search_tags(ctx: RequestContext) -> capability_schemas.TagList:
    """Search tags of every status by name, slug or alias."""
    return await capabilities.admin_search_tags(ctx.session, ctx.query.query, ctx.query.category_id)


@routes.post(
    "/admin/capabilities/tags",
    auth=AuthKind.STAFF,
    body=capability_schemas.TagCreate,
    response=capability_schemas.CapabilityTag,
    status=201,
)
async def admin_create_tag(ctx: RequestContext) -> capability_schemas.CapabilityTag:
    """Create a tag in a category; the slug is made from the name when absent (409 when taken)."""
    return await capabilities.create_tag(ctx.session, ctx.actor, ctx.body)


@routes.patch(
    "/admin/capabilities/tags/{tagId}",
    auth=AuthKind.STAFF,
    body=capability_schemas.TagUpdate,
    response=capability_schemas.CapabilityTag,
)
async def admin_update_tag(ctx: RequestContext) -> capability_schemas.CapabilityTag:
    """Update a tag; a new slug follows the tag onto the agents that hold it."""
    return await capabilities.update_tag(ctx.session, ctx.actor, ctx.params["tagId"], ctx.body)


@routes.post(
    "/admin/capabilities/tags/{tagId}/merge",
    auth=AuthKind.STAFF,
    body=capability_schemas.TagMerge,
    response=capability_schemas.CapabilityTag,
)
async def admin_merge_tag(ctx: RequestContext) -> capability_schemas.CapabilityTag:
    """Merge this tag into `intoTagId`; returns the target tag.

    The tag becomes DEPRECATED with mergedIntoTagId; its slug and aliases become aliases of the target;
    agents holding it hold the target instead."""
    return await capabilities.merge_tag(ctx.session, ctx.actor, ctx.params["tagId"], ctx.body.into_tag_id)


@routes.get(
    "/admin/capabilities/requests",
    auth=AuthKind.STAFF,
    query=capability_schemas.TagRequestQuery,
    response=capability_schemas.TagRequestList,
)
async def admin_list_tag_requests(ctx: RequestContext) -> capability_schemas.TagRequestList:
    """Custom tag requests, newest first, with the number of similar pending requests."""
    return await capabilities.list_requests(ctx.session, ctx.query)


@routes.post(
    "/admin/capabilities/requests/{requestId}/review",
    auth=AuthKind.STAFF,
    body=capability_schemas.TagRequestReview,
    response=capability_schemas.CapabilityTagRequest,
)
async def admin_review_tag_request(ctx: RequestContext) -> capability_schemas.CapabilityTagRequest:
    """Review a PENDING or NEEDS_CLARIFICATION request: APPROVE_NEW, MAP_EXISTING, REJECT or NEEDS_CLARIFICATION.

    APPROVE_NEW creates a tag in `categoryId`; MAP_EXISTING adds the request's text as an alias of
    `resolvedTagId`. `applyToSimilar` applies the decision to the other PENDING requests with the same text."""
    return await capabilities.review_request(ctx.session, ctx.actor, ctx.params["requestId"], ctx.body)
