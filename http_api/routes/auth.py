"""Human sign-in: register, magic link, password and dev login, the session's own account, logout."""

from __future__ import annotations

from callboard_core.auth import schemas as auth_schemas
from callboard_core.auth import service as auth
from callboard_core.auth.sessions import COOKIE_NAME
from callboard_core.ratelimit import SIGNIN
from callboard_core.schemas import StatusResponse
from callboard_core.users.schemas import UserEnvelope
from http_api.auth import check_origin
from http_api.route_table import AuthKind, Cookie, RequestContext, RouteGroup

routes = RouteGroup("auth")


def previous_token(ctx: RequestContext) -> str | None:
    return ctx.request.cookies.get(COOKIE_NAME)


def set_session_cookie(ctx: RequestContext, signed_in: auth.SignIn) -> None:
    ctx.cookies.append(Cookie(COOKIE_NAME, signed_in.token, max_age=signed_in.max_age))


def refuse_foreign_origin(ctx: RequestContext) -> None:
    """Login CSRF: a browser request from another site is refused; a request with no Origin is allowed."""
    check_origin(ctx.request, ctx.core, required=False)


@routes.post(
    "/auth/register",
    auth=AuthKind.PUBLIC,
    body=auth_schemas.RegisterRequest,
    response=auth_schemas.Accepted,
    status=202,
    rate_limit=SIGNIN,
)
async def register(ctx: RequestContext) -> auth_schemas.Accepted:
    """Create an account if the email has none, and mail a sign-in link.

    The answer is 202 {status: "accepted"} whether or not the account existed."""
    refuse_foreign_origin(ctx)
    return await auth.register(
        ctx.session, ctx.core.settings, ctx.core.mailer, ctx.body, ip=ctx.client_ip, user_agent=ctx.user_agent
    )


@routes.post(
    "/auth/magic-link",
    auth=AuthKind.PUBLIC,
    body=auth_schemas.MagicLinkRequest,
    response=auth_schemas.Accepted,
    status=202,
    rate_limit=SIGNIN,
)
async def magic_link(ctx: RequestContext) -> auth_schemas.Accepted:
    """Mail a single-use sign-in link (15 minutes).

    202 for any well-formed email. An unknown address gets a sign-up link only when legalAcceptance
    (acceptedTerms and acceptedPrivacy) is sent; otherwise nothing is mailed."""
    refuse_foreign_origin(ctx)
    return await auth.request_magic_link(
        ctx.session, ctx.core.settings, ctx.core.mailer, ctx.body, ip=ctx.client_ip, user_agent=ctx.user_agent
    )


@routes.post(
    "/auth/verify",
    auth=AuthKind.PUBLIC,
    body=auth_schemas.VerifyRequest,
    response=auth_schemas.SignedIn,
    rate_limit=SIGNIN,
    idempotent=False,
    errors=(401, 410),
)
async def verify(ctx: RequestContext) -> auth_schemas.SignedIn:
    """Consume a magic-link token: sets the svc_session cookie and returns the user and nextUrl.

    A used token is 410 magic_link_used, an expired one 410 magic_link_expired, an unknown one 401."""
    refuse_foreign_origin(ctx)
    signed_in = await auth.verify_magic_link(
        ctx.session,
        ctx.core.settings,
        ctx.core.mailer,
        ctx.body.token,
        previous_token=previous_token(ctx),
        ip=ctx.client_ip,
        user_agent=ctx.user_agent,
    )
    set_session_cookie(ctx, signed_in)
    return signed_in.response()


@routes.post(
    "/auth/password-login",
    auth=AuthKind.PUBLIC,
    body=auth_schemas.PasswordLoginRequest,
    response=auth_schemas.SignedIn,
    rate_limit=SIGNIN,
    idempotent=False,
    errors=(401,),
)
async def password_login(ctx: RequestContext) -> auth_schemas.SignedIn:
    """Sign in with email or username and password; sets the svc_session cookie.

    With legalAcceptance, a first password can be set (a new email, or an account with no password and an
    unverified email). Every failure is 401 invalid_credentials."""
    refuse_foreign_origin(ctx)
    signed_in = await auth.password_login(
        ctx.session,
        ctx.core.settings,
        ctx.core.mailer,
        ctx.body,
        previous_token=previous_token(ctx),
        ip=ctx.client_ip,
        user_agent=ctx.user_agent,
    )
    set_session_cookie(ctx, signed_in)
    return signed_in.response()


@routes.post(
    "/auth/dev-login",
    auth=AuthKind.PUBLIC,
    body=auth_schemas.DevLoginRequest,
    response=auth_schemas.SignedIn,
    rate_limit=SIGNIN,
    idempotent=False,
    errors=(401, 403),
)
async def dev_login(ctx: RequestContext) -> auth_schemas.SignedIn:
    """Development sign-in by email and password (creates a missing account). 403 in production."""
    refuse_foreign_origin(ctx)
    signed_in = await auth.dev_login(
        ctx.session,
        ctx.core.settings,
        ctx.body,
        previous_token=previous_token(ctx),
        ip=ctx.client_ip,
        user_agent=ctx.user_agent,
    )
    set_session_cookie(ctx, signed_in)
    return signed_in.response()


@routes.get("/auth/legal-versions", auth=AuthKind.PUBLIC, response=auth_schemas.LegalVersions)
async def legal_versions(ctx: RequestContext) -> auth_schemas.LegalVersions:
    """The current terms and privacy-notice versions a sign-up accepts."""
    return auth.legal_versions(ctx.core.settings)


@routes.get("/auth/me", auth=AuthKind.SESSION, response=UserEnvelope, unverified_ok=True)
async def me(ctx: RequestContext) -> UserEnvelope:
    """The signed-in user; 401 without a session."""
    return await auth.me(ctx.session, ctx.actor)


@routes.post(
    "/auth/onboarding-profile",
    auth=AuthKind.SESSION,
    body=auth_schemas.OnboardingProfileUpdate,
    response=UserEnvelope,
    unverified_ok=True,
)
async def onboarding_profile(ctx: RequestContext) -> UserEnvelope:
    """Set name and onboarding profile fields (only those sent change); returns the user."""
    return await auth.update_onboarding_profile(ctx.session, ctx.actor, ctx.body)


@routes.post(
    "/auth/password",
    auth=AuthKind.SESSION,
    body=auth_schemas.PasswordChange,
    response=StatusResponse,
    unverified_ok=True,
)
async def change_password(ctx: RequestContext) -> StatusResponse:
    """Set the signed-in user's password; the user's other sessions end."""
    return await auth.change_password(
        ctx.session, ctx.actor, ctx.body.password, keep_session_id=ctx.user.session_id
    )


@routes.post(
    "/auth/logout", auth=AuthKind.SESSION, response=StatusResponse, idempotent=False, unverified_ok=True
)
async def logout(ctx: RequestContext) -> StatusResponse:
    """End every live session of the user and clear the cookie."""
    ctx.cookies.append(Cookie(COOKIE_NAME, delete=True))
    return await auth.logout(ctx.session, ctx.actor)
