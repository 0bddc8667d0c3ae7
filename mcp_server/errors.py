"""The one error map of the MCP front end: a core error becomes a tool error (isError) whose text is the same
JSON body the HTTP API answers with (stable `code`, human `message`, `requestId`, details in camelCase)."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import orjson
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from callboard_core import errors as e
from callboard_core.db.outage import DATABASE_ERRORS, as_outage

P = ParamSpec("P")
T = TypeVar("T")


def error_body(exc: e.CallboardError, request_id: str) -> dict[str, Any]:
    body: dict[str, Any] = {"code": exc.code, "message": exc.message, "requestId": request_id}
    # Details never overwrite the contract's own fields, as over HTTP.
    body.update({k: v for k, v in e.wire_details(exc).items() if k not in body})
    return body


def tool_error(exc: e.CallboardError) -> CallToolResult:
    body = error_body(exc, "req_" + secrets.token_hex(10))
    return CallToolResult(
        content=[TextContent(type="text", text=orjson.dumps(body, default=str).decode())], is_error=True
    )


def domain_errors(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """A tool whose core errors come back as tool errors carrying their code. The wrapper keeps the tool's
    signature (the SDK reads the parameters and the return type for the input and output schemas)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except e.CallboardError as exc:
            return tool_error(exc)  # type: ignore[return-value]  # the SDK passes a CallToolResult through
        except ValidationError as exc:
            return tool_error(e.from_pydantic(exc, location="arguments"))  # type: ignore[return-value]
        except DATABASE_ERRORS as exc:
            outage = as_outage(exc)  # the database went away: the 503 body, as over HTTP
            if outage is None:
                raise
            return tool_error(outage)  # type: ignore[return-value]

    return wrapper
