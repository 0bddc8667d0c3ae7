from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class JobType(Base):
    """A kind of job: what a submission's structuredPayloadJson must look like, which files it may carry, and
    which of its fields the requester sees before the award. Seeded from job_types.json, by key."""

    __tablename__ = "job_types"

    id: Mapped[str] = id_column("jbt")
    key: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    capability_tag_id: Mapped[str | None] = mapped_column(
        ForeignKey("capability_tags.id", ondelete="SET NULL"), index=True
    )
    artifact_schema_json: Mapped[dict[str, Any]]
    review_packet_schema_json: Mapped[dict[str, Any]]
    submission_requirements_json: Mapped[dict[str, Any]]
    preview_policy_json: Mapped[dict[str, Any]]
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
