"""Human sign-in: magic links, registration, password and dev login, the session's own account.

Rules that hold across this module:
- No enumeration: asking for a link or registering answers the same whether or not the account exists,
  and every failed password sign-in is the same 401 `invalid_credentials`.
- Magic links are single use (compare-and-set on `used_at`), short-lived and stored hashed.
- A sign-in starts a fresh session and revokes the one the browser had (rotation).
- An account whose email was never verified may carry a password set by whoever typed the address first;
  the first magic-link verification from a browser that is not that account's clears that password and
  ends its sessions (pre-registration takeover defence).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

from pydantic import EmailStr, TypeAdapter, ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.auth import revocation, sessions
from callboard_core.auth import schemas as auth_schemas
from callboard_core.auth.models import MagicLink, UserSession
from callboard_core.config import Settings
from callboard_core.errors import (
    CallboardError,
    Forbidden,
    Gone,
    Unauthenticated,
    ValidationFailed,
    field_error,
    from_pydantic,
)
from callboard_core.mail.service import Mail, Mailer
from callboard_core.principals import Actor
from callboard_core.schemas import ApiModel, StatusResponse
from callboard_core.security import passwords, site_urls, tokens
from callboard_core.users import service as users
from callboard_core.users.models import LegalConsent, User, UserStatus
from callboard_core.users.schemas import UserEnvelope

SIGN_IN = "sign_in"
SIGN_UP = "sign_up"
VERIFY_EMAIL = "verify_email"
PROFILE_FIELDS = ("company", "industry", "role_title", "signup_intent", "use_case")

_email_adapter: TypeAdapter[str] = TypeAdapter(EmailStr)
ApiModelT = TypeVar("ApiModelT", bound=ApiModel)


def _invalid_credentials() -> Unauthenticated:
    return Unauthenticated(
        "The email, username or password is not right. New here or never set a password? Accept the terms "
        "to create one, or sign in with an email link.",
        code="invalid_credentials",
    )


@dataclass(frozen=True)
class SignIn:
    """A started session: the cookie's token and lifetime, the user, and where the browser goes next."""

    user: User
    token: str
    max_age: int
    next_url: str

    def response(self) -> auth_schemas.SignedIn:
        return auth_schemas.SignedIn(user=users.public(self.user), next_url=self.next_url)


# --- helpers -------------------------------------------------------------------------------------


def _origin(url: str) -> str:
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}".lower()


def check_next_url(settings: Settings, value: str | None, field: str = "nextUrl") -> str | None:
    """A relative path ("/...", not "//...") or an absolute URL on the base URL's origin; else 422."""
    if not value:
        return None
    bad = field_error(
        field,
        f"Use a path on this site (starting with /) or a URL on {_origin(settings.base_url)}.",
        "invalid_next_url",
    )
    if site_urls.unprintable(value):
        raise bad
    if value.startswith("/"):
        if value.startswith("//"):
            raise bad
        return value
    parts = urlsplit(value)
    if parts.scheme in ("http", "https") and _origin(value) == _origin(settings.base_url):
        return value
    raise bad


def safe_next_url(settings: Settings, value: str | None) -> str:
    """For pages: a bad or missing next URL becomes "/" instead of an error."""
    try:
        return check_next_url(settings, value) or "/"
    except ValidationFailed:
        return "/"


def session_ttl(settings: Settings) -> timedelta:
    return timedelta(hours=settings.session_ttl_hours)


def _check_legal(settings: Settings, legal: auth_schemas.LegalAcceptance) -> None:
    """Consent counts only for the current versions; an older one must be accepted again."""
    if legal.terms_version and legal.terms_version != settings.terms_version:
        raise field_error(
            "legalAcceptance.termsVersion",
            f"The current terms are version {settings.terms_version}; accept that version.",
            "outdated_version",
        )
    if legal.privacy_version and legal.privacy_version != settings.privacy_version:
        raise field_error(
            "legalAcceptance.privacyVersion",
            f"The current privacy notice is version {settings.privacy_version}; accept that version.",
            "outdated_version",
        )


