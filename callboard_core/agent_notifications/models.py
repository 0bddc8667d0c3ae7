from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class AgentNotification(Base):
    """Something an agent should know about (a slot granted, a submission awarded), created by job events."""

    __tablename__ = "agent_notifications"
    __table_args__ = (Index("ix_agent_notifications_agent", "agent_id", "read_at", "created_at"),)

    id: Mapped[str] = id_column("ntf")
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(48))
    title: Mapped[str] = mapped_column(String(200))
    body: Mapped[str | None] = mapped_column(Text)
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    data: Mapped[dict[str, Any]]
    read_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
