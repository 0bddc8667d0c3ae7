"""The MCP server mounted in the Starlette app: streamable HTTP at `/mcp`, SSE at `/sse` (messages POSTed to
`/messages/`). Every request needs an API key (`X-API-Key` or `Authorization: Bearer`): none, a bad one or
a revoked one is a 401 problem body before the SDK sees the request, so no tool ever runs unauthenticated.
The SDK's DNS-rebinding check allows the configured base URL's host (and loopback)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import orjson
from mcp.server.mcpserver import MCPServer
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from callboard_core.api_keys import service as api_keys
from callboard_core.container import Core
from callboard_core.db.outage import DATABASE_ERRORS, as_outage
from callboard_core.errors import CallboardError, Unauthenticated
from mcp_server.errors import error_body
from mcp_server.runner import GATE_PRINCIPAL, key_from_headers
from mcp_server.server import build_server

_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def transport_security(base_url: str) -> TransportSecuritySettings:
    parts = urlsplit(base_url)
    hosts = {parts.netloc} if parts.netloc else set()
    origins = {f"{parts.scheme}://{parts.netloc}"} if parts.netloc else set()
    for host in _LOOPBACK:  # local clients and tests reach the server on loopback, any port
        hosts |= {host, f"{host}:*"}
        origins |= {f"http://{host}", f"http://{host}:*"}
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=sorted(hosts), allowed_origins=sorted(origins)
    )


def _refused(exc: CallboardError, status: int, headers: dict[str, str]) -> Response:
    """The gate's answer before the MCP server sees the request: the problem body the tools answer with."""
    body = error_body(exc, "req_" + secrets.token_hex(10)) | {"status": status}
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/problem+json", headers=headers
    )


class KeyGate:
    """Refuses a request without a valid API key with a 401 before the MCP SDK handles it."""

    def __init__(self, app: ASGIApp, core: Core) -> None:
        self.app = app
        self.core = core

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            raw = key_from_headers(headers)
            if raw is None:
                raise Unauthenticated(
                    "Send your API key as X-API-Key or 'Authorization: Bearer <key>'.", code="missing_api_key"
                )
            async with self.core.uow(write=False) as uow:
                principal, due = await api_keys.authenticate(uow.session, raw, self.core.read_cache)
        except Unauthenticated as exc:
            challenge = {"WWW-Authenticate": 'ApiKey header="X-API-Key", Bearer'}
            await _refused(exc, 401, challenge)(scope, receive, send)
            return
        except DATABASE_ERRORS as exc:
            outage = as_outage(exc)
            if outage is None:
                raise
            await _refused(outage, 503, {"Retry-After": str(outage.retry_after)})(scope, receive, send)
            return
        # The tools of this very request use it (runner.Runner.principal) instead of checking the key again.
        state = scope.setdefault("state", {})
        state[GATE_PRINCIPAL] = (raw, principal, due)
        state["principal"] = principal  # the request log's "who" (ids only), as the HTTP routes set it
        await self.app(scope, receive, send)


class McpMount:
    """The MCP routes of the app. The server (its tools, schemas and session manager) is built when the app's
    lifespan starts, not per app object: tests build thousands of apps that never serve MCP."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.server: MCPServer | None = None
        self._apps: dict[str, ASGIApp] = {}
        self.routes: list[BaseRoute] = [
            Route("/mcp", endpoint=self._proxy("mcp"), methods=["GET", "POST", "DELETE"]),
            Route("/sse", endpoint=self._proxy("sse"), methods=["GET"]),
            Mount("/messages", app=self._proxy("messages")),
        ]

    def _proxy(self, name: str) -> ASGIApp:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            target = self._apps.get(name)
            if target is None:
                body = {
                    "code": "mcp_not_started",
                    "message": "The MCP server starts with the app's lifespan.",
                    "status": 503,
                }
                await Response(orjson.dumps(body), status_code=503, media_type="application/problem+json")(
                    scope, receive, send
                )
                return
            await target(scope, receive, send)

        return _AsgiApp(app)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        server = build_server(self.core)
        security = transport_security(self.core.settings.base_url)
        server.streamable_http_app(
            streamable_http_path="/mcp", transport_security=security, json_response=True
        )
        sse = SseServerTransport("/messages/", security_settings=security)
        lowlevel: Any = server._lowlevel_server  # driven as the SDK's own sse_app() does

        async def sse_stream(scope: Scope, receive: Receive, send: Send) -> None:
            async with sse.connect_sse(scope, receive, send) as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())

        self.server = server
        self._apps = {
            "mcp": KeyGate(StreamableHTTPASGIApp(server.session_manager), self.core),
            "sse": KeyGate(sse_stream, self.core),
            "messages": KeyGate(sse.handle_post_message, self.core),
        }
        try:
            async with server.session_manager.run():
                yield
        finally:
            self._apps = {}
            self.server = None


class _AsgiApp:
    """An ASGI callable Starlette's Route will not mistake for a request-response function."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
