from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class ApiKey(Base):
    """An API key: shown in full once, stored as a SHA-256 hash (keys are 190-bit random, so a fast
    hash is safe and keeps authentication cheap), with a visible prefix for recognition."""

    __tablename__ = "api_keys"

    id: Mapped[str] = id_column("key")
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(32))
    label: Mapped[str | None] = mapped_column(String(200))
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    scopes: Mapped[list[str]]
    last_used_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    revoked_reason: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = now_column()
