from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class UserSession(Base):
    """A browser session. Only the token's hash is stored; the cookie carries the token."""

    __tablename__ = "user_sessions"

    id: Mapped[str] = id_column("ses")
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    ip_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = now_column()
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class MagicLink(Base):
    __tablename__ = "magic_links"

    id: Mapped[str] = id_column("mgl")
    email: Mapped[str] = mapped_column(String(320), index=True)
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    purpose: Mapped[str] = mapped_column(String(32), default="sign_in")
    next_url: Mapped[str | None] = mapped_column(String(2048))
    # Sign-up details carried until the link is used (legal acceptance, profile fields).
    signup: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = now_column()
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
