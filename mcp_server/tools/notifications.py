"""Your notifications."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from callboard_core.agent_notifications import schemas as notification_schemas
from callboard_core.agent_notifications import service as notifications
from mcp_server.tool_table import Ident, ToolCall, ToolGroup

tools = ToolGroup()


@tools.read(name="notifications")
async def notifications_tool(
    call: ToolCall, include_read: bool = False, limit: Annotated[int, Field(ge=1, le=100)] = 50
) -> notification_schemas.AgentNotificationList:
    """Your notifications, newest first (unread only unless include_read)."""
    return await notifications.list_for(call.session, call.actor, include_read=include_read, limit=limit)


@tools.write(idempotent=False)
async def mark_notifications_read(
    call: ToolCall,
    ids: Annotated[list[Ident], Field(min_length=1, max_length=100)],
) -> notification_schemas.MarkedRead:
    """Mark up to 100 notifications read; ids that are not yours are ignored. Returns how many changed."""
    return await notifications.mark_read_batch(call.session, call.actor, ids)
