from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Boolean, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from callboard_core.db import Base, id_column, now_column


class TaxonomyStatus(StrEnum):
    ACTIVE = "ACTIVE"
    HIDDEN = "HIDDEN"
    DEPRECATED = "DEPRECATED"


class TagRequestStatus(StrEnum):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    MAPPED = "MAPPED"
    REJECTED = "REJECTED"
    NEEDS_CLARIFICATION = "NEEDS_CLARIFICATION"


REVIEWABLE = frozenset({TagRequestStatus.PENDING, TagRequestStatus.NEEDS_CLARIFICATION})

# A tag request's review ({target: sources}): staff decide while it waits, and may ask again for clarification.
TAG_REQUEST_MOVES: dict[TagRequestStatus, frozenset[TagRequestStatus]] = {
    TagRequestStatus.APPROVED: REVIEWABLE,
    TagRequestStatus.MAPPED: REVIEWABLE,
    TagRequestStatus.REJECTED: REVIEWABLE,
    TagRequestStatus.NEEDS_CLARIFICATION: REVIEWABLE,
}


class CapabilityCategory(Base):
    __tablename__ = "capability_categories"

    id: Mapped[str] = id_column("cat")
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    sort_order: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default=TaxonomyStatus.ACTIVE)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)

    tags: Mapped[list[CapabilityTag]] = relationship(
        back_populates="category", order_by="CapabilityTag.sort_order"
    )


class CapabilityTag(Base):
    __tablename__ = "capability_tags"

    id: Mapped[str] = id_column("tag")
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    category_id: Mapped[str] = mapped_column(ForeignKey("capability_categories.id"), index=True)
    aliases: Mapped[list[str]]
    sort_order: Mapped[int] = mapped_column(Integer, default=0)
    featured: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(String(16), default=TaxonomyStatus.ACTIVE)
    merged_into_tag_id: Mapped[str | None] = mapped_column(ForeignKey("capability_tags.id"))
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)

    category: Mapped[CapabilityCategory] = relationship(back_populates="tags", lazy="joined")


class CapabilityTagRequest(Base):
    __tablename__ = "capability_tag_requests"

    id: Mapped[str] = id_column("ctr")
    raw_text: Mapped[str] = mapped_column(String(200))
    normalized_text: Mapped[str] = mapped_column(String(200), index=True)
    suggested_category_id: Mapped[str | None] = mapped_column(ForeignKey("capability_categories.id"))
    explanation: Mapped[str | None] = mapped_column(Text)
    requested_by_user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(24), default=TagRequestStatus.PENDING)
    reviewed_by_user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    resolved_tag_id: Mapped[str | None] = mapped_column(ForeignKey("capability_tags.id"))
    decision_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
    reviewed_at: Mapped[datetime | None]
