"""The authorization matrix, generic over the route table: every route is checked against every credential
it must refuse (and the weakest one it must accept), by its auth kind from the spec's routes.tsv.

Each (route, cell) is its own test id. One app per database serves the whole module; the people and keys
that only ever get refused are made once, anything a request may change is made fresh for that test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from callboard_core.auth import sessions
from callboard_core.security.permissions import Permission, Role
from http_api.route_table import SAFE_METHODS, AuthKind, RouteDef
from http_api.routes import all_routes
from tests.conftest import BASE_URL, _backends
from tests.factories import (
    CREDENTIAL_CODES,
    MACHINE_TOKEN,
    NOT_OWNED,
    UNTRUSTED_ORIGIN,
    Actor,
    Provisional,
    Unsampleable,
    World,
    assert_not_5xx,
    assert_problem,
    database_url_for,
    factory_for,
    fill_path,
    fill_query,
    model_schema,
    open_world,
    placeholder_path,
    route_id,
    sample,
    sample_body,
)

ROUTES = all_routes()
SESSION_KINDS = (AuthKind.SESSION, AuthKind.STAFF, AuthKind.ADMIN)
KEY_KINDS = (AuthKind.KEY_READ, AuthKind.KEY_WRITE)
ROUTE_GATES = {Permission.STAFF_CONSOLE.value, Permission.ADMIN_CONSOLE.value}


def params(predicate: Any) -> list[Any]:
    return [pytest.param(r, id=route_id(r)) for r in ROUTES if predicate(r)]


def unsafe(route: RouteDef) -> bool:
    return route.method not in SAFE_METHODS


@pytest.fixture(scope="module", params=_backends())
def module_database(request: pytest.FixtureRequest) -> str:
    return database_url_for(request)


@pytest.fixture(scope="module")
async def world(module_database: str, tmp_root: Any) -> Any:
    async with open_world(module_database, tmp_root) as w:
        yield w


@dataclass
class Cast:
    """People and keys that are only ever refused, so one of each serves the module."""

    a: Actor  # owner A with a claimed agent
    user: Actor
    support: Actor
    provisional: Provisional
    revoked_key: str
    signed_out: Actor  # a SUPERADMIN whose sessions were all revoked
    unverified: Actor  # an ADMIN whose email address nobody verified (a password set by whoever came first)


@pytest.fixture(scope="module")
async def cast(world: World) -> Cast:
    signed_out = await world.actor(Role.SUPERADMIN)
    async with world.core.uow() as uow:
        await sessions.revoke_all(uow.session, signed_out.user_id)
    return Cast(
        a=await world.actor(agent=True),
        user=await world.actor(),
        support=await world.actor(Role.SUPPORT),
        provisional=await world.provisional(),
        revoked_key=await world.revoked_key(),
        signed_out=signed_out,
        unverified=await world.actor(Role.ADMIN, verified=False),
    )


async def call(
    w: World,
    route: RouteDef,
    headers: dict[str, str],
    *,
    path: str | None = None,
    query: dict[str, Any] | None = None,
    refs: dict[str, str] | None = None,
) -> httpx.Response:
    """The route with a valid body and query, so only the credential decides (parsing comes first). Body
    fields naming objects take the ids in refs (from `fill_path`)."""
    try:
        body = sample_body(route, refs)
    except Unsampleable as exc:
        pytest.skip(f"no valid body for {route_id(route)} (add one to factories.BODY_OVERRIDES): {exc}")
    if query is None:
        query = {}
        if route.query is not None:
            schema, defs = model_schema(route.query)
            query = {n: sample(schema["properties"][n], defs, n) for n in schema.get("required", [])}
    async with w.lean_client() as client:
        return await client.request(
            route.method, path or placeholder_path(route), json=body, params=query, headers=headers
        )


# --- no credential, the wrong kind of credential, a revoked one ----------------------------------


@pytest.mark.parametrize("route", params(lambda r: r.auth is not AuthKind.PUBLIC))
async def test_no_credential_is_401(world: World, route: RouteDef) -> None:
    headers = {"Origin": BASE_URL} if route.auth in SESSION_KINDS else {}
    assert_problem(await call(world, route, headers), 401)


def _wrong_credentials(route: RouteDef) -> list[str]:
    wrong = {
        AuthKind.SESSION: ["api_key", "machine_bearer"],
        AuthKind.STAFF: ["api_key", "machine_bearer"],
        AuthKind.ADMIN: ["api_key", "machine_bearer"],
        AuthKind.KEY_READ: ["session", "machine_bearer"],
        AuthKind.KEY_WRITE: ["session", "machine_bearer"],
        AuthKind.ONBOARDING: ["session", "api_key", "machine_bearer"],
        AuthKind.MACHINE: ["session", "api_key", "garbage_bearer"],
    }
    return wrong.get(route.auth, [])


WRONG_KIND = [
    pytest.param(r, kind, id=f"{route_id(r)} with {kind}") for r in ROUTES for kind in _wrong_credentials(r)
]


@pytest.mark.parametrize(("route", "kind"), WRONG_KIND)
async def test_wrong_credential_kind_is_401(world: World, cast: Cast, route: RouteDef, kind: str) -> None:
    headers = {
        "api_key": {**cast.a.key(), "Origin": BASE_URL},
        "session": cast.a.session(),
        "machine_bearer": {"Authorization": f"Bearer {MACHINE_TOKEN}", "Origin": BASE_URL},
        "garbage_bearer": {"Authorization": "Bearer not-the-machine-token"},
    }[kind]
    assert_problem(await call(world, route, headers), 401)


@pytest.mark.parametrize("route", params(lambda r: r.auth in KEY_KINDS))
async def test_revoked_key_is_401(world: World, cast: Cast, route: RouteDef) -> None:
    assert_problem(await call(world, route, {"X-API-Key": cast.revoked_key}), 401, "invalid_api_key")


@pytest.mark.parametrize("route", params(lambda r: r.auth in KEY_KINDS))
async def test_malformed_key_is_401(world: World, cast: Cast, route: RouteDef) -> None:
    key = cast.a.api_key
    assert key
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    for bad in (tampered, key[:-1], key + "x", "cbk_" + "x" * 5000, "Bearer " + key, "null"):
        assert_problem(await call(world, route, {"X-API-Key": bad}), 401, "invalid_api_key")


@pytest.mark.parametrize("route", params(lambda r: r.auth in SESSION_KINDS))
async def test_revoked_or_forged_session_is_401(world: World, cast: Cast, route: RouteDef) -> None:
    for token in (cast.signed_out.session_token, "forged-" + "x" * 40, "y" * 500):
        headers = {"Cookie": f"svc_session={token}", "Origin": BASE_URL}
        assert_problem(await call(world, route, headers), 401, "invalid_session")


@pytest.mark.parametrize("route", params(lambda r: r.auth in (AuthKind.ONBOARDING, AuthKind.MACHINE)))
async def test_bad_bearer_is_401(world: World, route: RouteDef) -> None:
    for header in ("Bearer nope-" + "x" * 40, "Bearer ", "Basic dXNlcjpwYXNz", "Bearer " + "y" * 5000):
        assert_problem(await call(world, route, {"Authorization": header}), 401)


# --- scope and role ------------------------------------------------------------------------------


@pytest.mark.parametrize("route", params(lambda r: r.auth is AuthKind.KEY_WRITE))
async def test_read_only_key_on_write_route_is_403(world: World, cast: Cast, route: RouteDef) -> None:
    assert_problem(await call(world, route, cast.provisional.key()), 403, "insufficient_scope")


@pytest.mark.parametrize("route", params(lambda r: r.auth in (AuthKind.STAFF, AuthKind.ADMIN)))
async def test_user_session_on_staff_route_is_403(world: World, cast: Cast, route: RouteDef) -> None:
    assert_problem(await call(world, route, cast.user.session()), 403, "insufficient_role")


@pytest.mark.parametrize("route", params(lambda r: r.auth is AuthKind.ADMIN))
async def test_support_session_on_admin_route_is_403(world: World, cast: Cast, route: RouteDef) -> None:
    assert_problem(await call(world, route, cast.support.session()), 403, "insufficient_role")


# --- an account whose email is not verified ---------------------------------------------------------


@pytest.mark.parametrize("route", params(lambda r: r.auth in SESSION_KINDS and not r.unverified_ok))
async def test_unverified_account_is_403(world: World, cast: Cast, route: RouteDef) -> None:
    """Whoever typed an address first may have set its password: until the address is verified the account
    can create no credential, agent or token and touch no money or staff console (even with a staff role)."""
    assert_problem(await call(world, route, cast.unverified.session()), 403, "email_unverified")


@pytest.mark.parametrize("route", params(lambda r: r.unverified_ok))
async def test_unverified_account_reaches_its_own_account(world: World, route: RouteDef) -> None:
    """The few routes about the account itself (me, profile, password, sign out) stay open to it."""
    actor = await world.actor(verified=False)
    response = await call(world, route, actor.session())
    assert response.status_code == route.status, response.text


# --- the Origin check on cookie-authenticated mutations ------------------------------------------

ORIGINS = {
    "untrusted": {"Origin": UNTRUSTED_ORIGIN},
    "missing": {},
    "null": {"Origin": "null"},
    "untrusted_referer": {"Referer": UNTRUSTED_ORIGIN + "/page"},
    "lookalike": {"Origin": BASE_URL + ".evil.example.net"},
}
ORIGIN_CELLS = [
    pytest.param(r, name, id=f"{route_id(r)} origin {name}")
    for r in ROUTES
    if r.auth in SESSION_KINDS and unsafe(r) and not r.page
    for name in ORIGINS
]


@pytest.mark.parametrize(("route", "origin"), ORIGIN_CELLS)
async def test_untrusted_origin_on_cookie_mutation_is_403(world: World, route: RouteDef, origin: str) -> None:
    # A fresh session of a role the route admits: the origin is the only thing wrong.
    role = {AuthKind.SESSION: Role.USER, AuthKind.STAFF: Role.SUPPORT, AuthKind.ADMIN: Role.ADMIN}[route.auth]
    actor = await world.actor(role)
    headers = {**actor.session(origin=None), **ORIGINS[origin]}
    assert_problem(await call(world, route, headers), 403, "untrusted_origin")


# --- the weakest credential the route admits gets past authentication ----------------------------


@pytest.mark.parametrize("route", params(lambda r: r.auth is not AuthKind.PUBLIC))
async def test_weakest_admitted_credential_passes(world: World, route: RouteDef) -> None:
    """A read-only key on Kr, SUPPORT on St, ADMIN on A, any user on S: the request gets past the
    credential check (whatever the handler then decides). Everything is fresh: the request has effects."""
    owner = await world.actor(agent=True)
    pinned: dict[str, str] = {}
    if route.auth is AuthKind.KEY_READ:
        headers = (await world.provisional()).key()
    elif route.auth in (AuthKind.STAFF, AuthKind.ADMIN):
        role = Role.SUPPORT if route.auth is AuthKind.STAFF else Role.ADMIN
        headers = (await world.actor(role)).session()
    else:
        headers, pinned = await world.credentials(route, owner)
    refs: dict[str, str] = {}
    try:
        path = await fill_path(world, route, owner, pinned, refs)
    except LookupError:
        path = placeholder_path(route)
    query = await fill_query(world, route, owner)
    response = await call(world, route, headers, path=path, query=query, refs=refs)
    assert_not_5xx(response)
    if response.status_code in (401, 403):
        body = response.json()
        refused = body["code"] in CREDENTIAL_CODES and not (
            body["code"] == "insufficient_role" and body.get("required") not in ROUTE_GATES
        )
        assert not refused, f"{route_id(route)} refused an admitted credential: {response.text}"


@pytest.mark.parametrize("route", params(lambda r: r.auth in KEY_KINDS and unsafe(r)))
async def test_no_agent_key_gets_a_processor_hosted_page(world: World, route: RouteDef) -> None:
    """Whoever opens the processor's hosted pages (payout onboarding, checkout, card setup) decides where an
    owner's money comes from or goes: an agent's key gets this site's pages only (a setup link its owner
    completes), on every key route, with the key's own objects in the path."""
    owner = await world.actor(agent=True)
    headers, pinned = await world.credentials(route, owner)
    assert owner.agent_id
    pinned = {**pinned, "agentId": owner.agent_id}  # the key's own agent: routes that name it do their work
    refs: dict[str, str] = {}
    try:
        path = await fill_path(world, route, owner, pinned, refs)
    except LookupError:
        path = placeholder_path(route)
    response = await call(
        world, route, headers, path=path, query=await fill_query(world, route, owner), refs=refs
    )
    assert "/sandbox/processor/" not in response.text, f"{route_id(route)}: {response.text}"
    if "onboarding-link" in route.path:
        assert response.status_code == 200 and "/setup/" in response.json()["url"], response.text


