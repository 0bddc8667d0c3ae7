"""The route table: every route is declared once with its auth kind, body, query and response models.

The same declarations build the Starlette routes and the OpenAPI document, so the two cannot drift.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request

from callboard_core.container import Core
from callboard_core.errors import Unauthenticated
from callboard_core.principals import (
    Actor,
    KeyPrincipal,
    MachinePrincipal,
    OnboardingPrincipal,
    Principal,
    UserPrincipal,
)
from callboard_core.ratelimit import PUBLIC_READ


class AuthKind(StrEnum):
    PUBLIC = "P"
    SESSION = "S"
    KEY_READ = "Kr"
    KEY_WRITE = "Kw"
    ONBOARDING = "O"
    ADMIN = "A"
    STAFF = "St"
    MACHINE = "M"


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class Cookie:
    key: str
    value: str = ""
    max_age: int | None = None
    delete: bool = False


@dataclass
class RequestContext:
    """What a handler gets: the parsed request, the caller and the unit of work's session."""

    request: Request
    core: Core
    session: AsyncSession
    principal: Principal | None
    body: Any
    query: Any
    params: dict[str, str]
    request_id: str
    client_ip: str
    auth: AuthKind  # the route's auth kind: a staff route's session acts as staff
    cookies: list[Cookie] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    status: int | None = None
    prepared: Any = None  # what the route's `prepare` step returned (write routes that declare one)

    @property
    def user(self) -> UserPrincipal:
        if not isinstance(self.principal, UserPrincipal):
            raise Unauthenticated("Sign in first.", code="session_required")
        return self.principal

    @property
    def key(self) -> KeyPrincipal:
        if not isinstance(self.principal, KeyPrincipal):
            raise Unauthenticated("An API key is required.", code="api_key_required")
        return self.principal

    @property
    def actor(self) -> Actor:
        """Who acts, the one place HTTP builds it: the calling agent (API key; an owner-level key is refused
        with 403 agent_key_required), the signed-in owner with their role (session), or on a staff route
        (auth kinds A and St) the staff member, who may see every owner's objects."""
        if isinstance(self.principal, KeyPrincipal):
            actor = Actor.of_key(self.principal, request_id=self.request_id)
            actor.require_agent()
            return actor
        staff = self.auth in (AuthKind.ADMIN, AuthKind.STAFF)
        return Actor.of_user(self.user, staff=staff, request_id=self.request_id)

    @property
    def key_actor(self) -> Actor:
        """The calling API key as the actor, an owner-level key (no agent) included: only for the routes that
        manage keys (/api-keys, rotate-key) and the owner's balance and documents by key (/me/billing/api-key,
        /me/billing/documents/api-key), where an owner's key acts for its owner."""
        return Actor.of_key(self.key)

    @property
    def onboarding(self) -> OnboardingPrincipal:
        assert isinstance(self.principal, OnboardingPrincipal)
        return self.principal

    @property
    def machine(self) -> MachinePrincipal:
        assert isinstance(self.principal, MachinePrincipal)
        return self.principal

    @property
    def user_agent(self) -> str | None:
        ua = self.request.headers.get("user-agent")
        return ua[:512] if ua else None


Handler = Callable[[RequestContext], Awaitable[Any]]


@dataclass
class RouteDef:
    method: str
    path: str
    auth: AuthKind
    handler: Handler
    tag: str
    body: type[BaseModel] | None = None
    body_optional: bool = False
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    summary: str = ""
    description: str = ""
    rate_limit: str | None = None
    deprecated: bool = False
    idempotent: bool = True
    page: bool = False  # server-rendered HTML; not in the OpenAPI document
    operation_id: str = ""
    # A write's slow part that needs no lock (re-hashing stored files), run in a read unit of work just
    # before the write one; its result reaches the handler as ctx.prepared.
    prepare: Handler | None = None
    # Run `prepare` only when the handler's first attempt, given ctx.prepared None, raises PrepareFirst.
    prepare_on_demand: bool = False
    # The handler reads the body's exact bytes itself (`await ctx.request.body()`): a signed webhook.
    raw_body: bool = False
    # Statuses beyond the ones the auth kind, path and method imply (http_api/openapi.py): a token in the
    # body or a header the route checks itself (401), a lookup by a body or query field (404), a state
    # rule on a read (409). The OpenAPI document lists them, so a generated client expects them.
    errors: tuple[int, ...] = ()
    # A session route an account with an unverified email may call (its own account: me, profile,
    # password, logout). Every other session route answers 403 email_unverified to such an account.
    unverified_ok: bool = False
    # A public route that answers only with the bearer token it names (a registration draft's): the
    # document declares that token, so a client sends it.
    draft_token: bool = False

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)


class RouteGroup:
    """Collects routes for one area of the API. `paths` may hold aliases (the bounty naming)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.declared: list[RouteDef] = []

    def route(
        self,
        method: str,
        *paths: str,
        auth: AuthKind,
        body: type[BaseModel] | None = None,
        body_optional: bool = False,
        query: type[BaseModel] | None = None,
        response: type[BaseModel] | None = None,
        status: int = 200,
        summary: str = "",
        rate_limit: str | None = None,
        deprecated_paths: tuple[str, ...] = (),
        idempotent: bool = True,
        page: bool = False,
        name: str | None = None,
        prepare: Handler | None = None,
        prepare_on_demand: bool = False,
        raw_body: bool = False,
        errors: tuple[int, ...] = (),
        unverified_ok: bool = False,
        draft_token: bool = False,
    ) -> Callable[[Handler], Handler]:
        """`name` overrides the operation id's base: one handler declared twice (an API-key route and its
        owner mirror) needs two names. A public GET without a budget of its own spends the public-read one
        (nothing anyone may call without a credential is unmetered)."""
        if rate_limit is None and auth is AuthKind.PUBLIC and method.upper() == "GET":
            rate_limit = PUBLIC_READ

        def register(handler: Handler) -> Handler:
            doc = (handler.__doc__ or "").strip()
            first, _, rest = doc.partition("\n")
            for index, path in enumerate(paths):
                suffix = "" if index == 0 else f"_{index}"
                self.declared.append(
                    RouteDef(
                        method=method.upper(),
                        path=path,
                        auth=auth,
                        handler=handler,
                        tag=self.tag,
                        body=body,
                        body_optional=body_optional,
                        query=query,
                        response=response,
                        status=status,
                        summary=summary or first,
                        description=rest.strip(),
                        rate_limit=rate_limit,
                        deprecated=path in deprecated_paths,
                        idempotent=idempotent,
                        page=page,
                        operation_id=(name or handler.__name__) + suffix,
                        prepare=prepare,
                        prepare_on_demand=prepare_on_demand,
                        raw_body=raw_body,
                        errors=errors,
                        unverified_ok=unverified_ok,
                        draft_token=draft_token,
                    )
                )
            return handler

        return register

    def get(self, *paths: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("GET", *paths, **kw)

    def post(self, *paths: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("POST", *paths, **kw)

    def patch(self, *paths: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("PATCH", *paths, **kw)

    def put(self, *paths: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("PUT", *paths, **kw)

    def delete(self, *paths: str, **kw: Any) -> Callable[[Handler], Handler]:
        return self.route("DELETE", *paths, **kw)
