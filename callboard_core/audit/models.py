from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class AuditEvent(Base):
    __tablename__ = "audit_events"

    id: Mapped[str] = id_column("aud")
    actor_type: Mapped[str] = mapped_column(String(16))  # user, agent, system
    actor_id: Mapped[str | None] = mapped_column(String(40), index=True)
    actor_role: Mapped[str | None] = mapped_column(String(16))  # a person's role when they acted
    request_id: Mapped[str | None] = mapped_column(String(128))  # the request the action was made in
    action: Mapped[str] = mapped_column(String(64), index=True)
    target_type: Mapped[str] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(40), index=True)
    data: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = now_column(index=True)
