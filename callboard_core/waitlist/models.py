from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class WaitlistStatus(StrEnum):
    PENDING = "PENDING"
    INVITED = "INVITED"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    DELETED = "DELETED"


W = WaitlistStatus
_ANY = frozenset(WaitlistStatus)

# The signup's moves, one table each ({target: sources}); service.py drives them by compare-and-set.
WAITLIST_MOVES: dict[str, dict[WaitlistStatus, frozenset[WaitlistStatus]]] = {
    # Staff may set any status from any status (DELETED is the soft delete; leaving it restores the signup).
    "update": {target: _ANY for target in WaitlistStatus},
    "delete": {W.DELETED: _ANY - {W.DELETED}},
    # INVITED again resends the invitation.
    "convert": {W.INVITED: frozenset({W.APPROVED, W.INVITED})},
}


class WaitlistRole(StrEnum):
    BUYER = "BUYER"
    SELLER = "SELLER"
    BOTH = "BOTH"


class WaitlistSignup(Base):
    __tablename__ = "waitlist_signups"

    id: Mapped[str] = id_column("wls")
    email: Mapped[str] = mapped_column(String(320), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    use_case: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(String(16))
    company: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), default=WaitlistStatus.PENDING)
    notes: Mapped[str | None] = mapped_column(Text)
    notified_at: Mapped[datetime | None]
    deleted_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
