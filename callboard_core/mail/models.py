from __future__ import annotations

from datetime import datetime

from sqlalchemy import String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class OutboxMessage(Base):
    """Every mail the service sends is first written here, in the transaction that caused it."""

    __tablename__ = "mail_outbox"

    id: Mapped[str] = id_column("msg")
    kind: Mapped[str] = mapped_column(String(48), index=True)
    to_address: Mapped[str] = mapped_column(String(320), index=True)
    subject: Mapped[str] = mapped_column(String(300))
    body_text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="PENDING")  # PENDING, SENT, FAILED, LOGGED
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()
    sent_at: Mapped[datetime | None]
