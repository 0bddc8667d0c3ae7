"""Server-rendered pages for people: sign in, the magic-link landing, the claim page, a small home page.

Forms post back to these routes on the same origin. A GET never consumes anything (mail scanners
prefetch links); the POSTs call the same service functions as the JSON routes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode

from pydantic import ValidationError
from starlette.responses import HTMLResponse, RedirectResponse, Response

from callboard_core.agents import service as agents
from callboard_core.auth import schemas as auth_schemas
from callboard_core.auth import service as auth
from callboard_core.auth import sessions
from callboard_core.errors import CallboardError
from callboard_core.ratelimit import SIGNIN
from callboard_core.users import service as users
from http_api.app import page
from http_api.auth import check_origin, optional_user
from http_api.errors import status_for
from http_api.route_table import AuthKind, Cookie, RequestContext, RouteGroup
from http_api.routes.auth import previous_token, set_session_cookie

routes = RouteGroup("pages")

T = TypeVar("T")

PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    # same-origin keeps the Origin/Referer our own form posts need; the token in /auth/magic never leaks.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
MAX_FORM_BYTES = 16_384


def render(ctx: RequestContext, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    response = page(ctx.request, template, status, **context)
    response.headers.update(PAGE_HEADERS)
    return response


def redirect(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    response.headers.update(PAGE_HEADERS)
    return response


async def read_form(ctx: RequestContext) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (the HTML default) as a flat dict."""
    raw = await ctx.request.body()
    if len(raw) > MAX_FORM_BYTES:
        return {}
    parsed = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=32)
    return {key: values[0] for key, values in parsed.items()}


async def attempt(
    ctx: RequestContext, action: Callable[[], Awaitable[T]]
) -> tuple[T | None, CallboardError | None]:
    """Run a service call in a savepoint: a refused action leaves no partial writes and becomes a message."""
    try:
        async with ctx.session.begin_nested():
            return await action(), None
    except CallboardError as exc:
        return None, exc


def login_url(next_url: str) -> str:
    return "/login" + ("?" + urlencode({"next": next_url}) if next_url != "/" else "")


def _legal(form: dict[str, str]) -> dict[str, bool] | None:
    return {"acceptedTerms": True, "acceptedPrivacy": True} if form.get("accept_legal") else None


def _validation_message(exc: ValidationError) -> str:
    fields = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
    if "email" in fields:
        return "Enter a valid email address."
    return "Please fill in every field."


# --- home ----------------------------------------------------------------------------------------


@routes.get("/", auth=AuthKind.PUBLIC, page=True)
async def home_page(ctx: RequestContext) -> Response:
    """Home: who is signed in."""
    principal = await optional_user(ctx.request, ctx.session)
    user = await users.get(ctx.session, principal.user_id) if principal else None
    return render(ctx, "home.html", user=user)


@routes.post("/logout", auth=AuthKind.PUBLIC, page=True, idempotent=False)
async def logout_page(ctx: RequestContext) -> Response:
    """Sign out of every browser."""
    principal = await optional_user(ctx.request, ctx.session)
    if principal is not None:
        try:
            check_origin(ctx.request, ctx.core, required=True)
        except CallboardError as exc:
            return render(ctx, "message.html", status_for(exc), title="Not signed out", message=exc.message)
        await auth.logout(ctx.session, principal.user_id)
    ctx.cookies.append(Cookie(sessions.COOKIE_NAME, delete=True))
    return redirect("/login")


# --- sign in -------------------------------------------------------------------------------------


def _login_page(ctx: RequestContext, status: int = 200, **context: Any) -> HTMLResponse:
    settings = ctx.core.settings
    context.setdefault("next_url", "/")
    return render(
        ctx,
        "login.html",
        status,
        terms_version=settings.terms_version,
        privacy_version=settings.privacy_version,
        **context,
    )


@routes.get("/login", auth=AuthKind.PUBLIC, page=True)
async def login_page(ctx: RequestContext) -> Response:
    """Sign in by email link or password."""
    next_url = auth.safe_next_url(ctx.core.settings, ctx.request.query_params.get("next"))
    principal = await optional_user(ctx.request, ctx.session)
    return _login_page(ctx, next_url=next_url, signed_in_as=principal.email if principal else None)


