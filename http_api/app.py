"""The Starlette application: the core for owners, staff and HTTP agents."""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from callboard_core import health, worker
from callboard_core.config import Settings, load_settings
from callboard_core.container import Core
from http_api import metrics as http_metrics
from http_api import request_log
from http_api.blob_routes import blob_routes
from http_api.dispatch import CompiledRoute, IndexedRouter
from http_api.endpoint import build_endpoint
from http_api.errors import EXCEPTION_HANDLERS
from http_api.middleware import BodyLimitMiddleware, RequestIdMiddleware
from http_api.openapi import build_openapi
from http_api.pages_support import TEMPLATES
from http_api.route_table import RouteDef
from http_api.routes import all_routes, bug_reports
from mcp_server.http import McpMount


def create_app(settings: Settings | None = None, *, core: Core | None = None) -> Starlette:
    settings = settings or (core.settings if core else load_settings())
    core = core or Core.build(settings)
    sandbox = settings.processor == "sandbox"
    table, ordered = _routes(sandbox)

    def described() -> tuple[dict[str, Any], bytes]:
        return _described(sandbox, settings.base_url, settings.max_upload_bytes)

    async def openapi_json(_: Request) -> Response:
        return Response(described()[1], media_type="application/json")

    async def docs(request: Request) -> Response:
        return TEMPLATES.TemplateResponse(
            request, "docs.html", {"doc": described()[0], "groups": _groups(table)}
        )

    async def healthz(_: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def readyz(_: Request) -> Response:
        """200 when the database answers at the expected schema and the blob store takes a write; else 503
        with what is wrong (for a load balancer or an orchestrator's readiness probe)."""
        state = await health.readiness(core)
        return Response(
            orjson.dumps(state.model_dump(by_alias=True)),
            status_code=200 if state.ready else 503,
            media_type="application/json",
        )

    routes: list[BaseRoute] = [
        Route("/openapi.json", openapi_json, methods=["GET"], include_in_schema=False),
        Route("/docs", docs, methods=["GET"], include_in_schema=False),
        Route("/healthz", healthz, methods=["GET"], include_in_schema=False),
        Route("/readyz", readyz, methods=["GET"], include_in_schema=False),
        Route(
            "/metrics",
            http_metrics.endpoint(core, settings.metrics_token),
            methods=["GET"],
            include_in_schema=False,
        ),
        *blob_routes(core),
    ]
    for route in ordered:
        routes.append(CompiledRoute(route.path, build_endpoint(route, core), methods=[route.method]))

    mcp = McpMount(core)  # /mcp, /sse, /messages/: the MCP server, built when the lifespan starts
    routes.extend(mcp.routes)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, Any]]:
        try:
            async with contextlib.AsyncExitStack() as stack:
                await core.start()
                core.db.start_checkpointer()  # SQLite: off the event loop's writers (stopped at close)
                await stack.enter_async_context(mcp.lifespan())
                if settings.sweeper_in_server:
                    await stack.enter_async_context(
                        worker.in_background(core, settings.sweep_interval_seconds)
                    )
                # Everything built at start-up lives as long as the process: keep it out of the cyclic GC's scans.
                gc.freeze()
                yield {}
        finally:
            request_log.WRITER.flush()  # the lines of the last requests are written before the process ends
            await core.close()

    app = Starlette(exception_handlers=EXCEPTION_HANDLERS)
    app.router = IndexedRouter(routes, lifespan=lifespan)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        upload_max_bytes=settings.max_upload_bytes,
        path_max_bytes={bug_reports.INTAKE_PATH: bug_reports.MAX_BYTES},
    )
    # Outermost of ours: it names the request, times all of it and sees its route; the request log's thread
    # writes the line and counts the request for /metrics (when a metrics token is set).
    writer = None
    if settings.request_log or settings.metrics_token:
        request_log.configure(
            settings.log_format,
            production=settings.is_production,
            lines=settings.request_log,
            count=bool(settings.metrics_token),
        )
        writer = request_log.WRITER
    app.add_middleware(RequestIdMiddleware, writer=writer)
    app.state.core = core
    app.state.route_table = table
    return app


@functools.lru_cache(maxsize=2)
def _routes(sandbox: bool) -> tuple[list[RouteDef], list[RouteDef]]:
    """The route table, as declared and in matching order, once per process: every app of the process (the
    test suite builds thousands) serves the same one. The sandbox processor's hosted pages exist only when it
    is the processor."""
    table = [r for r in all_routes() if r.tag != "sandbox" or sandbox]
    return table, _matching_order(table)


@functools.lru_cache(maxsize=8)
def _described(sandbox: bool, base_url: str, max_upload_bytes: int) -> tuple[dict[str, Any], bytes]:
    """The OpenAPI document (a dict and its bytes), built at its first request and then kept for the process:
    building it builds every schema (a second of a server's start-up; most processes never serve it). Readers
    only: nothing may change the document."""
    doc = build_openapi(_routes(sandbox)[0], base_url=base_url, max_upload_bytes=max_upload_bytes)
    return doc, orjson.dumps(doc)


def _matching_order(table: list[RouteDef]) -> list[RouteDef]:
    """Literal segments before parameters (`/jobs/search` ahead of `/jobs/{id}`): Starlette takes the first
    match, and declaration order must not decide which of two overlapping templates wins. The routes of one
    template stay together, in declaration order."""
    by_path: dict[str, list[RouteDef]] = {}
    for route in table:
        by_path.setdefault(route.path, []).append(route)
    ordered = sorted(by_path.items(), key=lambda item: _specificity(item[0]))
    return [route for _, defs in ordered for route in defs]


def _specificity(path: str) -> tuple[int, ...]:
    return tuple(1 if "{" in segment else 0 for segment in path.strip("/").split("/"))


def _groups(table: list[RouteDef]) -> dict[str, list[RouteDef]]:
    groups: dict[str, list[RouteDef]] = {}
    for route in table:
        if not route.page:
            groups.setdefault(route.tag, []).append(route)
    return groups
