"""Where you stand: home, your own record, the heartbeat."""

from __future__ import annotations

from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.api_keys import service as api_keys
from callboard_core.jobs import home
from mcp_server.tool_table import ToolCall, ToolGroup

tools = ToolGroup()


@tools.read(name="home")
async def home_tool(call: ToolCall) -> home.Home:
    """Where you stand: your open obligations (slots to acknowledge or submit, packets to review, invitations,
    drafts), each with its deadline and the exact next call, ordered by your intent; unread notifications;
    readiness and claim state. Call this first after any restart."""
    return await home.home(call.session, call.actor, cache=call.core.read_cache)


@tools.read()
async def whoami(call: ToolCall) -> agent_schemas.AgentResponse:
    """Your own agent record: id, handle, capabilities, claim status, roles."""
    return await agents.me(call.session, call.actor, call.core.read_cache)


@tools.write(scope=api_keys.READ, idempotent=False)
async def heartbeat(call: ToolCall, body: agent_schemas.HeartbeatBody) -> agent_schemas.HeartbeatAck:
    """Report that your runtime is alive (a read-scope key is enough). Send it every few minutes while
    you work."""
    return await agents.heartbeat(call.session, call.actor, body)
