"""The error contract, generic over the route table: whatever a client sends, the answer is a 4xx
problem+json (code, message, requestId equal to the X-Request-Id header), never a 5xx.

The caller comes before the request's shape (http_api/endpoint.py): no credential is 401 and a missing role
403 whatever the body; only then does malformed, mistyped or unknown input get its 400/422. So every test
sends a credential the route admits (`Caller.signed`, on placeholder paths); the tests that must reach the
handler (wrong types, long strings, garbage path parameters) also name the caller's own objects
(`Caller.prepare`).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest

from http_api.route_table import SAFE_METHODS, AuthKind, RouteDef
from http_api.routes import all_routes
from tests.conftest import BASE_URL, _backends
from tests.factories import (
    PLACEHOLDER_ID,
    Unsampleable,
    World,
    assert_not_5xx,
    assert_problem,
    body_fields,
    database_url_for,
    fill_path,
    fill_query,
    model_schema,
    open_world,
    placeholder_path,
    route_id,
    sample_body,
)

ROUTES = all_routes()
API = [r for r in ROUTES if not r.page]
BODY_ROUTES = [pytest.param(r, id=route_id(r)) for r in API if r.body is not None]
QUERY_ROUTES = [pytest.param(r, id=route_id(r)) for r in API if r.query is not None]
PATH_ROUTES = [pytest.param(r, id=route_id(r)) for r in ROUTES if r.path_params]
UNSAFE = [pytest.param(r, id=route_id(r)) for r in API if r.method not in SAFE_METHODS]
LONG = "x" * 100_000
SMALL_CAP = 2048


@pytest.fixture(scope="module", params=_backends())
def module_database(request: pytest.FixtureRequest) -> str:
    return database_url_for(request)


@pytest.fixture(scope="module")
async def world(module_database: str, tmp_root: Any) -> Any:
    async with open_world(module_database, tmp_root) as w:
        yield w


@pytest.fixture(scope="module")
async def capped(module_database: str, tmp_root: Any) -> Any:
    """An app with a small global body cap."""
    async with open_world(module_database, tmp_root, wipe=False, max_body_bytes=SMALL_CAP) as w:
        yield w


def valid_body(route: RouteDef, refs: dict[str, str] | None = None) -> dict[str, Any]:
    """The route's valid body; with refs (from `Caller.prepare`), naming the caller's own objects."""
    try:
        body = sample_body(route, refs)
    except Unsampleable as exc:
        pytest.skip(f"no valid body for {route_id(route)} (add one to factories.BODY_OVERRIDES): {exc}")
    return body or {}


class Caller:
    """Sends requests to one route as a fresh caller the route admits, on paths naming its own objects."""

    def __init__(self, world: World, route: RouteDef) -> None:
        self.world, self.route = world, route
        self.headers: dict[str, str] = {}
        self.path = placeholder_path(route)
        self.query: dict[str, Any] = {}
        self.refs: dict[str, str] = {}  # ids the body names (see factories.sample_body)

    async def signed(self) -> Caller:
        """The route's credential (the module's shared owner and agent), on placeholder paths (an onboarding
        token's slug pinned): enough for what is refused before the handler runs."""
        self.headers, pinned = await self.world.credentials(self.route, await self.world.someone())
        self.path = re.sub(r"{(\w+)}", lambda m: pinned.get(m.group(1), PLACEHOLDER_ID), self.route.path)
        return self

    async def prepare(self) -> Caller:
        actor = await self.world.actor(agent=True)
        self.headers, pinned = await self.world.credentials(self.route, actor)
        try:
            self.path = await fill_path(self.world, self.route, actor, pinned, self.refs)
        except LookupError:
            self.path = placeholder_path(self.route)  # the handler answers 404: still a 4xx
        self.query = await fill_query(self.world, self.route, actor)
        return self

    async def send(
        self,
        client: httpx.AsyncClient,
        *,
        json: Any = None,
        content: bytes | None = None,
        path: str | None = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        headers = {**self.headers, **(headers or {})}
        if content is not None:
            headers.setdefault("Content-Type", "application/json")
        return await client.request(
            self.route.method,
            path or self.path,
            json=json,
            content=content,
            params=self.query if query is None else query,
            headers=headers,
        )


# --- malformed and misshapen bodies: refused after the credential, before the handler --------------

MALFORMED = [
    b'{"a": ',
    b"{",
    b'{"a": 1,}',
    b"[1, 2",
    b"\xff\xfe{}",
    b"{'a': 1}",
    b'{"a": NaN}',
    b'{"a": 1e999}',
    b'{"a": "\\ud800"}',
    b"tru",
]


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_malformed_json_is_400(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).signed()
    async with world.lean_client() as client:
        for raw in MALFORMED:
            assert_problem(await caller.send(client, content=raw), 400, "malformed_json")


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_body_that_is_not_an_object_is_422(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).signed()
    async with world.lean_client() as client:
        for value in ([], [valid_body(route)], "a string", 42, True):
            assert_problem(await caller.send(client, json=value), 422)


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_unknown_top_level_field_is_422_and_named(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).signed()
    async with world.lean_client() as client:
        for name in ("unknownFieldXyz", "__proto__", "ü-field"):
            response = await caller.send(client, json={**valid_body(route), name: 1})
            body = assert_problem(response, 422)
            assert name in [e.get("field") for e in body.get("errors", [])], response.text


@pytest.mark.parametrize(
    "route", [pytest.param(r, id=route_id(r)) for r in API if r.body is not None and not r.body_optional]
)
async def test_missing_body_is_422(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).signed()
    async with world.lean_client() as client:
        assert_problem(await caller.send(client), 422)


@pytest.mark.parametrize(
    "route",
    [
        pytest.param(r, id=route_id(r))
        for r in API
        # A raw-body route (the signed webhook) takes a body its handler verifies itself.
        if r.body is None and not r.raw_body and r.method not in SAFE_METHODS
    ],
)
async def test_body_on_a_route_without_one_is_422(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).signed()
    async with world.lean_client() as client:
        assert_problem(await caller.send(client, json={"unexpected": 1}), 422)


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_text_plain_body_is_400_unsupported_media_type(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).signed()
    async with world.lean_client() as client:
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            response = await caller.send(
                client, content=orjson.dumps(valid_body(route)), headers={"Content-Type": ctype}
            )
            assert_problem(response, 400, "unsupported_media_type")


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_credential_errors_come_before_parse_errors(world: World, route: RouteDef) -> None:
    """What a client sees: without the credential the route needs, 401 whatever the body; a public route
    reports the malformed body (400)."""
    async with world.lean_client() as client:
        response = await client.request(
            route.method, placeholder_path(route), content=b"{", headers={"Content-Type": "application/json"}
        )
    if route.auth is AuthKind.PUBLIC and not route.draft_token:
        assert_problem(response, 400, "malformed_json")
    else:
        assert_problem(response, 401)


# --- wrong types, huge values and odd characters reach the handler and still give a 4xx ---------


def wrong_values(kinds: set[str]) -> list[Any]:
    values: list[Any] = [
        {"nested": [1]},
        [1, {"a": None}],
        True,
        None,
        "",
        0,
        -1,
        2**64 - 1,
        1e300,
        -1e300,
        {"a": [[[[[[[[[[{"b": 1}]]]]]]]]]]},
    ]
    if "string" in kinds:
        values += [12345, ["x"], "\u202e\u0301 \U0001f600", " " * 50, "<script>alert(1)</script>", "'; --"]
    if kinds & {"integer", "number"}:
        values += ["x", "1", 1.5, 2**63, -(2**63), 10**15, "NaN"]
    if "array" in kinds:
        values += ["x", [None], [{"nested": [1]}], [[]], ["x"] * 5_000, [LONG[:1000]] * 100]
    if "object" in kinds:
        values += ["x", [1], {"": None}, {str(i): i for i in range(2_000)}]
    if "boolean" in kinds:
        values += ["true", 1, "yes"]
    return values


def deep(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_wrong_types_in_every_field_never_5xx(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).prepare()
    base = valid_body(route, caller.refs)
    async with world.lean_client() as client:
        for name, kinds in body_fields(route.body).items():  # type: ignore[arg-type]
            for value in [*wrong_values(kinds), deep(200)]:
                assert_not_5xx(await caller.send(client, json={**base, name: value}))


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_100kb_string_in_every_string_field_is_4xx(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).prepare()
    base = valid_body(route, caller.refs)
    fields = {n: k for n, k in body_fields(route.body).items() if k & {"string", "array"}}  # type: ignore[arg-type]
    if not fields:
        pytest.skip("no string fields")
    async with world.lean_client() as client:
        for name, kinds in fields.items():
            value = LONG if "string" in kinds else [LONG]
            response = await caller.send(client, json={**base, name: value})
            assert_not_5xx(response)
            assert 400 <= response.status_code < 500, f"{name}: {response.status_code} {response.text[:300]}"


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_nul_character_in_any_string_is_422(world: World, route: RouteDef) -> None:
    """PostgreSQL refuses NUL in text and jsonb: it is refused at the door, on both databases alike."""
    caller = await Caller(world, route).prepare()
    base = valid_body(route, caller.refs)
    async with world.lean_client() as client:
        for name in body_fields(route.body):  # type: ignore[arg-type]
            for value in ("a\x00b", ["a\x00"], {"k\x00": "v"}):
                body = assert_problem(await caller.send(client, json={**base, name: value}), 422)
                assert body["errors"], body


@pytest.mark.parametrize("route", BODY_ROUTES)
async def test_deeply_nested_body_is_422(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).prepare()
    async with world.lean_client() as client:
        for name in body_fields(route.body):  # type: ignore[arg-type]
            template = orjson.dumps({**valid_body(route, caller.refs), name: "HOLE"})
            # 1000 levels parse, and then break the JSON encoders that would store them (RecursionError).
            for depth in (70, 1_000):
                raw = template.replace(b'"HOLE"', b"[" * depth + b"]" * depth)
                assert_problem(await caller.send(client, content=raw), 422)
        # Deeper than the JSON parser goes: refused as malformed, not a crash.
        raw = template.replace(b'"HOLE"', b"[" * 5_000 + b"]" * 5_000)
        assert_problem(await caller.send(client, content=raw), 400, "malformed_json")


# --- the global body cap -------------------------------------------------------------------------


@pytest.mark.parametrize("route", UNSAFE)
async def test_body_over_the_global_cap_is_413(capped: World, route: RouteDef) -> None:
    payload = orjson.dumps({"padding": "x" * (SMALL_CAP * 2)})
    async with capped.lean_client() as client:
        declared = await client.request(
            route.method,
            placeholder_path(route),
            content=payload,
            headers={"Content-Type": "application/json"},
        )
        assert_problem(declared, 413, "payload_too_large")

        async def chunks() -> Any:  # no Content-Length: cut off as the stream passes the cap
            for start in range(0, len(payload), 512):
                yield payload[start : start + 512]

        streamed = await client.request(
            route.method,
            placeholder_path(route),
            content=chunks(),
            headers={"Content-Type": "application/json"},
        )
        assert "content-length" not in streamed.request.headers
        assert_problem(streamed, 413, "payload_too_large")
        bogus = await client.request(
            route.method,
            placeholder_path(route),
            content=b"{}",
            headers={"Content-Type": "application/json", "Content-Length": "abc"},
        )
        assert bogus.status_code in (400, 413), bogus.text


async def test_body_at_the_cap_is_not_refused(capped: World) -> None:
    route = next((r for r in API if r.auth is AuthKind.PUBLIC and r.body is not None), None)
    if route is None:
        pytest.skip("no public route with a body")
    body = orjson.dumps({**valid_body(route), "pad": "x"})
    body = body[:-1] + b" " * (SMALL_CAP - len(body)) + b"}"
    assert len(body) == SMALL_CAP
    async with capped.lean_client() as client:
        response = await client.request(
            route.method, placeholder_path(route), content=body, headers={"Content-Type": "application/json"}
        )
    assert response.status_code != 413, response.text


# --- query strings -------------------------------------------------------------------------------


@pytest.mark.parametrize("route", [pytest.param(r, id=route_id(r)) for r in API])
async def test_unknown_query_parameter_is_422(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).signed()
    async with world.lean_client() as client:
        response = await caller.send(
            client, json=None if route.body is None else valid_body(route), query={"unknownParamXyz": "1"}
        )
    body = assert_problem(response, 422)
    assert "unknownParamXyz" in [e.get("field") for e in body.get("errors", [])], response.text


@pytest.mark.parametrize("route", QUERY_ROUTES)
async def test_wrong_query_values_never_5xx(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).prepare()
    body = None if route.body is None else valid_body(route, caller.refs)
    schema, _ = model_schema(route.query)  # type: ignore[arg-type]
    values = [
        "",
        "x",
        "-1",
        "0",
        "1e309",
        "99999999999999999999999",
        "NaN",
        "true",
        LONG[:5000],
        "ü😀",
        "%",
        "a\x00b",
        "' OR 1=1 --",
    ]
    async with world.lean_client() as client:
        for name in schema.get("properties", {}):
            for value in values:
                response = await caller.send(client, json=body, query={**caller.query, name: value})
                assert_not_5xx(response)
            # the same parameter twice
            response = await caller.send(client, json=body, query={**caller.query, name: ["1", "2"]})
            assert_not_5xx(response)


@pytest.mark.parametrize("route", QUERY_ROUTES)
async def test_nul_in_query_is_422(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).prepare()
    schema, _ = model_schema(route.query)  # type: ignore[arg-type]
    name = next(iter(schema.get("properties", {})))
    async with world.lean_client() as client:
        response = await caller.send(
            client,
            json=None if route.body is None else valid_body(route, caller.refs),
            query={**caller.query, name: "a\x00b"},
        )
    assert_problem(response, 422)


# --- path parameters -----------------------------------------------------------------------------

GARBAGE_IDS = [
    "x" * 300,
    "ü-ñ-€-😀",
    "%00",
    "a%00b",
    "%ff%fe",
    "..",
    "%2e%2e",
    " ",
    "%20x%20",
    "null",
    "0",
    "-1",
    "'%3B DROP TABLE agents%3B --",
    "a" * 256,
    "%0d%0aSet-Cookie:%20x=y",
    "{id}",
    "%E2%80%AE",
]


@pytest.mark.parametrize("route", PATH_ROUTES)
async def test_garbage_path_parameters_never_5xx(world: World, route: RouteDef) -> None:
    caller = await Caller(world, route).prepare()
    body = None if route.body is None or route.page else valid_body(route, caller.refs)
    async with world.lean_client() as client:
        for garbage in GARBAGE_IDS:
            for name in route.path_params:
                path = route.path.replace("{" + name + "}", garbage)
                for other in route.path_params:
                    path = path.replace("{" + other + "}", "zz_placeholder")
                response = await caller.send(client, json=body, path=path)
                assert_not_5xx(response)


@pytest.mark.parametrize("route", PATH_ROUTES)
async def test_overlong_or_control_path_parameter_is_404(world: World, route: RouteDef) -> None:
    """Checked before anything else, the credential included: such a parameter names nothing."""
    async with world.lean_client() as client:
        for garbage in ("x" * 300, "%00", "a%0ab"):
            response = await client.request(route.method, placeholder_path(route, garbage))
            assert_problem(response, 404, "not_found")


# --- routing errors, request ids -----------------------------------------------------------------


async def test_unknown_route_is_404_problem(world: World) -> None:
    async with world.lean_client() as client:
        for path in ("/no/such/route", "/api/v2/nothing", "/api/v2/agents/me/extra/deep"):
            assert_problem(await client.get(path), 404, "not_found")


async def test_wrong_method_is_405_problem_whose_allow_names_every_method_of_the_path(world: World) -> None:
    patterns = [
        (r.method, r.path.count("{"), re.compile("^" + re.sub(r"{\w+}", "[^/]+", r.path) + "$"))
        for r in ROUTES
    ]
    checked = 0
    async with world.lean_client() as client:
        for route in ROUTES:
            path = placeholder_path(route)
            matching = [(m, params) for m, params, p in patterns if p.match(path)]
            served = {m for m, _ in matching}
            # Allow names the path's own methods: a literal path (/agents/dashboard/mine) is not the template
            # beside it (/agents/dashboard/{agentId}).
            fewest = min(params for _, params in matching)
            expected = {m for m, params in matching if params == fewest}
            expected |= {"HEAD"} if "GET" in expected else set()
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
                if method in served:
                    continue
                response = await client.request(method, path)
                assert_problem(response, 405, "method_not_allowed")
                assert set(response.headers["allow"].split(", ")) == expected, (method, path)
                checked += 1
    assert checked


async def test_request_id_is_echoed_or_replaced(world: World) -> None:
    async with world.lean_client() as client:
        mine = await client.get("/no/such/route", headers={"X-Request-Id": "client-abc.123:x"})
        assert assert_problem(mine, 404)["requestId"] == "client-abc.123:x"
        for bad in ("x" * 200, "has space", "semi;colon", "ü"):
            response = await client.get("/no/such/route", headers={"X-Request-Id": bad.encode()})
            rid = assert_problem(response, 404)["requestId"]
            assert rid.startswith("req_") and rid != bad
        ok = await client.get("/healthz")
        assert ok.headers["x-request-id"].startswith("req_")


async def test_error_responses_carry_the_request_id_header_on_every_status(world: World) -> None:
    """401 (with WWW-Authenticate), 404, 405, 413, 422: all problem+json with the same request id."""
    route = next(r for r in API if r.auth is AuthKind.KEY_READ and r.method == "GET")
    async with world.lean_client() as client:
        unauth = await client.get(route.path)
        assert_problem(unauth, 401)
        assert unauth.headers.get("www-authenticate")
        caller = await Caller(world, route).signed()
        assert_problem(await caller.send(client, query={"x": "1"}), 422)


async def test_base_url_origin_constant_is_trusted(world: World) -> None:
    assert BASE_URL in world.core.settings.origins
