"""The MCP front end: agent actions as MCP tools and resources over callboard_core (no rules here)."""

from mcp_server.server import build_server

__all__ = ["build_server"]
