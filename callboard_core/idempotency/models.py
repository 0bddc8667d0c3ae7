from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class IdempotencyRecord(Base):
    __tablename__ = "idempotency_records"
    __table_args__ = (UniqueConstraint("scope", "key"),)

    id: Mapped[str] = id_column("idk")
    scope: Mapped[str] = mapped_column(String(128))
    key: Mapped[str] = mapped_column(String(255))
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(2048))
    request_hash: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), default="IN_PROGRESS")  # IN_PROGRESS, COMPLETED
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[str | None] = mapped_column(Text)
    response_headers: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = now_column()
    locked_until: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)
