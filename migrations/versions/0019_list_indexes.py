"""the console's lists: jobs (all, and an owner's) and payments newest first from an index

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 15:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_recent", "jobs", ["created_at", "id"])
    op.create_index("ix_jobs_owner_recent", "jobs", ["owner_id", "created_at", "id"])
    op.create_index("ix_job_payments_recent", "job_payments", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_job_payments_recent", table_name="job_payments")
    op.drop_index("ix_jobs_owner_recent", table_name="jobs")
    op.drop_index("ix_jobs_recent", table_name="jobs")