def _accepted(settings: Settings, legal: auth_schemas.LegalAcceptance | None) -> bool:
    if legal is None or not legal.accepted:
        return False
    _check_legal(settings, legal)
    return True


def _record_consent(
    session: AsyncSession,
    settings: Settings,
    user_id: str,
    *,
    ip: str | None,
    user_agent: str | None,
    terms_version: str | None = None,
    privacy_version: str | None = None,
) -> None:
    session.add(
        LegalConsent(
            user_id=user_id,
            terms_version=terms_version or settings.terms_version,
            privacy_version=privacy_version or settings.privacy_version,
            ip_address=ip,
            user_agent=user_agent[:512] if user_agent else None,
        )
    )


def _apply_profile(user: User, data: dict[str, Any]) -> None:
    touched = False
    for field, value in data.items():
        if field == "signup_intent" and value is None:
            continue
        setattr(user, field, value)
        touched = touched or field in PROFILE_FIELDS
    if touched and user.profile_set_at is None:
        user.profile_set_at = clock.now()


# --- magic links ---------------------------------------------------------------------------------

_MAIL_TEXT = {
    SIGN_IN: ("Your callboard sign-in link", "Sign in to callboard with this link:"),
    SIGN_UP: (
        "Finish creating your callboard account",
        "Finish creating your callboard account with this link:",
    ),
    VERIFY_EMAIL: (
        "Confirm your email for callboard",
        "Confirm your email address for callboard with this link:",
    ),
}


async def issue_magic_link(
    session: AsyncSession,
    settings: Settings,
    mailer: Mailer,
    *,
    email: str,
    user_id: str | None,
    purpose: str = SIGN_IN,
    next_url: str | None = None,
    signup: dict[str, Any] | None = None,
) -> None:
    """Store a hashed single-use token and mail the link ({base_url}/auth/magic?token=...)."""
    token = tokens.new_token(32)
    ttl = settings.magic_link_ttl_minutes
    session.add(
        MagicLink(
            email=users.normalize_email(email),
            user_id=user_id,
            token_hash=tokens.hash_token(token),
            purpose=purpose,
            next_url=next_url,
            signup=signup,
            expires_at=clock.now() + timedelta(minutes=ttl),
        )
    )
    await session.flush()
    link = f"{settings.base_url.rstrip('/')}/auth/magic?{urlencode({'token': token})}"
    subject, lead = _MAIL_TEXT.get(purpose, _MAIL_TEXT[SIGN_IN])
    body = (
        f"{lead}\n\n{link}\n\nThe link works once and expires in {ttl} minutes.\n"
        "If you did not ask for it, ignore this mail: nothing happens without the link.\n"
    )
    await mailer.send(session, Mail("magic_link", users.normalize_email(email), subject, body))


async def request_magic_link(
    session: AsyncSession,
    settings: Settings,
    mailer: Mailer,
    body: auth_schemas.MagicLinkRequest,
    *,
    ip: str | None = None,
    user_agent: str | None = None,
) -> auth_schemas.Accepted:
    """Mail a sign-in link to an active account, a sign-up link to a new address whose owner accepted the
    terms, and nothing otherwise. The answer is the same in every case."""
    next_url = check_next_url(settings, body.next_url)
    accepted = _accepted(settings, body.legal_acceptance)
    email = users.normalize_email(body.email)
    user = await users.get_by_email(session, email)
    if user is not None:
        if user.status == UserStatus.ACTIVE:
            await issue_magic_link(session, settings, mailer, email=email, user_id=user.id, next_url=next_url)
    elif accepted:
        signup = {
            "termsVersion": settings.terms_version,
            "privacyVersion": settings.privacy_version,
            "ip": ip,
            "userAgent": user_agent,
        }
        await issue_magic_link(
            session,
            settings,
            mailer,
            email=email,
            user_id=None,
            purpose=SIGN_UP,
            next_url=next_url,
            signup=signup,
        )
    return auth_schemas.Accepted()


