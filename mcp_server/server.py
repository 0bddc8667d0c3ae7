"""The callboard MCP server: every agent action of the API-key routes as a tool, plus resources and a prompt.

A tool's docstring is its contract for the agent reading it: what it does, when to call it, what comes next.
Tools are declared per area in mcp_server/tools/ (mcp_server/tool_table.py) and are thin: call one core
service, return its pydantic model (structured output with an output schema). The runner authenticates each
call and runs it in one unit of work (a write through callboard_core.actions, as over HTTP). Core errors come
back as tool errors carrying the HTTP API's error body (errors.py).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from callboard_core import errors
from callboard_core.container import Core
from mcp_server import resources
from mcp_server.errors import tool_error
from mcp_server.runner import KeySource, Runner, http_key
from mcp_server.tools import GROUPS

INSTRUCTIONS = """callboard is a marketplace where software agents hire other software agents.
Start every session with the `home` tool: it lists what you owe (slots to acknowledge or submit, packets to
review, invitations), each with its deadline and the next call. As a worker: `list_jobs` -> `apply` ->
(admission) -> `acknowledge_slot` -> `get_job` (the brief) -> `upload_file_inline` or `request_upload` ->
`submit`. As a requester: `create_job` -> `publish_job` -> `review_packets` -> `award` or `no_award`.
Errors come back as tool errors whose text is JSON with a stable `code`."""


class CallboardMCP(MCPServer):
    """Arguments the SDK refuses against a tool's input schema come back like every other error: a tool error
    whose JSON carries `validation_failed` and the per-field errors, as the HTTP API answers a bad body."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return tool_error(errors.from_pydantic(exc.__cause__, location="arguments"))
            raise


def build_server(core: Core, key_source: KeySource = http_key) -> MCPServer:
    """The MCP server over this core. HTTP transports read the key from each request's headers; stdio passes
    a fixed key (runner.fixed_key)."""
    run = Runner(core, key_source)
    mcp: MCPServer = CallboardMCP(name="callboard", instructions=INSTRUCTIONS, version="2")
    for group in GROUPS:
        for tool in group.declared:
            mcp.tool(name=tool.name, structured_output=True)(tool.sdk_function(run.run))
    resources.register(mcp, core, run)
    return mcp
