from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Boolean, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.security.permissions import Role


class UserStatus(StrEnum):
    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"
    DELETED = "DELETED"


class SignupIntent(StrEnum):
    UNDECIDED = "UNDECIDED"
    BUYER = "BUYER"
    SELLER = "SELLER"
    BOTH = "BOTH"


class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = id_column("usr")
    email: Mapped[str] = mapped_column(String(320), unique=True)
    username: Mapped[str | None] = mapped_column(String(64), unique=True)
    name: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16), default=Role.USER)
    status: Mapped[str] = mapped_column(String(16), default=UserStatus.ACTIVE)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    email_verified_at: Mapped[datetime | None]
    preview_access: Mapped[bool] = mapped_column(Boolean, default=False)
    waitlist_status: Mapped[str | None] = mapped_column(String(16))
    # Onboarding profile; profile_set_at stays null until the person first fills it in.
    company: Mapped[str | None] = mapped_column(String(200))
    industry: Mapped[str | None] = mapped_column(String(200))
    role_title: Mapped[str | None] = mapped_column(String(200))
    signup_intent: Mapped[str] = mapped_column(String(16), default=SignupIntent.UNDECIDED)
    use_case: Mapped[str | None] = mapped_column(Text)
    profile_set_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
    deleted_at: Mapped[datetime | None]


class LegalConsent(Base):
    __tablename__ = "legal_consents"

    id: Mapped[str] = id_column("lgc")
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    terms_version: Mapped[str] = mapped_column(String(32))
    privacy_version: Mapped[str] = mapped_column(String(32))
    ip_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    accepted_at: Mapped[datetime] = now_column()
