"""The capability taxonomy: public reads, custom tag requests, and staff administration."""

from __future__ import annotations

from callboard_core.capabilities import schemas as s
from callboard_core.capabilities import service as capabilities
from http_api.routing import AuthKind, RequestContext, Router

router = Router("capabilities")


# --- public --------------------------------------------------------------------------------------


@router.get("/capabilities", auth=AuthKind.PUBLIC, query=s.TreeQuery, response=s.CapabilityTree)
async def list_capabilities(ctx: RequestContext) -> s.CapabilityTree:
    """Active categories with their active (canonical) tags, in sort order.

    `query` keeps the categories whose name matches, and elsewhere only the tags whose name, slug or alias
    contains it."""
    return await capabilities.tree(ctx.session, ctx.query.query)


@router.get("/capabilities/tags", auth=AuthKind.PUBLIC, query=s.TagQuery, response=s.TagList)
async def search_tags(ctx: RequestContext) -> s.TagList:
    """Search active tags by name, slug or alias (case-insensitive substring); exact matches first."""
    return await capabilities.search_tags(ctx.session, ctx.query.query, ctx.query.category_id)


@router.post(
    "/capabilities/requests",
    auth=AuthKind.SESSION,
    body=s.TagRequestCreate,
    response=s.CapabilityTagRequest,
    status=201,
)
async def request_tag(ctx: RequestContext) -> s.CapabilityTagRequest:
    """Request a custom capability tag; staff review it before it is used for matching.

    409 `tag_exists` (with the tag's slug) when an active tag already has this name, slug or alias."""
    return await capabilities.request_tag(ctx.session, ctx.user, ctx.body)


# --- staff ---------------------------------------------------------------------------------------


@router.get("/admin/capabilities", auth=AuthKind.STAFF, query=s.TreeQuery, response=s.CapabilityTree)
async def admin_list_capabilities(ctx: RequestContext) -> s.CapabilityTree:
    """Every category, HIDDEN and DEPRECATED included, with every tag."""
    return await capabilities.admin_tree(ctx.session, ctx.query.query)


@router.post(
    "/admin/capabilities/categories",
    auth=AuthKind.STAFF,
    body=s.CategoryCreate,
    response=s.CapabilityCategory,
    status=201,
)
async def admin_create_category(ctx: RequestContext) -> s.CapabilityCategory:
    """Create a category; the slug is made from the name when absent (409 when taken)."""
    return await capabilities.create_category(ctx.session, ctx.user, ctx.body)


@router.patch(
    "/admin/capabilities/categories/{categoryId}",
    auth=AuthKind.STAFF,
    body=s.CategoryUpdate,
    response=s.CapabilityCategory,
)
async def admin_update_category(ctx: RequestContext) -> s.CapabilityCategory:
    """Update a category (slug, name, description, sortOrder, status)."""
    return await capabilities.update_category(ctx.session, ctx.user, ctx.params["categoryId"], ctx.body)


@router.get("/admin/capabilities/tags", auth=AuthKind.STAFF, query=s.TagQuery, response=s.TagList)
async def admin_search_tags(ctx: RequestContext) -> s.TagList:
    """Search tags of every status by name, slug or alias."""
    return await capabilities.admin_search_tags(ctx.session, ctx.query.query, ctx.query.category_id)


@router.post(
    "/admin/capabilities/tags", auth=AuthKind.STAFF, body=s.TagCreate, response=s.CapabilityTag, status=201
)
async def admin_create_tag(ctx: RequestContext) -> s.CapabilityTag:
    """Create a tag in a category; the slug is made from the name when absent (409 when taken)."""
    return await capabilities.create_tag(ctx.session, ctx.user, ctx.body)


@router.patch(
    "/admin/capabilities/tags/{tagId}", auth=AuthKind.STAFF, body=s.TagUpdate, response=s.CapabilityTag
)
async def admin_update_tag(ctx: RequestContext) -> s.CapabilityTag:
    """Update a tag; a new slug follows the tag onto the agents that hold it."""
    return await capabilities.update_tag(ctx.session, ctx.user, ctx.params["tagId"], ctx.body)


@router.post(
    "/admin/capabilities/tags/{tagId}/merge", auth=AuthKind.STAFF, body=s.TagMerge, response=s.CapabilityTag
)
async def admin_merge_tag(ctx: RequestContext) -> s.CapabilityTag:
    """Merge this tag into `intoTagId`; returns the target tag.

    The tag becomes DEPRECATED with mergedIntoTagId; its slug and aliases become aliases of the target;
    agents holding it hold the target instead."""
    return await capabilities.merge_tag(ctx.session, ctx.user, ctx.params["tagId"], ctx.body.into_tag_id)


@router.get(
    "/admin/capabilities/requests", auth=AuthKind.STAFF, query=s.TagRequestQuery, response=s.TagRequestList
)
async def admin_list_tag_requests(ctx: RequestContext) -> s.TagRequestList:
    """Custom tag requests, newest first, with the number of similar pending requests."""
    return await capabilities.list_requests(ctx.session, ctx.query)


@router.post(
    "/admin/capabilities/requests/{requestId}/review",
    auth=AuthKind.STAFF,
    body=s.TagRequestReview,
    response=s.CapabilityTagRequest,
)
async def admin_review_tag_request(ctx: RequestContext) -> s.CapabilityTagRequest:
    """Review a PENDING or NEEDS_CLARIFICATION request: APPROVE_NEW, MAP_EXISTING, REJECT or NEEDS_CLARIFICATION.

    APPROVE_NEW creates a tag in `categoryId`; MAP_EXISTING adds the request's text as an alias of
    `resolvedTagId`. `applyToSimilar` applies the decision to the other PENDING requests with the same text."""
    return await capabilities.review_request(ctx.session, ctx.user, ctx.params["requestId"], ctx.body)
