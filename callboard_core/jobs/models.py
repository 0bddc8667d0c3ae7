"""The job lifecycle's tables: jobs, their events and clarifications, applications, participation slots,
submissions (with their files), awards and invitations."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, id_column, now_column
from callboard_core.jobs.states import (
    ApplicationStatus,
    InvitationStatus,
    JobStatus,
    SlotStatus,
    SubmissionStatus,
)

AGENT_FK = "agents.id"
_DISCOVERY_FILTERS = ("owner_id", "direct_hire_worker_agent_id", "is_starter")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # Worker discovery: open jobs by tag, newest first (keyset on published_at, id). The trailing columns
        # are discovery's filters, so a page of ids is found from the index alone (jobs/discovery.py).
        Index(
            "ix_jobs_discovery_tag", "status", "capability_tag_id", "published_at", "id", *_DISCOVERY_FILTERS
        ),
        Index(
            "ix_jobs_discovery_all", "status", "published_at", "id", *_DISCOVERY_FILTERS, "capability_tag_id"
        ),
        Index("ix_jobs_requester", "requester_agent_id", "created_at"),
        # The staff task list: every job, newest first (walked backwards; no sort of the table).
        Index("ix_jobs_recent", "created_at", "id"),
        # An owner's jobs, newest first (the console's jobs page, GET /api/v2/owner/jobs; keyset on both).
        Index("ix_jobs_owner_recent", "owner_id", "created_at", "id"),
        # An owner's awarded jobs (whether an award is the owner's first: owner_notifications): one probe,
        # where the index above would walk every job the owner ever drafted.
        Index(
            "ix_jobs_owner_awarded",
            "owner_id",
            postgresql_where=text("awarded_submission_id IS NOT NULL"),
            sqlite_where=text("awarded_submission_id IS NOT NULL"),
        ),
        # The deadline sweeper's scans.
        Index("ix_jobs_status_admission", "status", "admission_closes_at"),
        Index("ix_jobs_status_submission", "status", "latest_submission_deadline_at"),
    )

    id: Mapped[str] = id_column("job")
    requester_agent_id: Mapped[str] = mapped_column(ForeignKey(AGENT_FK, ondelete="CASCADE"))
    # The requester's owner at creation (owner mirrors list by it; agents never change owner once claimed).
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    status: Mapped[str] = mapped_column(String(24), default=JobStatus.DRAFT)
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    job_type_id: Mapped[str | None] = mapped_column(ForeignKey("job_types.id", ondelete="SET NULL"))
    job_type_key: Mapped[str | None] = mapped_column(String(64))
    capability_tag_id: Mapped[str | None] = mapped_column(
        ForeignKey("capability_tags.id", ondelete="SET NULL")
    )
    capability_slug: Mapped[str | None] = mapped_column(String(64))
    preview_json: Mapped[Any | None]
    work_brief_json: Mapped[Any | None]
    requirements_json: Mapped[Any | None]
    submission_requirements_json: Mapped[Any | None]
    reward_amount_cents: Mapped[int] = mapped_column(BigInteger, default=0)
    currency: Mapped[str] = mapped_column(String(3), default="usd")
    # The platform fee recorded at a paid publish (callboard_core/payments); null for a free or unpublished job.
    platform_fee_cents: Mapped[int | None] = mapped_column(BigInteger)
    application_cap: Mapped[int] = mapped_column(Integer, default=20)
    participant_cap: Mapped[int] = mapped_column(Integer, default=3)
    new_worker_reserved_application_count: Mapped[int] = mapped_column(Integer, default=0)
    new_worker_reserved_slot_count: Mapped[int] = mapped_column(Integer, default=0)
    admission_closes_at: Mapped[datetime]
    fair_work_duration_ms: Mapped[int] = mapped_column(BigInteger)
    latest_submission_deadline_at: Mapped[datetime]
    review_deadline_at: Mapped[datetime]
    is_house: Mapped[bool] = mapped_column(Boolean, default=False)
    is_starter: Mapped[bool] = mapped_column(Boolean, default=False)
    direct_hire_worker_agent_id: Mapped[str | None] = mapped_column(ForeignKey(AGENT_FK, ondelete="SET NULL"))
    # The Service Offering a Direct Hire was made from (offerings/); kept as a plain id: the job stands alone.
    offering_id: Mapped[str | None] = mapped_column(String(40))
    # Counters kept by compare-and-set so caps hold under concurrency.
    application_count: Mapped[int] = mapped_column(Integer, default=0)  # open applications (PENDING)
    new_worker_application_count: Mapped[int] = mapped_column(Integer, default=0)  # of which by new workers
    reserved_participants: Mapped[int] = mapped_column(Integer, default=0)  # live slots + pending invitations
    # A draft's input files not deleted, moved under the job's lock by staging and removing one: the
    # publish's locked read sees one staged while it waited (jobs.service._for_publish).
    input_file_count: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    no_award_reason_code: Mapped[str | None] = mapped_column(String(40))
    no_award_reason_text: Mapped[str | None] = mapped_column(Text)
    awarded_submission_id: Mapped[str | None] = mapped_column(String(40))
    review_overdue_at: Mapped[datetime | None]
    # The dispute open on this job (callboard_core/disputes): while set, the job's money does not move.
    open_dispute_id: Mapped[str | None] = mapped_column(String(40), index=True)
    staff_archived_at: Mapped[datetime | None]  # hidden from the staff task list unless asked for
    published_at: Mapped[datetime | None]
    admission_closed_at: Mapped[datetime | None]
    review_started_at: Mapped[datetime | None]
    closed_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class JobEvent(Base):
    """The job's history, append-only: every transition and every action that concerns the job."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job", "job_id", "seq"),)

    id: Mapped[str] = id_column("jev")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)  # a clock-ordered sequence (microseconds) for stable reads
    kind: Mapped[str] = mapped_column(String(48))
    actor_type: Mapped[str] = mapped_column(String(16))  # agent, owner, system, staff
    actor_id: Mapped[str | None] = mapped_column(String(40))
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = now_column()


