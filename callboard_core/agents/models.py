from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from callboard_core.db import Base, id_column, now_column


class AgentStatus(StrEnum):
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    SUSPENDED = "SUSPENDED"


class ClaimStatus(StrEnum):
    PROVISIONAL = "PROVISIONAL"
    CLAIMED = "CLAIMED"
    VERIFIED = "VERIFIED"


class Intent(StrEnum):
    REQUESTER = "REQUESTER"
    WORKER = "WORKER"
    BOTH = "BOTH"


class PricingModel(StrEnum):
    PER_CALL = "PER_CALL"
    PER_TASK = "PER_TASK"
    SUBSCRIPTION = "SUBSCRIPTION"
    CUSTOM = "CUSTOM"


class AuthMethod(StrEnum):
    API_KEY = "API_KEY"
    OAUTH2 = "OAUTH2"
    BEARER_TOKEN = "BEARER_TOKEN"
    NONE = "NONE"


class CapabilitySource(StrEnum):
    DECLARED = "declared"
    EARNED = "earned"
    GRANTED = "granted"


class Agent(Base):
    __tablename__ = "agents"
    __table_args__ = (Index("ix_agents_owner_status", "owner_id", "status"),)

    id: Mapped[str] = id_column("agt")
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    name: Mapped[str] = mapped_column(String(200))
    handle: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    endpoint_url: Mapped[str] = mapped_column(String(2048))
    pricing_model: Mapped[str] = mapped_column(String(16), default=PricingModel.PER_TASK)
    price_per_unit: Mapped[float] = mapped_column(Float, default=0)
    currency: Mapped[str] = mapped_column(String(3), default="usd")
    sla_response_ms: Mapped[float | None] = mapped_column(Float)
    sla_uptime_pct: Mapped[float | None] = mapped_column(Float)
    auth_method: Mapped[str] = mapped_column(String(16), default=AuthMethod.API_KEY)
    status: Mapped[str] = mapped_column(String(16), default=AgentStatus.ACTIVE)
    reputation_score: Mapped[float] = mapped_column(Float, default=0)
    total_tasks: Mapped[int] = mapped_column(Integer, default=0)
    success_rate: Mapped[float] = mapped_column(Float, default=0)
    avg_response_ms: Mapped[float] = mapped_column(Float, default=0)
    dispute_rate: Mapped[float] = mapped_column(Float, default=0)
    win_count: Mapped[int] = mapped_column(Integer, default=0)  # awards won (total_tasks counts completions)
    metadata_json: Mapped[dict[str, Any] | None]
    sample_input: Mapped[dict[str, Any] | None]
    sample_output: Mapped[dict[str, Any] | None]
    processor_account_id: Mapped[str | None] = mapped_column(String(64))
    processor_onboarding_complete: Mapped[bool] = mapped_column(Boolean, default=False)
    processor_charges_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    processor_payouts_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    # The marketplace ("bounty") profile.
    claim_status: Mapped[str] = mapped_column(String(16), default=ClaimStatus.PROVISIONAL)
    requester_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    worker_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    auto_publish_limit_cents: Mapped[int] = mapped_column(Integer, default=0)
    intent: Mapped[str] = mapped_column(String(16), default=Intent.BOTH)
    claimed_at: Mapped[datetime | None]
    verified_at: Mapped[datetime | None]
    is_house: Mapped[bool] = mapped_column(Boolean, default=False)
    trust_tier: Mapped[str | None] = mapped_column(String(32))
    featured: Mapped[bool] = mapped_column(Boolean, default=False)
    admin_notes: Mapped[str | None] = mapped_column(Text)
    archived_at: Mapped[datetime | None]
    deleted_at: Mapped[datetime | None]
    # Presence from heartbeats (agents/presence.py): 3 ONLINE, 2 DEGRADED, 0 OFFLINE or unknown, and when
    # the runtime holding it last beat (the sweep lowers a presence past its freshness window).
    presence_rank: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    presence_seen_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)

    capability_links: Mapped[list[AgentCapability]] = relationship(
        back_populates="agent",
        cascade="all, delete-orphan",
        lazy="selectin",
        order_by="AgentCapability.created_at",
    )

    @property
    def capability_slugs(self) -> list[str]:
        return [link.tag_slug for link in self.capability_links]


class AgentCapability(Base):
    """An agent's capability tag, with where it came from (declared, earned by winning, granted by staff)."""

    __tablename__ = "agent_capabilities"

    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True)
    tag_id: Mapped[str] = mapped_column(
        ForeignKey("capability_tags.id", ondelete="CASCADE"), primary_key=True
    )
    tag_slug: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(16), default=CapabilitySource.DECLARED)
    # Work done under this tag: admission ranks tagged applicants by reputation.
    completed_count: Mapped[int] = mapped_column(Integer, default=0)
    win_count: Mapped[int] = mapped_column(Integer, default=0)
    reputation: Mapped[float] = mapped_column(Float, default=0)  # forward-decayed (agents/reputation.py)
    presence_rank: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # the agent's, copied
    created_at: Mapped[datetime] = now_column()

    agent: Mapped[Agent] = relationship(back_populates="capability_links")

    __table_args__ = (Index("ix_agent_capabilities_tag", "tag_id", "agent_id"),)


class AgentClaimLink(Base):
    __tablename__ = "agent_claim_links"

    id: Mapped[str] = id_column("clm")
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = now_column()
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    claimed_by_user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))


class AgentEnrollToken(Base):
    __tablename__ = "agent_enroll_tokens"

    id: Mapped[str] = id_column("enr")
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = now_column()
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="SET NULL"))


class AgentHeartbeat(Base):
    """The latest heartbeat of one runtime of an agent (one row per agent and runtimeId)."""

    __tablename__ = "agent_heartbeats"
    __table_args__ = (UniqueConstraint("agent_id", "runtime_id"),)

    id: Mapped[str] = id_column("hbt")
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    runtime_id: Mapped[str] = mapped_column(String(128))
    role_mode: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="ONLINE")
    runtime: Mapped[str | None] = mapped_column(String(128))
    version: Mapped[str | None] = mapped_column(String(64))
    capabilities_json: Mapped[Any | None]
    metadata_json: Mapped[Any | None]
    current_bounty_id: Mapped[str | None] = mapped_column(String(64))
    current_participation_slot_id: Mapped[str | None] = mapped_column(String(64))
    current_action: Mapped[str | None] = mapped_column(String(256))
    last_error: Mapped[str | None] = mapped_column(Text)
    beat_count: Mapped[int] = mapped_column(Integer, default=1)
    last_seen_at: Mapped[datetime] = now_column()
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


# The public directory's orders (directory/service.py): presence, reputation, wins, completions, then id.
Index(
    "ix_agents_directory",
    Agent.presence_rank.desc(),
    Agent.reputation_score.desc(),
    Agent.win_count.desc(),
    Agent.total_tasks.desc(),
    Agent.id,
)
Index(
    "ix_agent_capabilities_directory",
    AgentCapability.tag_id,
    AgentCapability.presence_rank.desc(),
    AgentCapability.reputation.desc(),
    AgentCapability.win_count.desc(),
    AgentCapability.completed_count.desc(),
    AgentCapability.agent_id,
)
Index("ix_agents_presence_due", Agent.presence_seen_at)
