"""Turns a RouteDef into an ASGI endpoint: rate limit, parse, authenticate, idempotency, one unit of
work, call the handler, render. Handlers never see raw requests or commit anything themselves."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from callboard_core import pipeline
from callboard_core.container import Core
from callboard_core.db.readcache import ReadCache
from callboard_core.errors import BadRequest, CallboardError, NotFound, ValidationFailed, from_pydantic
from callboard_core.guidance import rendering
from callboard_core.idempotency import service as idempotency
from callboard_core.idempotency.service import StoredResponse
from callboard_core.principals import KeyPrincipal, Principal, UserPrincipal
from http_api import auth
from http_api.guidance import HTTP
from http_api.route_table import SAFE_METHODS, AuthKind, RequestContext, RouteDef

_REPLAY_HEADERS = ("content-type", "location")
# No id, code or slug is longer than this; longer path parameters are refused before any lookup.
MAX_PATH_PARAM = 256
# JSON nested deeper than this is refused: no body needs it, and the JSON encoders that store it recurse.
MAX_JSON_DEPTH = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _dumps(data: Any) -> bytes:
    try:
        return orjson.dumps(data, default=_json_default)
    except orjson.JSONEncodeError:
        # Free-form JSON can hold integers past 64 bits (PostgreSQL's jsonb turns 1e300 into one).
        return json.dumps(data, default=_json_default, separators=(",", ":")).encode()


class JSONBytesResponse(Response):
    """A Response around an already serialised JSON body: the headers Starlette's Response would set
    (content-length, content-type), without its general-purpose constructor."""

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int = 200) -> None:
        self.status_code = status_code
        self.background = None
        self.body = body
        if status_code < 200 or status_code in (204, 304):
            self.raw_headers = [(b"content-type", b"application/json")]
        else:
            self.raw_headers = [
                (b"content-length", str(len(body)).encode()),
                (b"content-type", b"application/json"),
            ]


def _model_json(model: BaseModel) -> bytes:
    try:
        # pydantic's own JSON serializer: one pass, no intermediate dict.
        return type(model).__pydantic_serializer__.to_json(model, by_alias=True)
    except PydanticSerializationError:
        return _dumps(model.model_dump(mode="json", by_alias=True))


def render(result: Any, status: int, cache: ReadCache | None = None) -> Response:
    """The handler's result as a Response. A model served from the read cache is serialised once per
    cache entry, not once per request."""
    if isinstance(result, Response):
        return result
    if isinstance(result, BaseModel):
        payload = _http_json(result) if cache is None else cache.derived(result, "json", _http_json)
    else:
        with rendering(HTTP):
            payload = _dumps(result)
    return JSONBytesResponse(payload, status)


def _http_json(model: BaseModel) -> bytes:
    # Guidance (next steps, obligations) names routes. Only when serialising: a cached rendering skips it.
    with rendering(HTTP):
        return _model_json(model)


def parse_query(route: RouteDef, request: Request) -> Any:
    if not request.scope["query_string"]:
        # Nothing to parse: only the model's own defaults (and its required fields) apply.
        return None if route.query is None else _validate_query(route.query, {})
    params = request.query_params
    if route.query is None:
        if params and not route.page:
            unknown = sorted(params.keys())
            raise ValidationFailed(
                "This route takes no query parameters.",
                errors=[
                    {"field": k, "in": "query", "code": "unknown", "message": "unknown parameter"}
                    for k in unknown
                ],
            )
        return None
    data: dict[str, Any] = {}
    for name in params:
        values = params.getlist(name)
        if "\x00" in name or any("\x00" in v for v in values):
            raise ValidationFailed(
                "Query parameters cannot contain NUL characters.",
                errors=[
                    {
                        "field": name.replace("\x00", ""),
                        "in": "query",
                        "code": "nul_character",
                        "message": "NUL characters are not allowed",
                    }
                ],
            )
        data[name] = values if len(values) > 1 else values[0]
    return _validate_query(route.query, data)


def _validate_query(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_pydantic(exc, location="query") from None


async def read_body(request: Request) -> bytes:
    try:
        return await request.body()
    except ClientDisconnect:
        raise BadRequest(
            "The client went away before sending the whole body.", code="client_disconnected"
        ) from None


def parse_body(route: RouteDef, request: Request, raw: bytes) -> Any:
    if route.page or route.raw_body:
        return None
    stripped = raw.strip()
    empty = not stripped or stripped in (b"{}", b"null")
    if route.body is None:
        if not empty:
            raise ValidationFailed(
                "This route takes no request body.",
                errors=[
                    {"field": "body", "in": "body", "code": "unexpected_body", "message": "no body expected"}
                ],
            )
        return None
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if stripped and ctype and not (ctype == "application/json" or ctype.endswith("+json")):
        raise BadRequest("Send the body as application/json.", code="unsupported_media_type")
    if not stripped:
        if route.body_optional:
            return route.body()
        raise ValidationFailed(
            "A JSON request body is required.",
            errors=[{"field": "body", "in": "body", "code": "missing", "message": "body required"}],
        )
    try:
        data = orjson.loads(stripped)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"The body is not valid JSON: {exc}.", code="malformed_json") from None
    check_json(data)
    if _has_integral_float(data):
        stripped = orjson.dumps(_integral_floats_as_ints(data))
    try:
        # Strict JSON validation: the types the document states, no coercion ("5" or true for an integer,
        # 1 for a string), so a body the schema refuses is refused here too; dates still come as strings.
        return route.body.model_validate_json(stripped, strict=True)
    except ValidationError as exc:
        raise from_pydantic(exc) from None


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    return False


def _integral_floats_as_ints(value: Any) -> Any:
    """JSON Schema counts 5.0 as an integer: so do we (strict validation would refuse it); a float field
    takes the int as it took the float."""
    if isinstance(value, float) and value.is_integer() and INT64_MIN <= value <= INT64_MAX:
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    return value


def check_json(data: Any) -> None:
    """Refuse what no database stores: NUL characters in strings or keys (PostgreSQL text and jsonb reject
    them) and nesting deeper than MAX_JSON_DEPTH. Iterative, so a deep document cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValidationFailed(
                f"The body is nested deeper than {MAX_JSON_DEPTH} levels.",
                errors=[
                    {
                        "field": path or "body",
                        "in": "body",
                        "code": "too_deep",
                        "message": f"at most {MAX_JSON_DEPTH} levels of nesting",
                    }
                ],
            )
        if isinstance(value, str):
            if "\x00" in value:
                raise ValidationFailed(
                    "Strings in the body cannot contain NUL characters.",
                    errors=[
                        {
                            "field": path or "body",
                            "in": "body",
                            "code": "nul_character",
                            "message": "NUL characters are not allowed",
                        }
                    ],
                )
        elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
            # Past 64 bits a number no longer survives a database round trip and JSON rendering intact.
            raise ValidationFailed(
                "Integers in the body must fit in 64 bits.",
                errors=[
                    {
                        "field": path or "body",
                        "in": "body",
                        "code": "number_out_of_range",
                        "message": "integer outside the 64-bit range",
                    }
                ],
            )
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                if "\x00" in key:
                    raise ValidationFailed(
                        "Property names cannot contain NUL characters.",
                        errors=[
                            {
                                "field": child.replace("\x00", ""),
                                "in": "body",
                                "code": "nul_character",
                                "message": "NUL characters are not allowed",
                            }
                        ],
                    )
                stack.append((item, child, depth + 1))
        elif isinstance(value, list):
            stack.extend(
                (item, f"{path}.{index}" if path else str(index), depth + 1)
                for index, item in enumerate(value)
            )