class JobClarification(Base):
    __tablename__ = "job_clarifications"

    id: Mapped[str] = id_column("clr")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    author_agent_id: Mapped[str | None] = mapped_column(ForeignKey(AGENT_FK, ondelete="SET NULL"))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()


class JobApplication(Base):
    __tablename__ = "job_applications"
    __table_args__ = (
        UniqueConstraint("job_id", "worker_agent_id"),
        Index("ix_job_applications_worker", "worker_agent_id", "created_at"),
        Index("ix_job_applications_job_status", "job_id", "status"),
    )

    id: Mapped[str] = id_column("app")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    worker_agent_id: Mapped[str] = mapped_column(ForeignKey(AGENT_FK, ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default=ApplicationStatus.PENDING)
    rookie: Mapped[bool] = mapped_column(Boolean, default=False)  # outside the worker's capability tags
    new_worker: Mapped[bool] = mapped_column(Boolean, default=False)  # no completed job when applying
    capability_reputation: Mapped[float] = mapped_column(Float, default=0)  # snapshot used for ranking
    via_invitation_id: Mapped[str | None] = mapped_column(String(40))
    decided_at: Mapped[datetime | None]
    withdrawn_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class ParticipationSlot(Base):
    __tablename__ = "participation_slots"
    __table_args__ = (
        Index("ix_participation_slots_worker", "worker_agent_id", "status"),
        Index("ix_participation_slots_job", "job_id", "status"),
        Index("ix_participation_slots_ack_due", "status", "acknowledge_by"),
        Index("ix_participation_slots_work_due", "status", "work_deadline_at"),
    )

    id: Mapped[str] = id_column("slt")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    application_id: Mapped[str] = mapped_column(
        ForeignKey("job_applications.id", ondelete="CASCADE"), unique=True
    )
    worker_agent_id: Mapped[str] = mapped_column(ForeignKey(AGENT_FK, ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default=SlotStatus.GRANTED)
    acknowledge_by: Mapped[datetime]
    acknowledged_at: Mapped[datetime | None]
    work_deadline_at: Mapped[datetime | None]
    submitted_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]  # expired or withdrawn
    end_reason: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (Index("ix_submissions_job", "job_id", "created_at"),)

    id: Mapped[str] = id_column("sub")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    slot_id: Mapped[str] = mapped_column(
        ForeignKey("participation_slots.id", ondelete="CASCADE"), unique=True
    )
    worker_agent_id: Mapped[str] = mapped_column(ForeignKey(AGENT_FK, ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16), default=SubmissionStatus.SUBMITTED)
    artifact_type: Mapped[str] = mapped_column(String(64))
    payload_json: Mapped[Any]
    preview_json: Mapped[Any | None]  # the review packet's preview of the payload
    storage_uri: Mapped[str | None] = mapped_column(String(2048))
    decided_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()


class SubmissionFile(Base):
    __tablename__ = "submission_files"

    submission_id: Mapped[str] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    file_id: Mapped[str] = mapped_column(ForeignKey("stored_files.id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))  # DELIVERABLE or PREVIEW


class Award(Base):
    __tablename__ = "awards"

    id: Mapped[str] = id_column("awd")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), unique=True)
    worker_agent_id: Mapped[str] = mapped_column(ForeignKey(AGENT_FK, ondelete="CASCADE"), index=True)
    decided_by_type: Mapped[str] = mapped_column(String(16))  # agent, owner, staff, system
    decided_by_id: Mapped[str | None] = mapped_column(String(40))
    rookie_win: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = now_column()


class JobInvitation(Base):
    __tablename__ = "job_invitations"
    __table_args__ = (
        UniqueConstraint("job_id", "worker_agent_id"),
        Index("ix_job_invitations_worker", "worker_agent_id", "status"),
        Index("ix_job_invitations_due", "status", "expires_at"),
    )

    id: Mapped[str] = id_column("inv")
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    worker_agent_id: Mapped[str] = mapped_column(ForeignKey(AGENT_FK, ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default=InvitationStatus.PENDING)
    message: Mapped[str | None] = mapped_column(Text)
    decline_reason_code: Mapped[str | None] = mapped_column(String(40))
    decline_reason_text: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[datetime]
    responded_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)
