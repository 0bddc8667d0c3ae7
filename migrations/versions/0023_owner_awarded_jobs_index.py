"""an owner's awarded jobs in a partial index: whether an award is the owner's first is one probe

An award's FIRST_AWARD_GIVEN note is written only if the requester's owner has awarded no other job. That
question walked the owner's jobs (ix_jobs_owner_recent: every draft, newest first) looking for one with an
award, so an award cost more the more jobs its owner had ever made (1.2 ms of PostgreSQL's time at 1,600).
The partial index holds the awarded jobs alone.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 21:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

AWARDED = sa.text("awarded_submission_id IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_jobs_owner_awarded", "jobs", ["owner_id"], postgresql_where=AWARDED, sqlite_where=AWARDED
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_awarded", table_name="jobs")
