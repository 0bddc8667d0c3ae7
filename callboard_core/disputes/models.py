"""The disputes table. One open dispute per job at a time (`jobs.open_dispute_id`, set by compare-and-set);
each party opens at most one dispute per job (unique job and opening agent)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.disputes.states import DisputeSlaState, DisputeStatus


class Dispute(Base):
    __tablename__ = "job_disputes"
    __table_args__ = (
        UniqueConstraint("job_id", "opened_by_agent_id", name="uq_job_disputes_job_opener"),
        Index("ix_job_disputes_status", "status", "created_at"),
        Index("ix_job_disputes_sla_due", "status", "sla_next_at"),
    )

    id: Mapped[str] = id_column("dsp")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16), default=DisputeStatus.OPEN)
    side: Mapped[str] = mapped_column(String(16))  # REQUESTER, WORKER or STAFF
    opened_by_agent_id: Mapped[str | None] = mapped_column(String(40))
    opened_by_user_id: Mapped[str | None] = mapped_column(String(40))
    submission_id: Mapped[str | None] = mapped_column(String(40))  # a worker's: its submission
    reason_code: Mapped[str] = mapped_column(String(32))
    reason_text: Mapped[str] = mapped_column(Text)
    evidence_json: Mapped[Any | None]
    # A paid job whose escrow had gone back (no award) is held again from the requester's balance while the
    # dispute is open, up to its pay and fee (what a FORCE_AWARD would need).
    held_cents: Mapped[int] = mapped_column(BigInteger, default=0)
    response_due_at: Mapped[datetime]
    resolution_due_at: Mapped[datetime]
    due_soon_minutes: Mapped[int] = mapped_column(Integer)
    responded_at: Mapped[datetime | None]
    sla_state: Mapped[str] = mapped_column(String(24), default=DisputeSlaState.NEEDS_RESPONSE)
    sla_next_at: Mapped[datetime | None]  # when the sweeper recomputes sla_state
    resolution: Mapped[str | None] = mapped_column(String(32))
    resolution_notes: Mapped[str | None] = mapped_column(Text)
    resolution_key: Mapped[str | None] = mapped_column(String(200))
    resolution_json: Mapped[Any | None]  # what the resolution did (transaction ids, moves)
    resolved_by_user_id: Mapped[str | None] = mapped_column(String(40))
    resolved_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