def _check_params(params: dict[str, Any]) -> None:
    for name, value in params.items():
        if isinstance(value, str) and (len(value) > MAX_PATH_PARAM or _CONTROL.search(value)):
            raise NotFound("No such resource.", code="not_found", param=name)


def idempotency_scope(principal: Principal | None, ip: str) -> str:
    if isinstance(principal, KeyPrincipal):
        return f"key:{principal.key_id}"
    if isinstance(principal, UserPrincipal):
        return f"user:{principal.user_id}"
    return f"ip:{ip}"


def _parsed(parse: Callable[[], Any]) -> tuple[Any, CallboardError | None]:
    """A parse's result, or its refusal held for after authentication."""
    try:
        return parse(), None
    except CallboardError as exc:
        return None, exc


class Endpoint:
    """One route as a plain ASGI app. Errors are raised, not rendered here: they reach the app's
    ExceptionMiddleware, which renders them with the one handler map of http_api/errors.py."""

    def __init__(self, route: RouteDef, core: Core) -> None:
        self.route = route
        self.core = core
        self.write = route.method not in SAFE_METHODS
        self.idempotent = self.write and route.idempotent and not route.page
        self.__name__ = route.operation_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route, core = self.route, self.core
        state = scope["state"]
        rid = state["request_id"]
        client = scope.get("client")
        ip = client[0] if client else "unknown"
        if route.rate_limit:
            await core.rate_limiter.hit(route.rate_limit, "ip", ip)
        params = scope.get("path_params")
        if params:
            # A path parameter no object can have (overlong, control characters) is no such resource, and
            # never reaches a credential lookup (an onboarding token is looked up by its slug).
            _check_params(params)
        request = Request(scope, receive)
        # The query and body are checked before the caller is known, but refused only after: a caller
        # without the credential or the role hears 401 / 403, not what its request got wrong.
        query, refusal = _parsed(lambda: parse_query(route, request))
        # Hot reads (credentials, the caller's own record) probe the database's change counter once
        # for the whole request instead of once per lookup (see callboard_core/db/readcache.py).
        pin = core.read_cache.pin()
        try:
            if self.write:
                response = await self._write(request, query, refusal, rid, ip)
            else:
                body = None
                if route.body is not None and refusal is None:
                    body, refusal = _parsed(lambda: parse_body(route, request, b""))
                async with core.uow(write=False) as uow:
                    principal = await self._caller(request, uow.session, refusal)
                    ctx = _context(route, request, core, uow.session, principal, body, query, rid, ip)
                    result = await route.handler(ctx)
                    response = _finish(ctx, render(result, ctx.status or route.status, core.read_cache))
                _after(state, core)
        finally:
            if pin is not None:
                pin.release()
        await response(scope, receive, send)

    async def _caller(
        self, request: Request, session: AsyncSession, refusal: CallboardError | None
    ) -> Principal | None:
        """The caller (401 / 403 first), then the refusal the query or body parse held back."""
        route = self.route
        principal = await auth.authenticate(
            route.auth, request, session, self.core, unverified_ok=route.unverified_ok
        )
        if route.draft_token:
            auth.require_draft_token(request)
        if refusal is not None:
            raise refusal
        return principal

    async def _write(
        self, request: Request, query: Any, refusal: CallboardError | None, rid: str, ip: str
    ) -> Response:
        route, core = self.route, self.core
        raw = await read_body(request)
        body = None
        if refusal is None:
            body, refusal = _parsed(lambda: parse_body(route, request, raw))
        idem_key = request.headers.get("idempotency-key") if self.idempotent else None

        async def authenticate(session: AsyncSession) -> Principal | None:
            return await self._caller(request, session, refusal)

        async def admit(principal: Principal | None) -> None:
            if route.rate_limit and isinstance(principal, KeyPrincipal):
                await core.rate_limiter.hit(route.rate_limit, "key", principal.key_id)

        async def prepare(session: AsyncSession, principal: Principal | None) -> Any:
            assert route.prepare is not None
            return await route.prepare(
                _context(route, request, core, session, principal, body, query, rid, ip)
            )

        async def act(session: AsyncSession, principal: Principal | None, prepared: Any) -> Response:
            ctx = _context(route, request, core, session, principal, body, query, rid, ip)
            ctx.prepared = prepared
            result = await route.handler(ctx)
            return _finish(ctx, render(result, ctx.status or route.status, core.read_cache))

        async def rotated_scope(session: AsyncSession) -> str | None:
            """rotate-key revokes the very key that calls it, so the retry of a rotation whose answer was
            lost arrives with a revoked key. A key revoked by its own rotation still gets the stored answers
            of its own idempotent requests (same Idempotency-Key, same request): nothing runs, so the retry
            returns the same new key instead of a 401. Any other revocation is final."""
            key_id = await auth.rotated_key_id(request, session)
            return None if key_id is None else f"key:{key_id}"

        once = None
        if idem_key is not None:
            once = pipeline.Idempotency(
                idem_key, route.method, request.url.path, _fingerprint(route, request, raw)
            )
        outcome = await pipeline.run_write(
            core,
            authenticate,
            act,
            stored=_stored,
            idempotency_request=once,
            scope=lambda principal: idempotency_scope(principal, ip),
            prepare=prepare if route.prepare is not None else None,
            prepare_on_demand=route.prepare_on_demand,
            admit=admit if route.rate_limit else None,
            revoked_scope=rotated_scope if route.auth in (AuthKind.KEY_READ, AuthKind.KEY_WRITE) else None,
        )
        if isinstance(outcome, StoredResponse):
            return _replayed(outcome)
        _after(request.scope["state"], core)
        return outcome


