"""Request dispatch: a Starlette Router that finds a route by index instead of trying every route in turn.

Starlette matches routes one by one; with a few hundred routes (two namings, owner mirrors) that scan
cost more than the rest of a cached request. Routes are bucketed by segment count and leading literal
segments; a request is matched only against its bucket's few routes, in declaration order, so the
outcome (including 405 for a path with other methods) is the one a full scan would give.

A path and method that matched a route without path parameters is remembered, so the next request for
it (the hot, fixed paths such as /api/v2/agents/me) skips the scan: the scan's result depends only on the
path, root path and method while the route list is unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Host, Match, Route, Router, compile_path, get_name
from starlette.types import Receive, Scope, Send

_PREFIX = 3


def _template_key(path: str) -> tuple[int, tuple[str, ...]]:
    segments = path.strip("/").split("/")
    literal: list[str] = []
    for segment in segments[:_PREFIX]:
        if "{" in segment:
            break
        literal.append(segment)
    return len(segments), tuple(literal)


_compiled = functools.lru_cache(maxsize=1024)(compile_path)


class CompiledRoute(Route):
    """A Route to an ASGI endpoint (an object, not a request function) whose path template is compiled once per
    process. An app (its few hundred routes) is built per test, and compiling templates was most of that; the
    compiled template (a pattern, a format and the shared convertors) depends on the path alone. The
    attributes are the ones `Route.__init__` sets for such an endpoint (tests/test_dispatch.py compares them)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], *, methods: list[str]) -> None:
        assert not inspect.isfunction(endpoint), "a request function needs Route's request_response wrapper"
        self.path = path
        self.endpoint = self.app = endpoint
        self.name = get_name(endpoint)
        self.include_in_schema = True
        self.methods = {method.upper() for method in methods}
        if "GET" in self.methods:
            self.methods.add("HEAD")
        self.path_regex, self.path_format, self.param_convertors = _compiled(path)


class IndexedRouter(Router):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("redirect_slashes", False)
        super().__init__(*args, **kwargs)
        self._indexed_count = -1
        self._buckets: dict[tuple[int, tuple[str, ...]], list[tuple[int, BaseRoute]]] = {}
        self._always: list[tuple[int, BaseRoute]] = []
        self._memo: dict[tuple[int, tuple[str, ...]], list[BaseRoute]] = {}
        self._fixed: dict[tuple[str, str, str], Route] = {}
        self._remember = False

    def _reindex(self) -> None:
        self._buckets = {}
        self._always = []
        for order, route in enumerate(self.routes):
            if isinstance(route, Route):
                self._buckets.setdefault(_template_key(route.path), []).append((order, route))
            else:  # mounts and hosts match by prefix: always try them
                self._always.append((order, route))
        self._indexed_count = len(self.routes)
        self._memo = {}
        self._fixed = {}
        # Host routes match on headers, so the path alone cannot decide: remember nothing then. Mounts match
        # on the path alone, so the scan's outcome still depends only on the key.
        self._remember = not any(isinstance(route, Host) for route in self.routes)

    def _candidates(self, path: str) -> list[BaseRoute]:
        if self._indexed_count != len(self.routes):
            self._reindex()
        segments = path.strip("/").split("/")
        memo_key = (len(segments), tuple(segments[:_PREFIX]))
        found = self._memo.get(memo_key)
        if found is None:
            items = list(self._always)
            for k in range(min(_PREFIX, len(segments)) + 1):
                items.extend(self._buckets.get((len(segments), tuple(segments[:k])), ()))
            found = [route for _, route in sorted(items, key=lambda item: item[0])]
            if len(self._memo) >= 4096:  # unknown paths must not grow it without bound
                self._memo.clear()
            self._memo[memo_key] = found
        return found

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if "router" not in scope:
            scope["router"] = self
        if scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
            return
        if self._indexed_count != len(self.routes):
            self._reindex()
        fixed_key = (
            (scope["path"], scope.get("root_path", ""), scope["method"]) if scope["type"] == "http" else None
        )
        fixed = self._fixed.get(fixed_key) if fixed_key is not None else None
        if fixed is not None:
            # What Route.matches would give for a route without parameters.
            scope["route"] = fixed
            scope["endpoint"] = fixed.endpoint
            scope["path_params"] = dict(scope.get("path_params", {}))
            await fixed.handle(scope, receive, send)
            return
        partial = None
        partial_scope: Any = {}
        allowed: set[str] = set()
        fewest_params = 1 << 30
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        for route in self._candidates(path):
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                if (
                    fixed_key is not None
                    and self._remember
                    and isinstance(route, Route)
                    and not route.param_convertors
                ):
                    if len(self._fixed) >= 4096:
                        self._fixed.clear()
                    self._fixed[fixed_key] = route
                scope["route"] = route
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
            if match is Match.PARTIAL:
                # Allow names the methods of the path as documented: a literal path (/agents/dashboard/mine)
                # is its own resource, not the template beside it (/agents/dashboard/{agentId}).
                params = len(getattr(route, "param_convertors", ()))
                if params < fewest_params:
                    fewest_params, allowed = params, set()
                if params == fewest_params:
                    allowed |= getattr(route, "methods", None) or set()
                if partial is None:
                    partial, partial_scope = route, child_scope
        if partial is not None:
            if scope["type"] == "http" and allowed:
                # The path exists with other methods: 405 naming all of them, not only the first route's
                # (one path is often several routes: GET and POST /api-keys).
                raise HTTPException(405, headers={"Allow": ", ".join(sorted(allowed))})
            scope["route"] = partial
            scope.update(partial_scope)
            await partial.handle(scope, receive, send)
            return
        await self.default(scope, receive, send)
