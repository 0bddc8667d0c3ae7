"""The one error map of the HTTP front end: every core error becomes problem+json with a stable code."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from callboard_core import errors as e
from callboard_core.db.outage import DATABASE_ERRORS, as_outage
from callboard_core.guidance import rendering
from http_api.guidance import HTTP

log = logging.getLogger("callboard.http")

STATUS: dict[type[e.CallboardError], int] = {
    e.ValidationFailed: 422,
    e.BadRequest: 400,
    e.Unauthenticated: 401,
    e.Forbidden: 403,
    e.NotFound: 404,
    e.Conflict: 409,
    e.PaymentNotReady: 409,
    e.Gone: 410,
    e.PayloadTooLarge: 413,
    e.RateLimited: 429,
    e.Unavailable: 503,
}

HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 400: "bad_request", 413: "payload_too_large"}


def status_for(exc: e.CallboardError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def problem(
    status: int, code: str, message: str, request_id: str, extra: dict[str, Any] | None = None
) -> Response:
    body: dict[str, Any] = {
        "type": f"urn:callboard:error:{code}",
        "title": message,
        "status": status,
        "code": code,
        "message": message,
        "requestId": request_id,
    }
    # Details never overwrite the contract's own fields (a detail named `status` stays a detail).
    body.update({k: v for k, v in (extra or {}).items() if v is not None and k not in body})
    headers = {"X-Request-Id": request_id}
    if status == 401:
        headers["WWW-Authenticate"] = 'ApiKey header="X-API-Key", Cookie name="svc_session"'
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/problem+json", headers=headers
    )


def render_error(exc: e.CallboardError, request_id: str) -> Response:
    with rendering(HTTP):  # a hint (nextAction) names the route to call
        details = e.wire_details(exc)
    response = problem(status_for(exc), exc.code, exc.message, request_id, details)
    if isinstance(exc, e.RateLimited | e.Unavailable) and exc.retry_after is not None:
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


def request_id_of(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id") or "")


async def handle_callboard_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, e.CallboardError)
    return render_error(exc, request_id_of(request))


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = HTTP_CODES.get(exc.status_code, "http_error")
    message = {404: "No such route.", 405: "Method not allowed on this route."}.get(
        exc.status_code, str(exc.detail)
    )
    response = problem(exc.status_code, code, message, request_id_of(request))
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def handle_database_error(request: Request, exc: Exception) -> Response:
    """The database went away: 503 and when to retry. Any other database error is a bug: the 500."""
    outage = as_outage(exc)
    if outage is None:
        return await handle_unexpected(request, exc)
    rid = request_id_of(request)
    log.warning("database unavailable (request %s): %s", rid, exc)
    return render_error(outage, rid)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    rid = request_id_of(request)
    log.exception("unhandled error (request %s)", rid, exc_info=exc)
    return problem(500, "internal_error", "An unexpected error occurred; it has been logged.", rid)


EXCEPTION_HANDLERS: dict[Any, Any] = {
    e.CallboardError: handle_callboard_error,
    HTTPException: handle_http_exception,
    **dict.fromkeys(DATABASE_ERRORS, handle_database_error),
    Exception: handle_unexpected,
}
