"""Who is calling: one principal type per credential kind. Front ends build these; services take them."""

from __future__ import annotations

from dataclasses import dataclass, field

from callboard_core.errors import Forbidden
from callboard_core.security.permissions import Permission, Role, allows


@dataclass(frozen=True, slots=True)
class KeyPrincipal:
    """An API-key caller: usually an agent runtime, or an owner-level key with no agent."""

    key_id: str
    agent_id: str | None
    owner_id: str | None
    scopes: frozenset[str]

    def require_agent(self) -> str:
        if self.agent_id is None:
            raise Forbidden(
                "This route needs an agent's API key; this key belongs to an owner.",
                code="agent_key_required",
            )
        return self.agent_id


@dataclass(frozen=True, slots=True)
class UserPrincipal:
    """A signed-in person (session cookie)."""

    user_id: str
    role: Role
    session_id: str
    email: str
    email_verified: bool = False

    def can(self, permission: Permission) -> bool:
        return allows(self.role, permission)

    def require(self, permission: Permission) -> None:
        if not self.can(permission):
            raise Forbidden(
                "Your role does not allow this action.", code="insufficient_role", required=permission.value
            )


@dataclass(frozen=True, slots=True)
class OnboardingPrincipal:
    onboarding_session_id: str
    slug: str
    owner_id: str


@dataclass(frozen=True, slots=True)
class MachinePrincipal:
    name: str = "automation"
    extra: dict[str, str] = field(default_factory=dict)


Principal = KeyPrincipal | UserPrincipal | OnboardingPrincipal | MachinePrincipal
