from __future__ import annotations

from datetime import datetime
from typing import Literal

from callboard_core.schemas import ApiModel

# A password being set: at least MIN_PASSWORD, at most MAX_PASSWORD characters.
MIN_PASSWORD = 8
MAX_PASSWORD = 256

RoleName = Literal["USER", "SUPPORT", "MODERATOR", "ADMIN", "SUPERADMIN"]
SignupIntentName = Literal["UNDECIDED", "BUYER", "SELLER", "BOTH"]


class OnboardingProfile(ApiModel):
    company: str | None
    industry: str | None
    role_title: str | None
    signup_intent: SignupIntentName
    use_case: str | None


class PublicUser(ApiModel):
    id: str
    email: str
    username: str | None
    name: str | None
    role: RoleName
    status: Literal["ACTIVE", "SUSPENDED", "DELETED"]
    preview_access: bool
    waitlist_status: Literal["PENDING", "INVITED", "APPROVED", "REJECTED", "DELETED"] | None
    created_at: datetime
    onboarding_profile: OnboardingProfile | None = None


class UserEnvelope(ApiModel):
    user: PublicUser
