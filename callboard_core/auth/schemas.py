"""Wire shapes of the human sign-in surface (/auth/...)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, EmailStr, StringConstraints

from callboard_core.schemas import ApiModel, SiteNextUrl
from callboard_core.users.schemas import MAX_PASSWORD, MIN_PASSWORD, PublicUser, SignupIntentName

Version = Annotated[str, StringConstraints(min_length=1, max_length=32)]
ProfileText = Annotated[str, StringConstraints(max_length=200)]
Password = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
# A password being set: the length users.check_password_strength enforces, stated in the schema.
NewPassword = Annotated[str, StringConstraints(min_length=MIN_PASSWORD, max_length=MAX_PASSWORD)]


class LegalAcceptance(ApiModel):
    """Consent to the terms and the privacy notice; the versions default to the current ones."""

    accepted_terms: bool | None = None
    accepted_privacy: bool | None = None
    terms_version: Version | None = None
    privacy_version: Version | None = None

    @property
    def accepted(self) -> bool:
        return self.accepted_terms is True and self.accepted_privacy is True


class MagicLinkRequest(ApiModel):
    email: EmailStr
    next_url: SiteNextUrl | None = None
    legal_acceptance: LegalAcceptance | None = None


class RegisterRequest(ApiModel):
    email: EmailStr
    next_url: SiteNextUrl | None = None
    legal_acceptance: LegalAcceptance | None = None
    name: ProfileText | None = None
    company: ProfileText | None = None
    industry: ProfileText | None = None
    role_title: ProfileText | None = None
    signup_intent: SignupIntentName | None = None
    use_case: Annotated[str, StringConstraints(max_length=2000)] | None = None


class VerifyRequest(ApiModel):
    token: Annotated[str, StringConstraints(min_length=1, max_length=256)]


class PasswordLoginRequest(ApiModel):
    """With legalAcceptance a first password may be set (a new account), so it must be a valid new one."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["legalAcceptance"], "properties": {"legalAcceptance": {"type": "object"}}},
            "then": {"properties": {"password": {"minLength": MIN_PASSWORD, "maxLength": MAX_PASSWORD}}},
        }
    )

    identifier: Annotated[str, StringConstraints(min_length=1, max_length=320)]
    password: Password
    legal_acceptance: LegalAcceptance | None = None


class DevLoginRequest(ApiModel):
    email: EmailStr
    password: NewPassword


class OnboardingProfileUpdate(ApiModel):
    """Only the fields sent change; null clears a text field."""

    name: ProfileText | None = None
    company: ProfileText | None = None
    industry: ProfileText | None = None
    role_title: ProfileText | None = None
    signup_intent: SignupIntentName | None = None
    use_case: Annotated[str, StringConstraints(max_length=2000)] | None = None


class PasswordChange(ApiModel):
    password: NewPassword


class LegalVersions(ApiModel):
    terms_version: str
    privacy_version: str


class SignedIn(ApiModel):
    """A new session: the cookie carries it; the body says who and where to go next."""

    user: PublicUser
    next_url: str


class Accepted(ApiModel):
    status: str = "accepted"