@routes.post("/login", auth=AuthKind.PUBLIC, page=True, rate_limit=SIGNIN, idempotent=False)
async def login_submit(ctx: RequestContext) -> Response:
    """The sign-in forms: mail a link (action=magic) or sign in with a password (action=password)."""
    form = await read_form(ctx)
    settings = ctx.core.settings
    next_url = auth.safe_next_url(settings, form.get("next"))
    try:
        check_origin(ctx.request, ctx.core, required=False)
    except CallboardError as exc:
        return _login_page(ctx, status_for(exc), next_url=next_url, error=exc.message)

    if form.get("action") == "password":
        try:
            body = auth_schemas.PasswordLoginRequest.model_validate(
                {
                    "identifier": form.get("identifier", ""),
                    "password": form.get("password", ""),
                    "legalAcceptance": _legal(form),
                }
            )
        except ValidationError as exc:
            return _login_page(
                ctx,
                422,
                next_url=next_url,
                identifier=form.get("identifier", ""),
                error=_validation_message(exc),
            )
        signed_in, error = await attempt(
            ctx,
            lambda: auth.password_login(
                ctx.session,
                settings,
                body,
                previous_token=previous_token(ctx),
                ip=ctx.client_ip,
                user_agent=ctx.user_agent,
            ),
        )
        if signed_in is None:
            assert error is not None
            return _login_page(
                ctx, status_for(error), next_url=next_url, identifier=body.identifier, error=error.message
            )
        set_session_cookie(ctx, signed_in)
        return redirect(next_url)

    try:
        link_body = auth_schemas.MagicLinkRequest.model_validate(
            {"email": form.get("email", "").strip(), "nextUrl": next_url, "legalAcceptance": _legal(form)}
        )
    except ValidationError as exc:
        return _login_page(
            ctx, 422, next_url=next_url, email=form.get("email", ""), error=_validation_message(exc)
        )
    _, error = await attempt(
        ctx,
        lambda: auth.request_magic_link(
            ctx.session, settings, ctx.core.mailer, link_body, ip=ctx.client_ip, user_agent=ctx.user_agent
        ),
    )
    if error is not None:
        return _login_page(
            ctx, status_for(error), next_url=next_url, email=link_body.email, error=error.message
        )
    return _login_page(ctx, next_url=next_url, sent_to=link_body.email)


# --- magic-link landing --------------------------------------------------------------------------


@routes.get("/auth/magic", auth=AuthKind.PUBLIC, page=True)
async def magic_landing(ctx: RequestContext) -> Response:
    """The link in the mail lands here. Nothing is consumed until the person presses Continue."""
    token = ctx.request.query_params.get("token", "")
    problem = await auth.check_magic_link(ctx.session, token)
    if problem is not None:
        return render(ctx, "magic.html", status_for(problem), error=problem.message)
    return render(ctx, "magic.html", token=token)


@routes.post("/auth/magic", auth=AuthKind.PUBLIC, page=True, rate_limit=SIGNIN, idempotent=False)
async def magic_continue(ctx: RequestContext) -> Response:
    """Consume the link: sets the session cookie and redirects to where the link was asked from."""
    form = await read_form(ctx)
    try:
        check_origin(ctx.request, ctx.core, required=False)
    except CallboardError as exc:
        return render(ctx, "magic.html", status_for(exc), error=exc.message)
    signed_in, error = await attempt(
        ctx,
        lambda: auth.verify_magic_link(
            ctx.session,
            ctx.core.settings,
            form.get("token", ""),
            previous_token=previous_token(ctx),
            ip=ctx.client_ip,
            user_agent=ctx.user_agent,
        ),
    )
    if signed_in is None:
        assert error is not None
        return render(ctx, "magic.html", status_for(error), error=error.message)
    set_session_cookie(ctx, signed_in)
    return redirect(auth.safe_next_url(ctx.core.settings, signed_in.next_url))


# --- claim ---------------------------------------------------------------------------------------


@routes.get("/claim/{code}", auth=AuthKind.PUBLIC, page=True)
async def claim_page(ctx: RequestContext) -> Response:
    """The claim link an agent hands its owner: shows the agent and offers a one-click claim."""
    code = ctx.params["code"]
    principal = await optional_user(ctx.request, ctx.session)
    try:
        preview = await agents.claim_preview(ctx.session, code)
    except CallboardError as exc:
        return render(ctx, "claim.html", status_for(exc), error=exc.message)
    return render(
        ctx,
        "claim.html",
        preview=preview,
        code=code,
        signed_in_as=principal.email if principal else None,
        login_url=login_url(f"/claim/{code}"),
    )


@routes.post("/claim/{code}", auth=AuthKind.PUBLIC, page=True, idempotent=False)
async def claim_submit(ctx: RequestContext) -> Response:
    """Claim the agent for the signed-in person."""
    code = ctx.params["code"]
    principal = await optional_user(ctx.request, ctx.session)
    if principal is None:
        return redirect(login_url(f"/claim/{code}"))
    try:
        check_origin(ctx.request, ctx.core, required=True)
    except CallboardError as exc:
        return render(ctx, "claim.html", status_for(exc), error=exc.message)
    result, error = await attempt(ctx, lambda: agents.claim(ctx.session, code, principal.user_id))
    if result is None:
        assert error is not None
        return render(ctx, "claim.html", status_for(error), error=error.message)
    return render(
        ctx,
        "claim.html",
        claimed=result.agent,
        upgraded=result.upgraded_key_count,
        email_verified=principal.email_verified,
    )