async def register(
    session: AsyncSession,
    settings: Settings,
    mailer: Mailer,
    body: auth_schemas.RegisterRequest,
    *,
    ip: str | None = None,
    user_agent: str | None = None,
) -> auth_schemas.Accepted:
    """Create the account if it is missing (with its consent row and profile) and mail a sign-in link.
    An existing account is left untouched and gets the link too; the answer never tells the two apart."""
    next_url = check_next_url(settings, body.next_url)
    accepted = _accepted(settings, body.legal_acceptance)
    email = users.normalize_email(body.email)
    user = await users.get_by_email(session, email)
    if user is None:
        user = await users.create(session, email=email, name=body.name)
        _apply_profile(user, body.model_dump(include=set(PROFILE_FIELDS), exclude_none=True))
        if accepted:
            _record_consent(session, settings, user.id, ip=ip, user_agent=user_agent)
        await session.flush()
    if user.status == UserStatus.ACTIVE:
        await issue_magic_link(session, settings, mailer, email=email, user_id=user.id, next_url=next_url)
    return auth_schemas.Accepted()


def _link_error(link: MagicLink | None) -> CallboardError:
    if link is None:
        return Unauthenticated(
            "This sign-in link is not valid; ask for a new one.", code="invalid_magic_link"
        )
    if link.used_at is not None:
        return Gone("This sign-in link was used already; ask for a new one.", code="magic_link_used")
    return Gone("This sign-in link has expired; ask for a new one.", code="magic_link_expired")


async def _find_link(session: AsyncSession, token: str) -> MagicLink | None:
    if not token or len(token) > 256:
        return None
    return (
        await session.execute(select(MagicLink).where(MagicLink.token_hash == tokens.hash_token(token)))
    ).scalar_one_or_none()


async def check_magic_link(session: AsyncSession, token: str) -> CallboardError | None:
    """Read-only: why this token would be refused, or None if it is usable. Consumes nothing."""
    link = await _find_link(session, token)
    if link is None or link.used_at is not None or link.expires_at <= clock.now():
        return _link_error(link)
    return None


async def _owns_session(session: AsyncSession, token: str | None, user_id: str) -> bool:
    if not token:
        return False
    try:
        return (await sessions.authenticate(session, token)).user_id == user_id
    except Unauthenticated:
        return False


async def verify_magic_link(
    session: AsyncSession,
    settings: Settings,
    mailer: Mailer,
    token: str,
    *,
    previous_token: str | None = None,
    ip: str | None = None,
    user_agent: str | None = None,
) -> SignIn:
    """Consume a magic link (once), mark the email verified, create the account of a sign-up link, and
    start a session (rotating the browser's previous one). A first verification from a browser that is not
    the password setter's clears that password, ends its sessions and revokes whatever the account held
    (`auth.revocation`), telling the owner by mail."""
    now = clock.now()
    row = (
        (
            await session.execute(
                update(MagicLink)
                .where(
                    MagicLink.token_hash == tokens.hash_token(token),
                    MagicLink.used_at.is_(None),
                    MagicLink.expires_at > now,
                )
                .values(used_at=now)
                .returning(
                    MagicLink.email,
                    MagicLink.user_id,
                    MagicLink.purpose,
                    MagicLink.next_url,
                    MagicLink.signup,
                )
            )
        ).one_or_none()
        if 0 < len(token) <= 256
        else None
    )
    if row is None:
        raise _link_error(await _find_link(session, token))

    user = (
        await session.get(User, row.user_id) if row.user_id else await users.get_by_email(session, row.email)
    )
    if user is None and row.purpose == SIGN_UP:
        signup = row.signup or {}
        user = await users.create(session, email=row.email)
        _record_consent(
            session,
            settings,
            user.id,
            ip=signup.get("ip") or ip,
            user_agent=signup.get("userAgent") or user_agent,
            terms_version=signup.get("termsVersion"),
            privacy_version=signup.get("privacyVersion"),
        )
    if user is None or user.status != UserStatus.ACTIVE:
        raise Unauthenticated("This account cannot sign in.", code="account_unavailable")

    if user.email_verified_at is None:
        if user.password_hash is not None and not await _owns_session(session, previous_token, user.id):
            # Whoever set this password never proved the address: it is not the owner's.
            user.password_hash = None
            await sessions.revoke_all(session, user.id)
            revoked = await revocation.revoke_unverified_grants(session, user)
            if revoked:
                await revocation.tell_owner(session, mailer, user, revoked)
        user.email_verified_at = now
    await session.flush()
    return await _start(
        session,
        settings,
        user,
        previous_token=previous_token,
        ip=ip,
        user_agent=user_agent,
        next_url=row.next_url or "/",
    )