# --- another owner's object is a 404 -------------------------------------------------------------


def _owned_params(route: RouteDef) -> bool:
    if route.auth not in (AuthKind.SESSION, *KEY_KINDS) or route.page:
        return False
    if route.path_params:
        return True
    if route.query is not None:
        return any(factory_for(n) for n in model_schema(route.query)[0].get("required", []))
    return False


@pytest.mark.parametrize("route", params(_owned_params))
async def test_other_owners_object_is_404(world: World, cast: Cast, route: RouteDef) -> None:
    if (route.method, route.path) in NOT_OWNED:
        pytest.skip(f"{route_id(route)}: {NOT_OWNED[(route.method, route.path)]}")
    b = await world.actor(agent=True)
    refs: dict[str, str] = {}  # the body names b's objects too (b's agent as the worker, ...)
    try:
        path = await fill_path(world, route, b, refs=refs)
    except LookupError as exc:
        pytest.skip(
            f"no factory for path parameter {exc.args[0]!r} ({route_id(route)}): add one to "
            "tests/factories.PATH_FACTORIES or PARAM_FACTORIES"
        )
    query = await fill_query(world, route, b)
    headers = cast.a.session() if route.auth is AuthKind.SESSION else cast.a.key()
    assert_problem(await call(world, route, headers, path=path, query=query, refs=refs), 404)


