"""Setup links and their starts (one row per hosted flow the owner started)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.setup_links.states import SetupLinkStatus


class SetupLink(Base):
    """Only the hash of the URL's code is stored (the URL is shown once, at creation, like a claim link).
    `processor_account_id`: the payout account a PAYOUT link onboards (set at its first start)."""

    __tablename__ = "setup_links"
    __table_args__ = (
        Index("ix_setup_links_agent", "agent_id", "created_at"),
        Index("ix_setup_links_account", "processor_account_id"),
    )

    id: Mapped[str] = id_column("stl")
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))  # the agent's owner
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=SetupLinkStatus.PENDING)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime]
    start_count: Mapped[int] = mapped_column(Integer, default=0)
    processor_account_id: Mapped[str | None] = mapped_column(String(255))
    completed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class SetupLinkStart(Base):
    """One hosted flow: a card setup (`processor_ref` its checkout session id, `setup_intent_id` when the
    processor tells it) or an account onboarding link (`processor_ref` the account id)."""

    __tablename__ = "setup_link_starts"
    __table_args__ = (
        Index("ix_setup_link_starts_ref", "processor_ref"),
        Index("ix_setup_link_starts_intent", "setup_intent_id"),
    )

    id: Mapped[str] = id_column("sls")
    setup_link_id: Mapped[str] = mapped_column(ForeignKey("setup_links.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    processor_ref: Mapped[str] = mapped_column(String(255))
    setup_intent_id: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = now_column()