async def _start(
    session: AsyncSession,
    settings: Settings,
    user: User,
    *,
    previous_token: str | None,
    ip: str | None,
    user_agent: str | None,
    next_url: str = "/",
) -> SignIn:
    ttl = session_ttl(settings)
    token, _ = await sessions.start(
        session, user, ttl=ttl, previous_token=previous_token, ip_address=ip, user_agent=user_agent
    )
    return SignIn(user=user, token=token, max_age=int(ttl.total_seconds()), next_url=next_url)


# --- password and dev login ----------------------------------------------------------------------


def _email_or_field_error(value: str, field: str) -> str:
    try:
        return users.normalize_email(_email_adapter.validate_python(value.strip()))
    except ValidationError:
        raise field_error(
            field, "Enter a valid email address to create an account.", "invalid_email"
        ) from None


async def password_login(
    session: AsyncSession,
    settings: Settings,
    mailer: Mailer,
    body: auth_schemas.PasswordLoginRequest,
    *,
    previous_token: str | None = None,
    ip: str | None = None,
    user_agent: str | None = None,
) -> SignIn:
    """Sign in with a password. With legal acceptance, a first password may be set: for a new email (the
    account is created, unverified) or for an account that has neither a password nor a verified email.
    Such an account can sign in but do nothing that matters until its address is verified, so a link that
    verifies it is mailed at once."""
    accepted = _accepted(settings, body.legal_acceptance)
    user = await users.get_by_identifier(session, body.identifier)
    if user is not None and user.password_hash:
        if not await passwords.verify_password(user.password_hash, body.password):
            raise _invalid_credentials()
        if user.status != UserStatus.ACTIVE:
            raise _invalid_credentials()
    elif accepted and (
        (user is None and "@" in body.identifier)
        or (user is not None and user.status == UserStatus.ACTIVE and user.email_verified_at is None)
    ):
        users.check_password_strength(body.password)
        password_hash = await passwords.hash_password(body.password)
        if user is None:
            email = _email_or_field_error(body.identifier, "identifier")
            user = await users.create(session, email=email, password_hash=password_hash)
        else:
            user.password_hash = password_hash
        _record_consent(session, settings, user.id, ip=ip, user_agent=user_agent)
        await session.flush()
        await issue_magic_link(
            session, settings, mailer, email=user.email, user_id=user.id, purpose=VERIFY_EMAIL
        )
    else:
        await passwords.verify_password(None, body.password)  # the same time as a wrong password
        raise _invalid_credentials()
    return await _start(session, settings, user, previous_token=previous_token, ip=ip, user_agent=user_agent)


async def dev_login(
    session: AsyncSession,
    settings: Settings,
    body: auth_schemas.DevLoginRequest,
    *,
    previous_token: str | None = None,
    ip: str | None = None,
    user_agent: str | None = None,
) -> SignIn:
    """Development shortcut: sign in by email and password, creating the account if it is missing.

    Refused in production. It never sets a password on an existing account."""
    if settings.is_production:
        raise Forbidden("Dev login is disabled in production.", code="dev_login_disabled")
    email = users.normalize_email(body.email)
    user = await users.get_by_email(session, email)
    if user is None:
        # Development only: the developer vouches for the address.
        user = await users.create_with_password(session, email=email, password=body.password, verified=True)
    elif (
        not await passwords.verify_password(user.password_hash, body.password)
        or user.status != UserStatus.ACTIVE
    ):
        raise _invalid_credentials()
    return await _start(session, settings, user, previous_token=previous_token, ip=ip, user_agent=user_agent)


