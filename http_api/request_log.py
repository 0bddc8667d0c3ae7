"""One structured line per request, written off the hot path (issue 13).

The same thread counts each request for /metrics (callboard_core/metrics.py) when a metrics token is set.

The request-id middleware (http_api/middleware.py) hands each finished request to `Writer.record`, which
keeps its facts as one small tuple — time, request id, method, the route template (never the raw path: it
carries ids and claim codes), status, duration, and the principal's kind and id (never a key, token or
cookie) — on a queue; one writer thread per process formats and writes the lines (JSON in production,
readable text in development) to stderr in batches. It replaces uvicorn's access log, which formats and
writes on the event loop for every request.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from functools import lru_cache
from typing import Any, TextIO

import orjson
from starlette.types import Scope

from callboard_core import metrics
from callboard_core.principals import KeyPrincipal, MachinePrincipal, OnboardingPrincipal, UserPrincipal

Entry = tuple[float, str, str, str, int, float, str, str | None]


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


@lru_cache(maxsize=4)
def _second(second: int, pattern: str) -> str:
    """A whole second's text (strftime is the costly part of a line: once per second, not per line)."""
    return time.strftime(pattern, time.gmtime(second))


def json_line(entry: Entry) -> str:
    at, rid, method, route, status, seconds, kind, ident = entry
    second = int(at)
    return orjson.dumps(
        {
            "time": f"{_second(second, '%Y-%m-%dT%H:%M:%S')}.{int((at - second) * 1000):03d}+00:00",
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
    second = int(at)
    who = f"{kind}:{ident}" if ident else kind
    return (
        f"{_second(second, '%H:%M:%S')}.{int((at - second) * 1000):03d} {status} {method} {route} "
        f"{seconds * 1000:.1f}ms {who} {rid}"
    )


class Writer:
    """The process's one writer thread: every `interval` seconds it takes what the middleware queued,
    formats it and writes the lines to `stream` in one write (and counts the requests for /metrics).

    Batches, not a line per request: a thread woken for each request takes the GIL from the event loop
    right when the loop wants it back (after a socket or SQLite call), and the logging module's per-record
    machinery and flush cost more than the request itself; measured in docs/decisions.md. A deque append is
    all the event loop pays. At most `interval` of lines is lost if the process is killed with SIGKILL;
    the lifespan's end (SIGTERM included) flushes them."""

    def __init__(self, interval: float = 0.1) -> None:
        self.pending: deque[Entry] = deque()
        self.interval = interval
        self.format = text_line
        self.stream: TextIO | None = None  # None: the process's sys.stderr at write time
        self.lines = True  # write one log line per request
        self.count = False  # count the request for /metrics (callboard_core/metrics.py)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one flush at a time (the thread's, or the lifespan's at shutdown)

    def put(self, entry: Entry) -> None:
        self.pending.append(entry)
        if self._thread is None:
            self.start()

    def record(self, scope: Scope, status: int, seconds: float) -> None:
        """Queue one finished HTTP request (RequestIdMiddleware calls it: one layer for the id and the log)."""
        state = scope.get("state") or {}
        route = scope.get("route")
        kind, ident = principal_of(state.get("principal"))
        self.put(
            (
                time.time(),
                state.get("request_id") or "",
                scope["method"],
                getattr(route, "path", None) or "unmatched",
                status,
                seconds,
                kind,
                ident,
            )
        )

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="callboard-access-log", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            self.flush()

    def flush(self) -> None:
        """Write and count what is queued now (the thread every `interval`; tests; the lifespan's end)."""
        with self._lock:
            entries: list[Entry] = []
            try:
                while True:  # popleft is atomic: the event loop may append while we take
                    entries.append(self.pending.popleft())
            except IndexError:
                pass
            if not entries:
                return
            try:
                if self.lines:
                    stream = self.stream or sys.stderr
                    stream.write("".join([self.format(entry) + "\n" for entry in entries]))
                    stream.flush()
                if self.count:
                    for _, _, method, route, status, seconds, _, _ in entries:
                        metrics.request_done(route, method, status, seconds)
            except Exception:  # lines that cannot be written must not stop the next ones
                logging.getLogger(__name__).exception("could not write access log lines")


WRITER = Writer()


def configure(log_format: str, *, production: bool, lines: bool = True, count: bool = False) -> None:
    """`json`, `text`, or `auto` (JSON in production); `lines`: write them (to stderr); `count`: feed
    /metrics."""
    json_lines = log_format == "json" or (log_format == "auto" and production)
    WRITER.format = json_line if json_lines else text_line
    WRITER.lines, WRITER.count = lines, count
