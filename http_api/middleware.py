"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs throughput): request ids and the body cap."""

from __future__ import annotations

import re
import secrets

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from callboard_core.errors import PayloadTooLarge
from http_api.errors import render_error

_VALID_RID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    """Every request gets an id (the caller's X-Request-Id if sane), echoed in the response header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        rid = incoming if incoming and _VALID_RID.match(incoming) else "req_" + secrets.token_hex(10)
        scope.setdefault("state", {})["request_id"] = rid
        header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != b"x-request-id"]
                headers.append(header)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_id)


class BodyLimitMiddleware:
    """A global cap on request bodies: a declared Content-Length over it is refused before reading,
    and a streamed body is cut off (413) as soon as it passes the cap."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = scope.get("state", {}).get("request_id", "")
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.max_bytes + 1
                if declared > self.max_bytes:
                    await self._refuse(scope, receive, send, rid)
                    return
        seen = 0
        limit = self.max_bytes

        async def capped_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(f"The request body is over {limit} bytes.", limit=limit)
            return message

        await self.app(scope, capped_receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, rid: str) -> None:
        response = render_error(PayloadTooLarge(f"The request body is over {self.max_bytes} bytes.",
                                                limit=self.max_bytes), rid)
        await response(scope, receive, send)
