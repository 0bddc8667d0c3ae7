"""Credential checks: one function per credential kind, and one dispatcher by the route's auth kind."""

from __future__ import annotations

from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request

from callboard_core.api_keys import service as api_keys
from callboard_core.api_keys.models import ApiKey
from callboard_core.auth import sessions
from callboard_core.container import Core
from callboard_core.errors import Forbidden, Unauthenticated
from callboard_core.onboarding import drafts
from callboard_core.onboarding import tokens as onboarding_tokens
from callboard_core.principals import (
    KeyPrincipal,
    MachinePrincipal,
    OnboardingPrincipal,
    Principal,
    UserPrincipal,
)
from callboard_core.security import tokens
from callboard_core.security.permissions import Permission
from http_api.route_table import SAFE_METHODS, AuthKind

API_KEY_HEADER = "x-api-key"
_API_KEY_HEADER = API_KEY_HEADER.encode()
ROTATED = "rotated"  # ApiKey.revoked_reason set by POST /api/v2/agents/me/rotate-key


def scope_header(request: Request, name: bytes) -> str | None:
    """One request header (name in lower case), read straight from the ASGI scope: the first one wins,
    as with Starlette's Headers.get, without building the Headers object."""
    for key, value in request.scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def request_origin(request: Request) -> str | None:
    """The browser origin of a request: its Origin header when present (which then decides: `null`, sent by
    sandboxed frames and some redirects, is never trusted), else the origin of its Referer."""
    origin = request.headers.get("origin")
    if origin is not None:
        return origin.strip().lower().rstrip("/")
    referer = request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        if parts.scheme and parts.netloc:
            return f"{parts.scheme}://{parts.netloc}".lower()
    return None


def check_origin(request: Request, core: Core, *, required: bool) -> None:
    """Cookie-authenticated mutations must come from a trusted origin (CSRF defence)."""
    origin = request_origin(request)
    if origin is None and not required:
        return
    if origin not in core.settings.origins:
        expected = sorted(core.settings.origins)
        raise Forbidden(
            f"This request did not come from a trusted origin: it came from {origin or 'no origin'}, and this "
            f"server takes {', '.join(expected)}. Open the site at that address, or set CALLBOARD_BASE_URL "
            "(or CALLBOARD_TRUSTED_ORIGINS) to the address you use.",
            code="untrusted_origin",
            origin=origin,
            expected=expected,
        )


async def api_key(request: Request, session: AsyncSession, core: Core, *, write: bool) -> KeyPrincipal:
    raw = scope_header(request, _API_KEY_HEADER)
    if not raw:
        raise Unauthenticated("Send your API key in the X-API-Key header.", code="missing_api_key")
    principal, due = await api_keys.authenticate(session, raw.strip(), core.read_cache)
    api_keys.require_scope(principal, write=write)
    if due:
        # Read by the endpoint once the request succeeded (lastUsedAt refresh).
        request.scope.setdefault("state", {})["touch_key"] = principal.key_id
    return principal


async def rotated_key_id(request: Request, session: AsyncSession) -> str | None:
    """The id of the X-API-Key if it is a real key that was revoked by its own rotation, else None."""
    raw = (request.headers.get(API_KEY_HEADER) or "").strip()
    if not raw or not tokens.api_key_well_formed(raw):
        return None
    row = (
        await session.execute(
            select(ApiKey.id, ApiKey.revoked_at, ApiKey.revoked_reason).where(
                ApiKey.key_hash == tokens.hash_token(raw)
            )
        )
    ).one_or_none()
    if row is None or row.revoked_at is None or row.revoked_reason != ROTATED:
        return None
    return str(row.id)


def require_verified(user: UserPrincipal) -> None:
    """An account whose email address was never verified may sign in and see itself, nothing more: whoever
    typed the address first could have set its password (see docs/decisions.md, "Unverified accounts")."""
    if not user.email_verified:
        raise Forbidden(
            "Confirm your email address first: ask for a sign-in link (POST /auth/magic-link with your email, "
            "or the sign-in page) and open it from your inbox; then try again.",
            code="email_unverified",
        )


async def user_session(
    request: Request, session: AsyncSession, core: Core, *, unverified_ok: bool = False
) -> UserPrincipal:
    token = request.cookies.get(sessions.COOKIE_NAME)
    if not token:
        raise Unauthenticated("Sign in first.", code="session_required")
    principal = await sessions.authenticate(session, token, core.read_cache)
    if request.method not in SAFE_METHODS:
        check_origin(request, core, required=True)
    if not unverified_ok:
        require_verified(principal)
    return principal


async def onboarding_token(request: Request, session: AsyncSession) -> OnboardingPrincipal:
    token = bearer_token(request)
    if not token:
        raise Unauthenticated(
            "Send the onboarding token as 'Authorization: Bearer <token>'.", code="missing_onboarding_token"
        )
    return await onboarding_tokens.authenticate(session, request.path_params.get("slug", ""), token)


def machine_token(request: Request, core: Core) -> MachinePrincipal:
    token = bearer_token(request)
    expected = core.settings.machine_token
    if not token:
        raise Unauthenticated(
            "Send the machine token as 'Authorization: Bearer <token>'.", code="missing_machine_token"
        )
    if not expected or not tokens.constant_time_equals(token, expected):
        raise Unauthenticated("The machine token is not valid.", code="invalid_machine_token")
    return MachinePrincipal()


async def authenticate(
    kind: AuthKind, request: Request, session: AsyncSession, core: Core, *, unverified_ok: bool = False
) -> Principal | None:
    """The route's credential as a principal. A session of an unverified account passes only on the routes
    declared `unverified_ok` (signing out, the account's own profile and password)."""
    principal = await _authenticate(kind, request, session, core, unverified_ok)
    if principal is not None:
        request.scope.setdefault("state", {})["principal"] = principal  # the request log's "who" (ids only)
    return principal


async def _authenticate(
    kind: AuthKind, request: Request, session: AsyncSession, core: Core, unverified_ok: bool
) -> Principal | None:
    if kind is AuthKind.PUBLIC:
        return None
    if kind in (AuthKind.KEY_READ, AuthKind.KEY_WRITE):
        return await api_key(request, session, core, write=kind is AuthKind.KEY_WRITE)
    if kind is AuthKind.ONBOARDING:
        return await onboarding_token(request, session)
    if kind is AuthKind.MACHINE:
        return machine_token(request, core)
    user = await user_session(request, session, core, unverified_ok=unverified_ok)
    if kind is AuthKind.STAFF:
        user.require(Permission.STAFF_CONSOLE)
    elif kind is AuthKind.ADMIN:
        user.require(Permission.ADMIN_CONSOLE)
    return user


def require_draft_token(request: Request) -> None:
    """A registration draft's route without any bearer token is refused at the door (401), before the
    idempotency record or the body; the handler checks the token itself against its draft."""
    if bearer_token(request) is None:
        raise drafts.missing_token()


async def optional_user(request: Request, session: AsyncSession) -> UserPrincipal | None:
    """For public pages that change with a signed-in visitor (the claim page). A page that acts for the
    visitor checks `check_origin` and `require_verified` itself."""
    token = request.cookies.get(sessions.COOKIE_NAME)
    if not token:
        return None
    try:
        return await sessions.authenticate(session, token)
    except Unauthenticated:
        return None
