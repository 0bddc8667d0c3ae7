"""Server-rendered pages for people: sign in, the magic-link landing, the claim page, a small home page.

Forms post back to these routes on the same origin. A GET never consumes anything (mail scanners
prefetch links); the POSTs call the same service functions as the JSON routes. An error a handler raises
is shown as the route's error page (http_api/pages_support.py), not as problem+json.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import HTMLResponse, Response

from callboard_core.agents import service as agents
from callboard_core.auth import service as auth
from callboard_core.auth import sessions
from callboard_core.console import service as console
from callboard_core.principals import Actor
from callboard_core.ratelimit import SIGNIN
from callboard_core.security.permissions import Permission
from callboard_core.users import service as users
from http_api.auth import check_origin, optional_user, require_verified
from http_api.pages_support import ErrorPage, attempt, login_url, read_form, redirect, render, shows_errors
from http_api.route_table import AuthKind, Cookie, RequestContext, RouteGroup
from http_api.routes.auth import previous_token, set_session_cookie

routes = RouteGroup("pages")


def _login_context(ctx: RequestContext, next_url: str = "/") -> dict[str, Any]:
    settings = ctx.core.settings
    return {
        "next_url": next_url,
        "terms_version": settings.terms_version,
        "privacy_version": settings.privacy_version,
    }


async def _posted_login_context(ctx: RequestContext) -> dict[str, Any]:
    return _login_context(ctx, auth.safe_next_url(ctx.core.settings, (await read_form(ctx)).get("next")))


# How each page shows a refused request (pages_support.error_page renders them all).
LOGOUT_ERROR = ErrorPage("message.html", title="Not signed out")
LOGIN_ERROR = ErrorPage("login.html", context=_posted_login_context)
MAGIC_ERROR = ErrorPage("magic.html")
CLAIM_ERROR = ErrorPage("claim.html")


# --- home ----------------------------------------------------------------------------------------


@routes.get("/", auth=AuthKind.PUBLIC, page=True)
async def home_page(ctx: RequestContext) -> Response:
    """Home: signed in (and verified), the owner's console home (agents, balance, jobs that need them,
    unread notifications, the first steps); otherwise what callboard is, and the way in."""
    principal = await optional_user(ctx.request, ctx.session)
    if principal is not None and principal.email_verified:
        actor = Actor.of_user(principal)
        home = await console.home(ctx.session, actor)
        return render(
            ctx, "console/home.html", nav="home", home=home, staff=actor.can(Permission.STAFF_CONSOLE)
        )
    user = await users.get(ctx.session, principal.user_id) if principal else None
    return render(ctx, "home.html", user=user)


@routes.post("/logout", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(LOGOUT_ERROR)
async def logout_page(ctx: RequestContext) -> Response:
    """Sign out of every browser."""
    principal = await optional_user(ctx.request, ctx.session)
    if principal is not None:
        check_origin(ctx.request, ctx.core, required=True)
        await auth.logout(ctx.session, Actor.of_user(principal))
    ctx.cookies.append(Cookie(sessions.COOKIE_NAME, delete=True))
    return redirect("/login")


# --- sign in -------------------------------------------------------------------------------------


def _login_page(ctx: RequestContext, next_url: str, **context: Any) -> HTMLResponse:
    return render(ctx, "login.html", **_login_context(ctx, next_url), **context)


@routes.get("/login", auth=AuthKind.PUBLIC, page=True)
async def login_page(ctx: RequestContext) -> Response:
    """Sign in by email link or password."""
    next_url = auth.safe_next_url(ctx.core.settings, ctx.request.query_params.get("next"))
    principal = await optional_user(ctx.request, ctx.session)
    return _login_page(ctx, next_url, signed_in_as=principal.email if principal else None)


@routes.post("/login", auth=AuthKind.PUBLIC, page=True, rate_limit=SIGNIN, idempotent=False)
@shows_errors(LOGIN_ERROR)
async def login_submit(ctx: RequestContext) -> Response:
    """The sign-in forms: mail a link (action=magic) or sign in with a password (action=password)."""
    fields = await read_form(ctx)
    form = auth.SignInForm(
        action=fields.get("action", ""),
        identifier=fields.get("identifier", ""),
        password=fields.get("password", ""),
        email=fields.get("email", ""),
        accept_legal=bool(fields.get("accept_legal")),
        next=fields.get("next"),
    )
    check_origin(ctx.request, ctx.core, required=False)  # login CSRF; refused before the form is kept
    # A refused form is shown again with the address or name typed, never the password.
    keep = {"identifier": form.identifier} if form.action == "password" else {"email": form.email}
    done = await attempt(
        ctx,
        lambda: auth.sign_in_with_form(
            ctx.session,
            ctx.core.settings,
            ctx.core.mailer,
            form,
            previous_token=previous_token(ctx),
            ip=ctx.client_ip,
            user_agent=ctx.user_agent,
        ),
        **keep,
    )
    if done.signed_in is None:
        unticked = form.action == "magic" and not form.accept_legal
        return _login_page(
            ctx, done.next_url, sent_to=done.sent_to, terms_unticked=unticked, email=form.email
        )
    set_session_cookie(ctx, done.signed_in)
    return redirect(done.next_url)


# --- the legal texts and the icon --------------------------------------------------------------


@routes.get("/terms", auth=AuthKind.PUBLIC, page=True)
async def terms_page(ctx: RequestContext) -> Response:
    """The Terms of Service, at the version the sign-in forms ask people to accept."""
    return render(
        ctx, "legal.html", title="Terms of Service", version=ctx.core.settings.terms_version, kind="terms"
    )


@routes.get("/privacy", auth=AuthKind.PUBLIC, page=True)
async def privacy_page(ctx: RequestContext) -> Response:
    """The Privacy Notice, at the version the sign-in forms ask people to accept."""
    return render(
        ctx, "legal.html", title="Privacy Notice", version=ctx.core.settings.privacy_version, kind="privacy"
    )


FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" '
    'fill="#2456d6"/><path d="M21 11.5a6.5 6.5 0 1 0 0 9" fill="none" stroke="#fff" stroke-width="3.2" '
    'stroke-linecap="round"/></svg>'
)


# The console's only script, progressive: copy buttons (hidden without it) copy a key, a prompt or a kit.
CONSOLE_JS = """document.querySelectorAll("button[data-copy]").forEach(function (button) {
  var source = document.querySelector(button.dataset.copy);
  if (!source || !navigator.clipboard) return;
  button.hidden = false;
  button.addEventListener("click", function () {
    navigator.clipboard.writeText(source.value || source.textContent).then(function () {
      button.textContent = "Copied";
    });
  });
});
"""


@routes.get("/console.js", auth=AuthKind.PUBLIC, page=True)
async def console_script(ctx: RequestContext) -> Response:
    return Response(
        CONSOLE_JS, media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"}
    )


@routes.get("/favicon.svg", "/favicon.ico", auth=AuthKind.PUBLIC, page=True)
async def favicon(ctx: RequestContext) -> Response:
    return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})


# --- magic-link landing --------------------------------------------------------------------------


@routes.get("/auth/magic", auth=AuthKind.PUBLIC, page=True)
@shows_errors(MAGIC_ERROR)
async def magic_landing(ctx: RequestContext) -> Response:
    """The link in the mail lands here. Nothing is consumed until the person presses Continue."""
    token = ctx.request.query_params.get("token", "")
    problem = await auth.check_magic_link(ctx.session, token)
    if problem is not None:
        raise problem
    return render(ctx, "magic.html", token=token)


@routes.post("/auth/magic", auth=AuthKind.PUBLIC, page=True, rate_limit=SIGNIN, idempotent=False)
@shows_errors(MAGIC_ERROR)
async def magic_continue(ctx: RequestContext) -> Response:
    """Consume the link: sets the session cookie and redirects to where the link was asked from."""
    form = await read_form(ctx)
    check_origin(ctx.request, ctx.core, required=False)
    signed_in = await attempt(
        ctx,
        lambda: auth.verify_magic_link(
            ctx.session,
            ctx.core.settings,
            ctx.core.mailer,
            form.get("token", ""),
            previous_token=previous_token(ctx),
            ip=ctx.client_ip,
            user_agent=ctx.user_agent,
        ),
    )
    set_session_cookie(ctx, signed_in)
    return redirect(auth.safe_next_url(ctx.core.settings, signed_in.next_url))


# --- claim ---------------------------------------------------------------------------------------


@routes.get("/claim/{code}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(CLAIM_ERROR)
async def claim_page(ctx: RequestContext) -> Response:
    """The claim link an agent hands its owner: shows the agent and offers a one-click claim."""
    code = ctx.params["code"]
    principal = await optional_user(ctx.request, ctx.session)
    preview = await agents.claim_preview(ctx.session, code)
    return render(
        ctx,
        "claim.html",
        preview=preview,
        code=code,
        signed_in_as=principal.email if principal else None,
        login_url=login_url(f"/claim/{code}"),
    )


@routes.post("/claim/{code}", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(CLAIM_ERROR)
async def claim_submit(ctx: RequestContext) -> Response:
    """Claim the agent for the signed-in person."""
    code = ctx.params["code"]
    principal = await optional_user(ctx.request, ctx.session)
    if principal is None:
        return redirect(login_url(f"/claim/{code}"))
    check_origin(ctx.request, ctx.core, required=True)
    require_verified(principal)
    result = await attempt(ctx, lambda: agents.claim(ctx.session, Actor.of_user(principal), code))
    return render(
        ctx,
        "claim.html",
        claimed=result.agent,
        upgraded=result.upgraded_key_count,
        email_verified=principal.email_verified,
    )
