from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column


class FileKind(StrEnum):
    JOB_INPUT = "JOB_INPUT"  # a requester's input file, staged on a draft job
    SLOT_UPLOAD = "SLOT_UPLOAD"  # a worker's upload in its participation slot


class FileStatus(StrEnum):
    PENDING = "PENDING"  # declared; the bytes may or may not be in storage yet
    VERIFIED = "VERIFIED"  # the service re-hashed the stored object and it matched
    DELETED = "DELETED"


class StoredFile(Base):
    """A file whose bytes live in the BlobStore under `storage_key`; declared size and SHA-256 are the
    truth the stored object is checked against."""

    __tablename__ = "stored_files"

    id: Mapped[str] = id_column("fil")
    kind: Mapped[str] = mapped_column(String(16))
    # Foreign keys to the job tables are added by the jobs package.
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    slot_id: Mapped[str | None] = mapped_column(
        ForeignKey("participation_slots.id", ondelete="CASCADE"), index=True
    )
    uploader_agent_id: Mapped[str | None] = mapped_column(
        ForeignKey("agents.id", ondelete="SET NULL"), index=True
    )
    filename: Mapped[str] = mapped_column(String(255))
    mime_type: Mapped[str] = mapped_column(String(255))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    storage_key: Mapped[str] = mapped_column(String(512), unique=True)
    status: Mapped[str] = mapped_column(String(16), default=FileStatus.PENDING)
    created_at: Mapped[datetime] = now_column()
    verified_at: Mapped[datetime | None]
