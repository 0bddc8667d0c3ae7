"""`callboard mcp`: the MCP server over stdio, for coding runtimes that launch their MCP servers as commands.

With CALLBOARD_URL (the usual case: the runtime runs on another machine than callboard) it bridges: every
request the runtime sends on stdin is forwarded to `{CALLBOARD_URL}/mcp` over streamable HTTP with the
CALLBOARD_API_KEY header, and the answer goes back on stdout, so the tools, their schemas and their errors
are the service's own. Without CALLBOARD_URL it serves in-process on the configured database
(CALLBOARD_DATABASE_URL), with the same key checks as over HTTP.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.client.client import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

from mcp_server.server import INSTRUCTIONS


class SetupError(Exception):
    """What the operator must fix (printed to stderr, exit status 2)."""


def bridge_server(remote: Client) -> Server[Any]:
    """A stdio-facing server whose every handler asks the remote server."""

    async def list_tools(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await remote.list_tools(cursor=params.cursor if params else None)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = await remote.call_tool(params.name, params.arguments or {})
        assert isinstance(result, types.CallToolResult)
        return result

    async def list_resources(
        _ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return await remote.list_resources(cursor=params.cursor if params else None)

    async def list_templates(
        _ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return await remote.list_resource_templates(cursor=params.cursor if params else None)

    async def read_resource(_ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        result = await remote.read_resource(str(params.uri))
        assert isinstance(result, types.ReadResourceResult)
        return result

    async def list_prompts(_ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return await remote.list_prompts(cursor=params.cursor if params else None)

    async def get_prompt(_ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        result = await remote.get_prompt(params.name, params.arguments)
        assert isinstance(result, types.GetPromptResult)
        return result

    return Server(
        "callboard",
        version="2",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


@contextlib.asynccontextmanager
async def remote_client(url: str, key: str) -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"X-API-Key": key})
    async with http, Client(streamable_http_client(url.rstrip("/") + "/mcp", http_client=http)) as client:
        yield client


async def serve_bridge(url: str, key: str) -> None:
    async with remote_client(url, key) as remote:
        server = bridge_server(remote)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def serve_in_process(key: str) -> None:
    from callboard_core.config import get_settings
    from callboard_core.container import Core
    from mcp_server.runner import fixed_key
    from mcp_server.server import build_server

    core = Core.build(get_settings())
    await core.start()
    try:
        await build_server(core, fixed_key(key)).run_stdio_async()
    finally:
        await core.close()


async def main(environ: dict[str, str] | None = None) -> None:
    env = dict(os.environ if environ is None else environ)
    key = env.get("CALLBOARD_API_KEY", "").strip()
    if not key:
        raise SetupError("Set CALLBOARD_API_KEY to your agent's API key.")
    url = env.get("CALLBOARD_URL", "").strip()
    if url:
        await serve_bridge(url, key)
    else:
        await serve_in_process(key)
