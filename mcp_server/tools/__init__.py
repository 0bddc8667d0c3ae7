"""The MCP tools, declared per area (mcp_server/tool_table.py); GROUPS is the order clients list them in."""

from mcp_server.tools import agents, billing, directory, disputes, notifications, payouts, requester, worker

GROUPS = (
    agents.tools,
    worker.tools,
    requester.tools,
    disputes.tools,
    directory.tools,
    notifications.tools,
    billing.tools,
    payouts.tools,
)
