"""One structured line per request, written off the hot path (issue 13).

The same thread counts each request for /metrics (callboard_core/metrics.py) when a metrics token is set.

The middleware keeps a request's facts as one small tuple — time, request id, method, the route template
(never the raw path: it carries ids and claim codes), status, duration, and the principal's kind and id
(never a key, token or cookie) — and puts it on a queue; one writer thread per process formats and writes
the lines (JSON in production, readable text in development) through the `callboard.access` logger. It
replaces uvicorn's access log, which formats and writes on the event loop for every request.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from callboard_core import metrics
from callboard_core.principals import KeyPrincipal, MachinePrincipal, OnboardingPrincipal, UserPrincipal
from mcp_server.runner import GATE_PRINCIPAL

log = logging.getLogger("callboard.access")
Entry = tuple[float, str, str, str, int, float, str, str | None]
_STOP: Any = object()


def principal_of(principal: Any) -> tuple[str, str | None]:
    """(kind, id) of whoever the request acted as: ids only, never a credential."""
    if isinstance(principal, KeyPrincipal):
        return ("agent", principal.agent_id) if principal.agent_id else ("owner_key", principal.owner_id)
    if isinstance(principal, UserPrincipal):
        return "user", principal.user_id
    if isinstance(principal, OnboardingPrincipal):
        return "onboarding", principal.onboarding_session_id
    if isinstance(principal, MachinePrincipal):
        return "machine", principal.name
    if isinstance(principal, tuple) and len(principal) > 1 and isinstance(principal[1], KeyPrincipal):
        return principal_of(principal[1])  # the MCP gate's (key, principal, due)
    return "anonymous", None


def json_line(entry: Entry) -> str:
    at, rid, method, route, status, seconds, kind, ident = entry
    return orjson.dumps(
        {
            "time": datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds"),
            "requestId": rid,
            "method": method,
            "route": route,
            "status": status,
            "durationMs": round(seconds * 1000, 2),
            "principal": kind,
            "principalId": ident,
        }
    ).decode()


def text_line(entry: Entry) -> str:
    at, rid, method, route, status, seconds, kind, ident = entry
    when = datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]
    who = f"{kind}:{ident}" if ident else kind
    return f"{when} {status} {method} {route} {seconds * 1000:.1f}ms {who} {rid}"


class Writer:
    """The process's one writer thread: formats and logs what the middleware queued."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.format = text_line
        self.lines = True  # write one log line per request
        self.count = False  # count the request for /metrics (callboard_core/metrics.py)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()

    def put(self, entry: Entry) -> None:
        if self._thread is None:
            self.start()
        self._idle.clear()
        self.queue.put(entry)

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="callboard-access-log", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            entry = self.queue.get()
            if entry is _STOP:
                self._idle.set()
                return
            try:
                if self.lines:
                    log.info(self.format(entry))
                if self.count:
                    _, _, method, route, status, seconds, _, _ = entry
                    metrics.request_done(route, method, status, seconds)
            except Exception:  # a line that cannot be written must not stop the next ones
                logging.getLogger(__name__).exception("could not write an access log line")
            if self.queue.empty():
                self._idle.set()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until what was queued is written (tests; shutdown)."""
        deadline = time.monotonic() + timeout
        while not self.queue.empty() or not self._idle.is_set():
            if time.monotonic() > deadline:
                return
            self._idle.wait(0.01)

    def stop(self) -> None:
        """Write what is queued, then end the thread (graceful shutdown)."""
        if self._thread is not None and self._thread.is_alive():
            self.queue.put(_STOP)
            self._thread.join(timeout=5)
        self._thread = None


WRITER = Writer()


def configure(log_format: str, *, production: bool, lines: bool = True, count: bool = False) -> None:
    """`json`, `text`, or `auto` (JSON in production); `lines`: write them; `count`: feed /metrics."""
    json_lines = log_format == "json" or (log_format == "auto" and production)
    WRITER.format = json_line if json_lines else text_line
    WRITER.lines, WRITER.count = lines, count
    if not log.handlers:  # the line alone on stderr (no logging prefix: a JSON line stays JSON)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


class RequestLogMiddleware:
    """Pure ASGI: a tuple per HTTP request onto the writer's queue; nothing else on the event loop."""

    def __init__(self, app: ASGIApp, writer: Writer = WRITER) -> None:
        self.app = app
        self.writer = writer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception that escapes every handler ends as uvicorn's 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            state = scope.get("state") or {}
            route = scope.get("route")
            kind, ident = principal_of(state.get("principal") or state.get(GATE_PRINCIPAL))
            self.writer.put(
                (
                    time.time(),
                    state.get("request_id") or "",
                    scope["method"],
                    getattr(route, "path", None) or "unmatched",
                    status,
                    time.perf_counter() - started,
                    kind,
                    ident,
                )
            )
