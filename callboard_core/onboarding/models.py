from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class SessionStatus(StrEnum):
    PENDING = "PENDING"  # minted; the agent has not shown up yet
    IN_PROGRESS = "IN_PROGRESS"  # the agent reported presence or saved its setup
    ACTIVATED = "ACTIVATED"
    DISMISSED = "DISMISSED"


class DraftStatus(StrEnum):
    DRAFT = "DRAFT"  # made from a manifest, no owner yet
    CLAIMED = "CLAIMED"  # a signed-in owner holds it; still under review
    ACTIVATED = "ACTIVATED"


_S, _D = SessionStatus, DraftStatus
SESSION_OPEN = frozenset({_S.PENDING, _S.IN_PROGRESS})

# The session's moves, one table each ({target: sources}); sessions.py drives them by compare-and-set.
# "edit" and "claim" keep the state (each source is its own target): they only say from where they may run.
SESSION_MOVES: dict[str, dict[SessionStatus, frozenset[SessionStatus]]] = {
    "edit": {state: frozenset({state}) for state in SESSION_OPEN},  # the owner's proposal edits
    "agent_save": {_S.IN_PROGRESS: SESSION_OPEN},  # the agent's presence or setup save
    "dismiss": {_S.DISMISSED: SESSION_OPEN},
    "activate": {_S.ACTIVATED: SESSION_OPEN},
    "claim": {state: frozenset({state}) for state in SessionStatus if state != _S.DISMISSED},
}

# The registration draft's moves; drafts.py drives them.
DRAFT_MOVES: dict[str, dict[DraftStatus, frozenset[DraftStatus]]] = {
    "claim": {_D.CLAIMED: frozenset({_D.DRAFT})},
    "edit": {_D.DRAFT: frozenset({_D.DRAFT}), _D.CLAIMED: frozenset({_D.CLAIMED})},  # setup, agent link
    "activate": {_D.ACTIVATED: frozenset({_D.CLAIMED})},
}


class ActivationSource(StrEnum):
    ONBOARDING_SESSION = "onboarding_session"
    REGISTRATION_DRAFT = "registration_draft"


class OnboardingSession(Base):
    """An owner-minted onboarding session. The agent holds a one-hour bearer token (hashed here);
    the session itself stays actionable for the owner after the token expires.

    `data` holds the owner's request from the mint (`request`), the agent's proposal (`draft`) and the
    latest presence ping (`presence`): free-form drafts, never queried."""

    __tablename__ = "onboarding_sessions"

    id: Mapped[str] = id_column("onb")
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_expires_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(24), default=SessionStatus.PENDING)
    data: Mapped[dict[str, Any] | None]
    last_seen_at: Mapped[datetime | None]
    reviewed_at: Mapped[datetime | None]
    activated_at: Mapped[datetime | None]
    dismissed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class RegistrationDraft(Base):
    """An agent's self-registration from a manifest, with no human account. The agent holds the draft's
    bearer token (hashed here); a signed-in owner claims the draft with that token, then activates it."""

    __tablename__ = "registration_drafts"

    id: Mapped[str] = id_column("rgd")
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_expires_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(24), default=DraftStatus.DRAFT)
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # An existing agent of the owner that activation configures instead of creating one (claim `agentId`).
    linked_agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="SET NULL"))
    manifest: Mapped[dict[str, Any]]
    data: Mapped[dict[str, Any] | None]
    last_seen_at: Mapped[datetime | None]
    claimed_at: Mapped[datetime | None]
    activated_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class OnboardingActivation(Base):
    """What the owner decided at activation: the runtime target and the policy, as sent or resolved.
    One per session or draft (unique), so two racing activations cannot both create an agent."""

    __tablename__ = "onboarding_activations"

    id: Mapped[str] = id_column("act")
    source: Mapped[str] = mapped_column(String(32))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="SET NULL"), index=True)
    onboarding_session_id: Mapped[str | None] = mapped_column(
        ForeignKey("onboarding_sessions.id", ondelete="CASCADE"), unique=True
    )
    registration_draft_id: Mapped[str | None] = mapped_column(
        ForeignKey("registration_drafts.id", ondelete="CASCADE"), unique=True
    )
    runtime_target: Mapped[str] = mapped_column(String(32))
    activation_mode: Mapped[str] = mapped_column(String(16))
    enable_buyer: Mapped[bool] = mapped_column(Boolean)
    approve_seller_listing: Mapped[bool] = mapped_column(Boolean)
    is_test_mode: Mapped[bool] = mapped_column(Boolean)
    buyer_intent: Mapped[str | None] = mapped_column(Text)
    max_spend_cents_per_task: Mapped[int] = mapped_column(Integer)
    max_spend_cents_per_day: Mapped[int] = mapped_column(Integer)
    require_approval_over_cents: Mapped[int] = mapped_column(Integer)
    allowed_buyer_capabilities: Mapped[list[str]]
    seller_autonomy: Mapped[str] = mapped_column(String(32))
    seller_endpoint_url: Mapped[str | None] = mapped_column(String(2048))
    availability: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = now_column()


class InstallToken(Base):
    """A short-lived, single-use token for `callboard kit install` (hashed here). Its exchange mints a
    fresh read+write key for the activated agent; `api_key_id` names that key once used."""

    __tablename__ = "install_tokens"

    id: Mapped[str] = id_column("itk")
    activation_id: Mapped[str] = mapped_column(
        ForeignKey("onboarding_activations.id", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    api_key_id: Mapped[str | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = now_column()