def build_endpoint(route: RouteDef, core: Core) -> Endpoint:
    return Endpoint(route, core)


def _fingerprint(route: RouteDef, request: Request, raw: bytes) -> str:
    return idempotency.request_fingerprint(route.method, request.url.path + "?" + request.url.query, raw)


def _stored(response: Response) -> StoredResponse:
    """What a replay answers with: the rendered response's status, body and the headers that describe it."""
    return StoredResponse(
        status=response.status_code,
        body=bytes(response.body),
        headers={k: v for k, v in response.headers.items() if k in _REPLAY_HEADERS},
    )


def _replayed(stored: StoredResponse) -> Response:
    headers = dict(stored.headers)
    headers["Idempotent-Replayed"] = "true"
    return Response(stored.body, status_code=stored.status, headers=headers)


def _context(
    route: RouteDef,
    request: Request,
    core: Core,
    session: Any,
    principal: Principal | None,
    body: Any,
    query: Any,
    rid: str,
    ip: str,
) -> RequestContext:
    params = request.scope.get("path_params")
    # Positional, in RequestContext's field order.
    return RequestContext(
        request, core, session, principal, body, query, dict(params) if params else {}, rid, ip, route.auth
    )


def _finish(ctx: RequestContext, response: Response) -> Response:
    if ctx.headers:
        for name, value in ctx.headers.items():
            response.headers[name] = value
    if ctx.cookies:
        secure = ctx.core.settings.is_production
        for cookie in ctx.cookies:
            if cookie.delete:
                response.delete_cookie(cookie.key, path="/", secure=secure, httponly=True, samesite="lax")
            else:
                response.set_cookie(
                    cookie.key,
                    cookie.value,
                    max_age=cookie.max_age,
                    path="/",
                    secure=secure,
                    httponly=True,
                    samesite="lax",
                )
    return response


def _after(state: dict[str, Any], core: Core) -> None:
    key_id = state.get("touch_key")
    if key_id:
        pipeline.touch_key(core, key_id)
