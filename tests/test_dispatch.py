"""The indexed router answers exactly as Starlette's full scan would, the first time and when it answers a
fixed path from memory (with a Mount among the routes, as the MCP transport's /messages is)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Host, Mount, Route, Router

from http_api.dispatch import CompiledRoute, IndexedRouter


def _text(text: str) -> Callable[[Request], Awaitable[PlainTextResponse]]:
    async def endpoint(_: Request) -> PlainTextResponse:
        return PlainTextResponse(text)

    return endpoint


def _routes() -> list[Route | Mount | Host]:
    return [
        Route("/api/me", _text("me")),
        Route("/api/items", _text("list")),
        Route("/api/items", _text("create"), methods=["POST"]),
        Route("/api/items/{id}", _text("item")),
        Mount("/messages", routes=[Route("/", _text("mounted"), methods=["POST"])]),
        Route("/messages/fixed", _text("shadowed by the mount")),
    ]


async def _answers(router: Router) -> list[tuple[int, str]]:
    app = Starlette()
    app.router = router
    calls = [
        ("GET", "/api/me"),
        ("GET", "/api/items"),
        ("POST", "/api/items"),
        ("DELETE", "/api/items"),
        ("GET", "/api/items/7"),
        ("POST", "/messages/"),
        ("GET", "/messages/fixed"),
        ("GET", "/nowhere"),
    ]
    got = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for _ in range(3):  # the second and third rounds are answered from the router's memory
            for method, path in calls:
                reply = await client.request(method, path)
                got.append((reply.status_code, reply.text if reply.status_code == 200 else ""))
    return got


@pytest.mark.parametrize("extra", [[], [Host("api.example.com", app=PlainTextResponse("host"))]])
async def test_indexed_router_answers_as_the_full_scan_does(extra: list[Host]) -> None:
    indexed = await _answers(IndexedRouter([*_routes(), *extra]))
    scanned = await _answers(Router([*_routes(), *extra], redirect_slashes=False))
    assert indexed == scanned
    assert indexed[:8] == [
        (200, "me"),
        (200, "list"),
        (200, "create"),
        (405, ""),
        (200, "item"),
        (200, "mounted"),
        (404, ""),  # the mount comes first and has no such route
        (404, ""),
    ]


async def test_a_remembered_path_skips_the_scan_even_beside_a_mount() -> None:
    router = IndexedRouter(_routes())
    await _answers(router)
    assert ("/api/me", "", "GET") in router._fixed
    assert ("/api/items/7", "", "GET") not in router._fixed  # a path with parameters is never remembered


class _Asgi:
    """An ASGI endpoint object, as the app's endpoints are."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse(self.text)(scope, receive, send)


@pytest.mark.parametrize(
    ("path", "methods"),
    [("/api/items/{id}", ["GET"]), ("/api/items/{id:int}/files/{name}", ["post"]), ("/api/me", ["DELETE"])],
)
def test_a_compiled_route_is_the_route_starlette_would_build(path: str, methods: list[str]) -> None:
    endpoint = _Asgi("x")
    compiled, stock = CompiledRoute(path, endpoint, methods=methods), Route(path, endpoint, methods=methods)
    assert vars(compiled).keys() == vars(stock).keys()
    for name, value in vars(stock).items():
        got = getattr(compiled, name)
        assert (
            (got.pattern, got.flags) == (value.pattern, value.flags) if name == "path_regex" else got == value
        )
    assert CompiledRoute(path, _Asgi("y"), methods=methods).path_regex is compiled.path_regex  # compiled once


async def test_compiled_routes_answer_as_starlette_routes_do() -> None:
    def routes(kind: type[Route]) -> list[Route]:
        return [
            kind("/a/{id:int}", _Asgi("int"), methods=["GET"]),
            kind("/a/{id}", _Asgi("str"), methods=["PUT"]),
        ]

    for kind in (CompiledRoute, Route):
        app = Starlette()
        app.router = IndexedRouter(routes(kind))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            got = [
                (r.status_code, r.text)
                for r in [await client.get("/a/7"), await client.put("/a/x"), await client.head("/a/7")]
            ]
        assert got == [(200, "int"), (200, "str"), (200, "")], kind