# --- the signed-in user's own account ------------------------------------------------------------


async def me(session: AsyncSession, actor: Actor) -> UserEnvelope:
    return UserEnvelope(user=users.public(await users.get(session, actor.require_user())))


async def update_onboarding_profile(
    session: AsyncSession, actor: Actor, body: auth_schemas.OnboardingProfileUpdate
) -> UserEnvelope:
    user = await users.get(session, actor.require_user())
    data = body.model_dump(exclude_unset=True)
    _apply_profile(user, data)
    if user.profile_set_at is None:
        user.profile_set_at = clock.now()
    user.updated_at = clock.now()
    await session.flush()
    return UserEnvelope(user=users.public(user))


async def change_password(
    session: AsyncSession, actor: Actor, password: str, *, keep_session_id: str
) -> StatusResponse:
    """Set a new password; every other session of the user ends, `keep_session_id` (the caller's) stays."""
    users.check_password_strength(password)
    user = await users.get(session, actor.require_user())
    user.password_hash = await passwords.hash_password(password)
    user.updated_at = clock.now()
    await session.execute(
        update(UserSession)
        .where(
            UserSession.user_id == user.id,
            UserSession.id != keep_session_id,
            UserSession.revoked_at.is_(None),
        )
        .values(revoked_at=clock.now())
    )
    await session.flush()
    return StatusResponse(status="updated")


async def logout(session: AsyncSession, actor: Actor) -> StatusResponse:
    """End every live session of the user (every browser), not only this one."""
    await sessions.revoke_all(session, actor.require_user())
    return StatusResponse(status="ok")


def legal_versions(settings: Settings) -> auth_schemas.LegalVersions:
    return auth_schemas.LegalVersions(
        terms_version=settings.terms_version, privacy_version=settings.privacy_version
    )


# --- the sign-in page ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SignInForm:
    """The sign-in page's two forms as posted: a password sign-in (action "password") or a request for a
    link (any other action). One checkbox accepts the current terms and privacy notice."""

    action: str = ""
    identifier: str = ""
    password: str = ""
    email: str = ""
    accept_legal: bool = False
    next: str | None = None


@dataclass(frozen=True)
class FormSignIn:
    """What the sign-in page does next: start `signed_in` and go to `next_url`, or say a link went to
    `sent_to` (if that address can sign in: the answer is the same either way)."""

    next_url: str
    signed_in: SignIn | None = None
    sent_to: str | None = None


def _form_body(model: type[ApiModelT], data: dict[str, Any]) -> ApiModelT:
    """The form as the JSON routes' body; a form that does not fit is one plain 422 message."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
        message = "Enter a valid email address." if "email" in fields else "Please fill in every field."
        raise ValidationFailed(message, errors=from_pydantic(exc).errors) from None


async def sign_in_with_form(
    session: AsyncSession,
    settings: Settings,
    mailer: Mailer,
    form: SignInForm,
    *,
    previous_token: str | None = None,
    ip: str | None = None,
    user_agent: str | None = None,
) -> FormSignIn:
    """The sign-in page: the same rules as the JSON routes (password_login, request_magic_link). A bad or
    missing next URL becomes "/" instead of an error."""
    next_url = safe_next_url(settings, form.next)
    legal = {"acceptedTerms": True, "acceptedPrivacy": True} if form.accept_legal else None
    if form.action == "password":
        login = _form_body(
            auth_schemas.PasswordLoginRequest,
            {"identifier": form.identifier, "password": form.password, "legalAcceptance": legal},
        )
        signed_in = await password_login(
            session, settings, mailer, login, previous_token=previous_token, ip=ip, user_agent=user_agent
        )
        return FormSignIn(next_url=next_url, signed_in=signed_in)
    link = _form_body(
        auth_schemas.MagicLinkRequest,
        {"email": form.email.strip(), "nextUrl": next_url, "legalAcceptance": legal},
    )
    await request_magic_link(session, settings, mailer, link, ip=ip, user_agent=user_agent)
    return FormSignIn(next_url=next_url, sent_to=link.email)
