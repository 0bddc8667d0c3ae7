"""A lean in-process client for the generic tests that send thousands of requests (the error contract, the
authorization matrix): it calls the ASGI app as httpx's ASGITransport does (the same scope: path, raw path,
query string, httpx's default headers, JSON encoded as httpx encodes it) without httpx's per-request client
machinery, which took about 0.3 ms of a refused request's 0.4 ms. The app is the same real app; every other
test, and every user-facing flow, goes through httpx.
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx

DEFAULT_HEADERS = [
    (b"accept", b"*/*"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"connection", b"keep-alive"),
    (b"user-agent", f"python-httpx/{httpx.__version__}".encode()),
]


class Sent:
    """What was sent: the method, the URL and the headers."""

    def __init__(self, method: str, url: httpx.URL, headers: list[tuple[bytes, bytes]]) -> None:
        self.method, self.url, self.headers = method, url, httpx.Headers(headers)


class Answer:
    """The parts of httpx.Response the generic tests read."""

    def __init__(self, request: Sent, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.request, self.status_code, self.content = request, status, body
        self.headers = httpx.Headers(headers)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class AsgiClient:
    def __init__(self, app: Any, base_url: str) -> None:
        self.app, self.base_url = app, base_url.rstrip("/")
        self.host = httpx.URL(base_url).netloc

    async def __aenter__(self) -> AsgiClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    async def get(self, url: str, **kw: Any) -> Answer:
        return await self.request("GET", url, **kw)

    async def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        content: bytes | AsyncIterator[bytes] | None = None,
        params: Any = None,
        headers: dict[str, Any] | None = None,
    ) -> Answer:
        full = httpx.URL(self.base_url + url, params=params or None)
        sent = [(b"host", self.host), *DEFAULT_HEADERS]
        body, stream = b"", None
        if isinstance(content, bytes):
            body = content
        elif content is not None:
            stream = content  # streamed, as httpx sends an async iterator: chunked, no length
            sent.append((b"transfer-encoding", b"chunked"))
        elif json is not None:
            body = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            sent.append((b"content-type", b"application/json"))
        if stream is None and (
            body or method not in ("GET", "HEAD", "OPTIONS", "DELETE") or content is not None
        ):
            sent.append((b"content-length", str(len(body)).encode()))
        own = {k.lower(): v if isinstance(v, bytes) else v.encode() for k, v in (headers or {}).items()}
        sent = [(k, v) for k, v in sent if k.decode() not in own]
        sent += [(k.encode(), v) for k, v in own.items()]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "headers": sent,
            "scheme": full.scheme,
            "path": full.path,
            "raw_path": full.raw_path.split(b"?")[0],
            "query_string": full.query,
            "server": (full.host, full.port),
            "client": ("127.0.0.1", 123),
            "root_path": "",
        }
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                return {"type": "http.disconnect"}
            if stream is not None:
                async for chunk in stream:
                    return {"type": "http.request", "body": chunk, "more_body": True}
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        status, answer_headers, chunks = 0, [], []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, answer_headers
            if message["type"] == "http.response.start":
                status, answer_headers = message["status"], list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return Answer(Sent(method, full, sent), status, answer_headers, b"".join(chunks))
