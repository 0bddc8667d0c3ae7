"""Who is calling, and who acts.

Credential principals: one type per credential kind, produced by the credential services
(`api_keys.authenticate` -> KeyPrincipal, `auth.sessions.authenticate` -> UserPrincipal, `onboarding.tokens`
-> OnboardingPrincipal; the machine routes' MachinePrincipal). Front ends check credentials with them.

Actor: the one shape every service that acts for someone takes. Each front end builds it from the credential
in one place (http_api/route_table.py RequestContext.actor, mcp_server/runner.py). Exceptions that keep their
credential principal: the onboarding-token routes (OnboardingPrincipal, the token is bound to one session)
and the machine routes (MachinePrincipal).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from callboard_core.errors import Forbidden, Unauthenticated
from callboard_core.security.permissions import Permission, Role, allows


@dataclass(frozen=True, slots=True)
class KeyPrincipal:
    """An API-key caller: usually an agent runtime, or an owner-level key with no agent."""

    key_id: str
    agent_id: str | None
    owner_id: str | None
    scopes: frozenset[str]


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


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: the one shape every service takes. Front ends build it from the credential."""

    agent_id: str | None = None  # acting as this agent (its API key)
    user_id: str | None = None  # the signed-in person (owner or staff)
    role: Role = Role.USER  # the person's role (permission checks)
    staff: bool = False  # acting through a staff route: may see every owner's objects
    key: KeyPrincipal | None = None  # the API key acted through (its owner and scopes), if any
    request_id: str | None = None  # the request acted in (audit entries name it)

    @classmethod
    def agent(cls, agent_id: str) -> Actor:
        return cls(agent_id=agent_id)

    @classmethod
    def owner(cls, user_id: str, role: Role = Role.USER) -> Actor:
        return cls(user_id=user_id, role=role)

    @classmethod
    def admin(cls, user_id: str, role: Role = Role.ADMIN) -> Actor:
        """A staff member acting through a staff route (auth kinds A and St)."""
        return cls(user_id=user_id, role=role, staff=True)

    @classmethod
    def of_user(cls, user: UserPrincipal, *, staff: bool = False, request_id: str | None = None) -> Actor:
        return cls(user_id=user.user_id, role=user.role, staff=staff, request_id=request_id)

    @classmethod
    def of_key(cls, key: KeyPrincipal, *, request_id: str | None = None) -> Actor:
        """An API key: its agent acts (agent_id is None for an owner-level key; the key's owner is
        `key.owner_id`, never `user_id`, which is the signed-in person)."""
        return cls(agent_id=key.agent_id, key=key, request_id=request_id)

    @property
    def kind(self) -> str:
        if self.staff:
            return "staff"
        return "agent" if self.agent_id else "owner"

    @property
    def id(self) -> str | None:
        return self.agent_id or self.user_id

    @property
    def audit(self) -> tuple[str, str | None]:
        """(actor_type, actor_id) for an audit row: the agent, else the person (a key's owner for an
        owner-level key)."""
        if self.agent_id is not None:
            return "agent", self.agent_id
        if self.user_id is not None:
            return "user", self.user_id
        if self.key is not None:
            return "user", self.key.owner_id
        return "system", None

    def require_agent(self) -> str:
        if self.agent_id is None:
            raise Forbidden(
                "This route needs an agent's API key; this key belongs to an owner.",
                code="agent_key_required",
            )
        return self.agent_id

    def require_key(self) -> KeyPrincipal:
        if self.key is None:
            raise Unauthenticated("An API key is required.", code="api_key_required")
        return self.key

    def require_user(self) -> str:
        if self.user_id is None:
            raise Unauthenticated("Sign in first.", code="session_required")
        return self.user_id

    def can(self, permission: Permission) -> bool:
        return self.user_id is not None and allows(self.role, permission)

    def require(self, permission: Permission) -> None:
        if not self.can(permission):
            raise Forbidden(
                "Your role does not allow this action.", code="insufficient_role", required=permission.value
            )


SYSTEM = Actor()  # the deadline sweeper and automatic moves
