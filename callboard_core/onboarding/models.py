from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class OnboardingSession(Base):
    """An owner-minted onboarding session. The agent holds a one-hour bearer token (hashed here);
    the session itself stays actionable for the owner after the token expires."""

    __tablename__ = "onboarding_sessions"

    id: Mapped[str] = id_column("onb")
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_expires_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(24), default="PENDING")
    data: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
