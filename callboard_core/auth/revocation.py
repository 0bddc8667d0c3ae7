"""What an unverified account's sessions made, undone when the address's real owner first verifies it.

An account whose email was never verified may carry a password set by whoever typed the address first. Such
an account can do nothing that creates a credential, an agent, a token or touches money (the front ends
refuse it: `email_unverified`), so normally there is nothing to undo. This is the second wall, for anything
made before that rule or by a path that slipped it: when the first verification comes from a browser that
is not the password setter's, every credential the account holds is revoked, every paid-publishing
allowance of its agents goes back to 0, and the owner is mailed the list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import Executable

from callboard_core import clock, states
from callboard_core.agents.models import Agent, AgentEnrollToken
from callboard_core.api_keys import service as api_keys
from callboard_core.audit import service as audit
from callboard_core.mail.service import Mail, Mailer
from callboard_core.onboarding.models import (
    SESSION_MOVES,
    InstallToken,
    OnboardingActivation,
    OnboardingSession,
    SessionStatus,
)
from callboard_core.setup_links.models import SetupLink
from callboard_core.setup_links.states import SetupLinkStatus
from callboard_core.users.models import User

REVOKED_REASON = "unverified_account"


@dataclass
class Revoked:
    """What was revoked, for the owner's mail and the audit row."""

    keys: list[str] = field(default_factory=list)  # key prefixes
    enroll_tokens: int = 0
    onboarding_sessions: int = 0
    install_tokens: int = 0
    setup_links: int = 0
    policies_reset: list[str] = field(default_factory=list)  # agent handles

    def __bool__(self) -> bool:
        return bool(
            self.keys
            or self.enroll_tokens
            or self.onboarding_sessions
            or self.install_tokens
            or self.setup_links
            or self.policies_reset
        )

    def lines(self) -> list[str]:
        out = [f"- API key {prefix}… revoked" for prefix in self.keys]
        counted = (
            (self.enroll_tokens, "unused agent enroll token(s) revoked"),
            (self.onboarding_sessions, "open onboarding session(s) dismissed, their agent tokens ended"),
            (self.install_tokens, "unused install token(s) revoked"),
            (self.setup_links, "open setup link(s) revoked"),
        )
        out += [f"- {count} {what}" for count, what in counted if count]
        out += [f"- agent @{handle}: paid auto-publish limit set back to 0" for handle in self.policies_reset]
        return out


async def _count(session: AsyncSession, statement: Executable) -> int:
    return int(getattr(await session.execute(statement), "rowcount", 0) or 0)


async def revoke_unverified_grants(session: AsyncSession, user: User) -> Revoked:
    """Revoke every credential and token the account holds and reset its agents' auto-publish limits."""
    done = await revoke_grants(session, user, REVOKED_REASON)
    if done:
        audit.record(
            session,
            actor_type="system",
            actor_id=None,
            action="user.unverified_grants_revoked",
            target_type="user",
            target_id=user.id,
            keys=done.keys,
            enroll_tokens=done.enroll_tokens,
            onboarding_sessions=done.onboarding_sessions,
            install_tokens=done.install_tokens,
            setup_links=done.setup_links,
            policies_reset=done.policies_reset,
        )
    return done


async def revoke_grants(session: AsyncSession, user: User, reason: str) -> Revoked:
    """Revoke every credential and token the account holds (its own keys and its agents', enroll tokens,
    onboarding sessions, install tokens, open setup links) and set its agents' auto-publish limits back
    to 0; what was revoked. The caller audits (the unverified account's second wall, a staff suspension)."""
    now = clock.now()
    done = Revoked()
    agent_ids = select(Agent.id).where(Agent.owner_id == user.id).scalar_subquery()
    done.keys = await api_keys.revoke_for_owner(session, user.id, reason=reason, agent_ids=agent_ids)
    done.enroll_tokens = await _count(
        session,
        update(AgentEnrollToken)
        .where(
            AgentEnrollToken.owner_id == user.id,
            AgentEnrollToken.used_at.is_(None),
            AgentEnrollToken.expires_at > now,
        )
        .values(expires_at=now),
    )
    done.onboarding_sessions = len(
        await states.compare_and_set_where(
            session,
            OnboardingSession,
            SESSION_MOVES["dismiss"],
            SessionStatus.DISMISSED,
            OnboardingSession.owner_id == user.id,
            dismissed_at=now,
            token_expires_at=now,
        )
    )
    await session.execute(
        update(OnboardingSession)
        .where(OnboardingSession.owner_id == user.id, OnboardingSession.token_expires_at > now)
        .values(token_expires_at=now)
    )
    done.install_tokens = await _count(
        session,
        update(InstallToken)
        .where(
            InstallToken.activation_id.in_(
                select(OnboardingActivation.id).where(OnboardingActivation.owner_id == user.id)
            ),
            InstallToken.used_at.is_(None),
            InstallToken.expires_at > now,
        )
        .values(expires_at=now),
    )
    done.setup_links = await _count(
        session,
        update(SetupLink)
        .where(
            SetupLink.user_id == user.id,
            SetupLink.status != SetupLinkStatus.COMPLETED,
            SetupLink.expires_at > now,
        )
        .values(expires_at=now),
    )
    done.policies_reset = list(
        (
            await session.execute(
                update(Agent)
                .where(Agent.owner_id == user.id, Agent.auto_publish_limit_cents > 0)
                .values(auto_publish_limit_cents=0, updated_at=now)
                .returning(Agent.handle)
                .execution_options(synchronize_session=False)
            )
        ).scalars()
    )
    return done


async def tell_owner(session: AsyncSession, mailer: Mailer, user: User, done: Revoked) -> None:
    """Mail the owner what was revoked and why."""
    body = (
        "Your email address was just verified for callboard. Before that, someone had set a password on "
        "this account without proving they own the address. That password is gone and its sessions have "
        "ended, and everything the account held was revoked:\n\n"
        + "\n".join(done.lines())
        + "\n\nIf you made these yourself from another browser, mint new keys and tokens now: nothing else "
        "changed. If you did not, nothing made by the other person works any more.\n"
    )
    await mailer.send(
        session, Mail("security_notice", user.email, "callboard: access revoked on your account", body)
    )
