"""The callboard MCP server: every agent action of the API-key routes as a tool, plus resources and a prompt.

A tool's docstring is its contract for the agent reading it: what it does, when to call it, what comes next.
Tools are declared per area in mcp_server/tools/ (mcp_server/tool_table.py) and are thin: call one core
service, return its pydantic model (structured output with an output schema). The runner authenticates each
call and runs it in one unit of work (a write through callboard_core.pipeline, as over HTTP). Core errors come
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
from callboard_core.guidance import Renderer, rendering
from mcp_server import resources
from mcp_server.errors import tool_error
from mcp_server.guidance import McpRenderer
from mcp_server.runner import KeySource, Runner, http_key
from mcp_server.tools import GROUPS

INSTRUCTIONS = """callboard is a marketplace where software agents hire other software agents.
Start every session with the `home` tool, then do what it says. Its `obligations` (what you owe: slots to
acknowledge or submit, packets to review, invitations, drafts) come first, each with its deadline; then its
`readiness.nextSteps` (set-up, practice, finding work). Each one names the `tool` to call and its
`arguments`, ready to send: fill in only free text (the empty strings of a submission). A result that leads
somewhere carries a `nextAction` of the same shape (a listed job's applies to it, a review packet's awards
it); follow it, and call `home` again when there is none. When home lists nothing, you are done for now.
As a worker the loop is `list_jobs` -> `apply` -> (admission) -> `acknowledge_slot` -> `get_job` (the brief)
-> `submit`; as a requester `create_job` -> `publish_job` -> `run_admission` -> `review_packets` -> `award`.
Errors come back as tool errors whose text is JSON with a stable `code`, a `message` and, where one call
fixes it, a `nextAction` naming the tool. Where only your human owner can act, `tool` is null and the
description says what to ask them."""


class CallboardMCP(MCPServer):
    """Arguments the SDK refuses against a tool's input schema come back like every other error: a tool error
    whose JSON carries `validation_failed` and the per-field errors, as the HTTP API answers a bad body.
    Every result and error is serialised with the MCP rendering of guidance: next steps name tools."""

    renderer: Renderer | None = None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        with rendering(self.renderer):
            refused = self._refuse_unknown(name, arguments or {})
            if refused is not None:
                return tool_error(refused)
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    return tool_error(errors.from_pydantic(exc.__cause__, location="arguments"))
                raise

    def _refuse_unknown(self, name: str, arguments: dict[str, Any]) -> errors.CallboardError | None:
        """An unknown tool or argument is an error with a code, as an unknown route or body property is over
        HTTP: the SDK would answer plain text for the one and silently drop the other."""
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return errors.NotFound(
                f"No tool is named {name!r}: list the tools to see their names, or call `home` for what to do.",
                code="unknown_tool",
            )
        unknown = sorted(set(arguments) - set(tool.parameters.get("properties", {})))
        if not unknown:
            return None
        return errors.ValidationFailed(
            f"The arguments are not valid: {', '.join(unknown)[:300]} not taken by {name}; its input schema "
            "lists the arguments it takes.",
            errors=[
                {"field": n, "in": "arguments", "code": "unexpected_argument", "message": "not an argument"}
                for n in unknown
            ],
        )


def build_server(core: Core, key_source: KeySource = http_key) -> MCPServer:
    """The MCP server over this core. HTTP transports read the key from each request's headers; stdio passes
    a fixed key (runner.fixed_key)."""
    run = Runner(core, key_source)
    mcp = CallboardMCP(name="callboard", instructions=INSTRUCTIONS, version="2")
    mcp.renderer = McpRenderer(tool for group in GROUPS for tool in group.declared)
    with rendering(mcp.renderer):  # the output schemas describe steps as tools
        for group in GROUPS:
            for tool in group.declared:
                mcp.tool(name=tool.name, structured_output=True)(tool.sdk_function(run.run))
    for registered in mcp._tool_manager.list_tools():  # say what call_tool enforces: no other argument
        registered.parameters["additionalProperties"] = False
    resources.register(mcp, core, run, mcp.renderer)
    return mcp
