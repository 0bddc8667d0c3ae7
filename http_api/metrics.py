"""GET /metrics: the Prometheus text format (callboard_core/metrics.py), for a scraper holding the
CALLBOARD_METRICS_TOKEN. Unset, the route is a 404: metrics describe the business (money operations,
failures) and are not for the public."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response

from callboard_core import health
from callboard_core.container import Core
from callboard_core.security import tokens
from http_api.auth import bearer_token
from http_api.errors import problem, request_id_of


def endpoint(core: Core, token: str | None) -> Callable[[Request], Awaitable[Response]]:

    async def serve_metrics(request: Request) -> Response:
        rid = request_id_of(request)
        if not token:
            return problem(404, "not_found", "No such route.", rid)
        sent = bearer_token(request)
        if sent is None or not tokens.constant_time_equals(sent, token):
            response = problem(
                401,
                "invalid_metrics_token",
                "Send the metrics token as 'Authorization: Bearer <CALLBOARD_METRICS_TOKEN>'.",
                rid,
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        return Response(await health.metrics_text(core), media_type=CONTENT_TYPE_LATEST)

    return serve_metrics
