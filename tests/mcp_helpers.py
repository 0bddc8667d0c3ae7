"""The app served by uvicorn on a free port, and MCP clients (the real `mcp` SDK client) that talk to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import uvicorn
from mcp.client.client import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from callboard_core.container import Core
from http_api.app import create_app
from tests.netutil import free_port

CALLBOARD = str(Path(sys.executable).with_name("callboard"))


@contextlib.asynccontextmanager
async def serving(core: Core, *, port: int | None = None) -> AsyncIterator[str]:
    """The whole app (its lifespan runs the MCP session manager) on 127.0.0.1:<port or a free one>; yields its
    URL."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(core=core), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def http_client(url: str, key: str | None, *, bearer: bool = False) -> AsyncIterator[Client]:
    """An MCP client over streamable HTTP, sending the key as X-API-Key (or as a bearer token)."""
    headers = {} if key is None else ({"Authorization": f"Bearer {key}"} if bearer else {"X-API-Key": key})
    http = create_mcp_http_client(headers=headers)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        yield client


@contextlib.asynccontextmanager
async def sse_mcp_client(url: str, key: str) -> AsyncIterator[Client]:
    async with Client(sse_client(f"{url}/sse", headers={"X-API-Key": key})) as client:
        yield client


def on_database_env(core: Core, key: str) -> dict[str, str]:
    """`callboard mcp` working on the test's database itself (no CALLBOARD_URL), acting with `key`."""
    return {
        "CALLBOARD_API_KEY": key,
        "CALLBOARD_URL": "",
        "CALLBOARD_DATABASE_URL": core.settings.database_url,
        "CALLBOARD_SECRET_KEY": core.settings.secret_key,
        "CALLBOARD_VAR_DIR": str(core.settings.var_dir),
        "CALLBOARD_ENV": "test",
    }


@contextlib.asynccontextmanager
async def stdio_client(env: dict[str, str]) -> AsyncIterator[Client]:
    """`callboard mcp` as a subprocess, as a coding runtime launches it."""
    import os

    params = StdioServerParameters(command=CALLBOARD, args=["mcp"], env={**os.environ, **env})
    async with Client(params) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful tool call's structured result."""
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    assert not result.is_error, f"{tool} failed: {_text(result)}"
    assert result.structured_content is not None
    return dict(result.structured_content)


async def call_error(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A failed tool call's error body (the JSON the HTTP API would answer with)."""
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
    return dict(json.loads(_text(result)))


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))
