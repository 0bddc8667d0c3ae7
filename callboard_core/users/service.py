"""Users: lookup, creation and the public view."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.errors import Conflict, NotFound, field_error
from callboard_core.security import passwords
from callboard_core.security.permissions import Role
from callboard_core.users.models import User
from callboard_core.users.schemas import MAX_PASSWORD, MIN_PASSWORD, OnboardingProfile, PublicUser


def normalize_email(email: str) -> str:
    return email.strip().lower()


def check_password_strength(password: str, field: str = "password") -> None:
    if len(password) < MIN_PASSWORD:
        raise field_error(field, f"Use at least {MIN_PASSWORD} characters.", "too_short")
    if len(password) > MAX_PASSWORD:
        raise field_error(field, f"Use at most {MAX_PASSWORD} characters.", "too_long")


async def get_by_email(session: AsyncSession, email: str) -> User | None:
    return (
        await session.execute(select(User).where(User.email == normalize_email(email)))
    ).scalar_one_or_none()


async def get_by_identifier(session: AsyncSession, identifier: str) -> User | None:
    """Email or username (case-insensitive)."""
    ident = identifier.strip().lower()
    column = User.email if "@" in ident else func.lower(User.username)
    return (await session.execute(select(User).where(column == ident))).scalar_one_or_none()


async def get(session: AsyncSession, user_id: str) -> User:
    user = await session.get(User, user_id)
    if user is None:
        raise NotFound("No such user.", code="user_not_found")
    return user


async def create(
    session: AsyncSession,
    *,
    email: str,
    name: str | None = None,
    role: str = Role.USER,
    password_hash: str | None = None,
    verified: bool = False,
) -> User:
    """A new account. `verified`: someone vouches for the address (the operator's `callboard users create`,
    a development dev-login); otherwise it stays unverified until a magic link is opened."""
    user = User(
        email=normalize_email(email),
        name=name,
        role=Role(role),
        password_hash=password_hash,
        email_verified_at=clock.now() if verified else None,
    )
    try:
        async with session.begin_nested():
            session.add(user)
            await session.flush()
    except IntegrityError:
        raise Conflict("An account with this email exists already.", code="email_taken") from None
    return user


async def create_with_password(
    session: AsyncSession,
    *,
    email: str,
    password: str,
    role: str = Role.USER,
    name: str | None = None,
    verified: bool = False,
) -> User:
    check_password_strength(password)
    return await create(
        session,
        email=email,
        name=name,
        role=role,
        password_hash=await passwords.hash_password(password),
        verified=verified,
    )


def public(user: User) -> PublicUser:
    profile = None
    if user.profile_set_at is not None:
        profile = OnboardingProfile(
            company=user.company,
            industry=user.industry,
            role_title=user.role_title,
            signup_intent=user.signup_intent,
            use_case=user.use_case,
        )
    return PublicUser(
        id=user.id,
        email=user.email,
        username=user.username,
        name=user.name,
        role=user.role,
        status=user.status,
        preview_access=user.preview_access,
        waitlist_status=user.waitlist_status,
        created_at=user.created_at,
        onboarding_profile=profile,
    )
