"""Verification of onboarding bearer tokens (routes under /api/agent/onboard/{slug})."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.errors import Unauthenticated
from callboard_core.onboarding.models import OnboardingSession
from callboard_core.principals import OnboardingPrincipal
from callboard_core.security import tokens


async def authenticate(session: AsyncSession, slug: str, token: str) -> OnboardingPrincipal:
    """The token must be the one minted for this slug, and not past its one-hour life."""
    invalid = Unauthenticated(
        "The onboarding token is not valid for this session, or has expired.", code="invalid_onboarding_token"
    )
    if not token or len(token) > 256:
        raise invalid
    row = (
        await session.execute(
            select(
                OnboardingSession.id,
                OnboardingSession.slug,
                OnboardingSession.owner_id,
                OnboardingSession.token_expires_at,
                OnboardingSession.token_hash,
            ).where(OnboardingSession.slug == slug)
        )
    ).one_or_none()
    if (
        row is None
        or not tokens.constant_time_equals(row.token_hash, tokens.hash_token(token))
        or row.token_expires_at <= clock.now()
    ):
        raise invalid
    return OnboardingPrincipal(onboarding_session_id=row.id, slug=row.slug, owner_id=row.owner_id)