# --- the caller's own object, in the state the route needs, is served ------------------------------

JOB_TAGS = {"jobs", "home"}


@pytest.mark.parametrize(
    "route",
    params(lambda r: r.tag in JOB_TAGS and r.auth in (*KEY_KINDS, AuthKind.SESSION, AuthKind.ADMIN)),
)
async def test_own_object_is_served(world: World, route: RouteDef) -> None:
    """The other side of the 404 above: the job lifecycle's routes do their work for the caller on its own
    objects, which the factories make in the state each route needs (a DRAFT to publish, a GRANTED slot to
    acknowledge, a job IN_REVIEW with a submission to award). The caller's own key on Kr/Kw, its session on
    S, an ADMIN's session on A."""
    actor = await world.actor(agent=True)
    refs: dict[str, str] = {}
    path = await fill_path(world, route, actor, refs=refs)
    if route.auth is AuthKind.SESSION:
        headers = actor.session()
    elif route.auth is AuthKind.ADMIN:
        headers = (await world.actor(Role.ADMIN)).session()
    else:
        headers = actor.key()
    response = await call(
        world, route, headers, path=path, query=await fill_query(world, route, actor), refs=refs
    )
    assert response.status_code == route.status, (
        f"{route_id(route)} -> {response.status_code}: {response.text}"
    )


# --- the table itself ------------------------------------------------------------------------------


def test_route_table_is_what_the_app_serves(world: World) -> None:
    served = [(r.method, r.path, r.auth) for r in world.app.state.route_table]
    assert served == [(r.method, r.path, r.auth) for r in ROUTES]
    assert len(set(served)) == len(served), "a route is declared twice"


def test_route_auth_kinds_match_the_spec() -> None:
    """Every route that routes.tsv lists carries the auth kind the spec gives it."""
    from pathlib import Path

    spec = Path("/work/shared/spec/routes.tsv")
    if not spec.exists():
        pytest.skip("the spec's routes.tsv is not available")
    kinds = {}
    for line in spec.read_text().splitlines()[1:]:
        method, path, auth, *_ = line.split("\t")
        kinds[(method, path)] = auth
    wrong = [
        f"{r.method} {r.path}: {r.auth.value} (spec {kinds[(r.method, r.path)]})"
        for r in ROUTES
        if (r.method, r.path) in kinds and kinds[(r.method, r.path)] != r.auth.value
    ]
    assert not wrong, wrong
