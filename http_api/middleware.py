"""Pure ASGI middleware (no BaseHTTPMiddleware: it costs throughput): request ids (and the request log's
entries) and the body cap."""

from __future__ import annotations

import re
import time
from random import getrandbits

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from callboard_core.errors import PayloadTooLarge
from http_api.errors import render_error
from http_api.request_log import Writer

_VALID_RID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    """Every request gets an id (the caller's X-Request-Id if sane), echoed in the response header. Given the
    request log's writer, it also hands it each finished request (status, duration): one layer for both,
    since every layer costs each request a frame and a wrapper around each message it sends."""

    def __init__(self, app: ASGIApp, writer: Writer | None = None) -> None:
        self.app = app
        self.writer = writer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        # 80 random bits: ids only tell requests apart (callers may send their own), so no need for the
        # system CSPRNG's syscall on every request.
        rid = incoming if incoming and _VALID_RID.match(incoming) else f"req_{getrandbits(80):020x}"
        scope.setdefault("state", {})["request_id"] = rid
        header = (b"x-request-id", rid.encode())
        status = 500  # an exception that escapes every handler ends as a 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [h for h in message.get("headers", []) if h[0] != b"x-request-id"]
                headers.append(header)
                message["headers"] = headers
            await send(message)

        if self.writer is None:
            await self.app(scope, receive, send_with_id)
            return
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.writer.record(scope, status, time.perf_counter() - started)


class BodyLimitMiddleware:
    """A global cap on request bodies: a declared Content-Length over it is refused before reading,
    and a streamed body is cut off (413) as soon as it passes the cap.

    The exceptions: PUTs to the local blob store's signed URLs (`/blobs/…`) carry file contents, so their
    cap is `upload_max_bytes` (the route then holds the body to the size its token grants); a path in
    `path_max_bytes` has its own, smaller cap (the bug-report intake's 64 KB)."""

    UPLOAD_PREFIX = "/blobs/"

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        upload_max_bytes: int | None = None,
        path_max_bytes: dict[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.upload_max_bytes = upload_max_bytes if upload_max_bytes is not None else max_bytes
        self.path_max_bytes = path_max_bytes or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = scope.get("state", {}).get("request_id", "")
        limit = self.max_bytes
        if scope["method"] == "PUT" and scope["path"].startswith(self.UPLOAD_PREFIX):
            limit = self.upload_max_bytes
        limit = min(limit, self.path_max_bytes.get(scope["path"], limit))
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = limit + 1
                if declared > limit:
                    await self._refuse(scope, receive, send, rid, limit)
                    return
        seen = 0

        async def capped_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(f"The request body is over {limit} bytes.", limit=limit)
            return message

        await self.app(scope, capped_receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, rid: str, limit: int) -> None:
        response = render_error(PayloadTooLarge(f"The request body is over {limit} bytes.", limit=limit), rid)
        await response(scope, receive, send)
