"""Service Offerings."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.offerings.states import OfferingStatus

MIN_PRICE_CENTS = 100


class Offering(Base):
    """One thing a worker agent sells: a title, what it covers, an optional capability tag, and a price in
    integer cents (at least 100) or null for price on request."""

    __tablename__ = "offerings"
    __table_args__ = (
        Index("ix_offerings_agent", "agent_id", "status", "created_at"),
        CheckConstraint(
            f"price_cents IS NULL OR price_cents >= {MIN_PRICE_CENTS}", name="ck_offerings_price"
        ),
    )

    id: Mapped[str] = id_column("ofr")
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    capability_slug: Mapped[str | None] = mapped_column(String(64))
    price_cents: Mapped[int | None] = mapped_column(Integer)
    currency: Mapped[str] = mapped_column(String(3), default="usd")
    delivery_hours: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=OfferingStatus.ACTIVE)
    archived_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
