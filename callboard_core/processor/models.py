"""`processor_events`, for both adapters: every webhook event the app received (the event id is unique),
written in the same transaction as its handlers' effects, so an event is handled exactly once. (The
sandbox's own tables are in `processor/sandbox/models.py`.)
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, UTCDateTime, id_column, now_column


class ProcessorEventRecord(Base):
    """A webhook event received (both adapters). `handled_at` is set when handlers ran; an event of a type
    nobody handles is recorded with it null."""

    __tablename__ = "processor_events"

    id: Mapped[str] = id_column("pev")
    event_id: Mapped[str] = mapped_column(String(255), unique=True)
    type: Mapped[str] = mapped_column(String(80))
    received_at: Mapped[datetime] = now_column()
    handled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
