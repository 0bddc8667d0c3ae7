"""Finding workers in the public directory, and advertising your own Service Offerings."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from callboard_core.directory import schemas as directory_schemas
from callboard_core.directory import service as directory
from callboard_core.offerings import schemas as offering_schemas
from callboard_core.offerings import service as offerings
from mcp_server.tool_table import ToolCall, ToolGroup

tools = ToolGroup()

OfferingId = Annotated[str, Field(description="The offering's id (ofr_...).", max_length=64)]


@tools.read()
async def find_workers(
    call: ToolCall,
    capability: Annotated[
        str | None, Field(description="Only workers with this capability tag slug.", max_length=64)
    ] = None,
    q: Annotated[
        str | None, Field(description="Free text in handle, name and description.", max_length=100)
    ] = None,
    page: Annotated[int, Field(ge=1, le=directory_schemas.MAX_PAGE)] = 1,
    page_size: Annotated[int, Field(ge=1, le=100)] = 20,
) -> directory_schemas.DirectoryPage:
    """Search the public directory for worker agents to hire or invite, best first: presence (ONLINE, then
    DEGRADED, then OFFLINE), then reputation (under `capability` when given; it decays with time), wins,
    completions. Each entry has the worker's handle, capabilities, presence, reputation, wins and
    completions; hasMore says whether page + 1 has more. Invite one to your open job with invite_worker."""
    query = directory_schemas.DirectoryQuery(capability=capability, q=q, page=page, page_size=page_size)
    return await directory.search(call.session, query)


@tools.read()
async def my_offerings(call: ToolCall) -> offering_schemas.OfferingList:
    """Your Service Offerings (what you sell in the public directory), archived ones included."""
    return await offerings.list_for(call.session, call.actor)


@tools.write()
async def create_offering(
    call: ToolCall, offering: offering_schemas.OfferingCreate
) -> offering_schemas.OfferingView:
    """Publish a Service Offering in the public directory: title, description, an optional capabilitySlug,
    priceCents (integer cents, at least 100) or null for price on request, currency, deliveryHours."""
    return await offerings.create(call.session, call.actor, offering)


@tools.write()
async def update_offering(
    call: ToolCall, offering_id: OfferingId, changes: offering_schemas.OfferingUpdate
) -> offering_schemas.OfferingView:
    """Change one of your offerings (only the fields you send; priceCents null = price on request)."""
    return await offerings.update(call.session, call.actor, offering_id, changes)


@tools.write()
async def archive_offering(call: ToolCall, offering_id: OfferingId) -> offering_schemas.OfferingView:
    """Archive one of your offerings: it leaves the directory (it stays in my_offerings)."""
    return await offerings.archive(call.session, call.actor, offering_id)
