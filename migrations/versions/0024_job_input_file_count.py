"""a draft's staged input files counted on its job row: a publish's locked read sees one staged meanwhile

Staging an input file read the draft without its lock, and the publish learned whether the draft had input
files from an EXISTS in its locked read. On PostgreSQL a publish waiting for the job's lock re-reads the
job's row once it is free, but a sub-select still sees the statement's snapshot: a file staged while the
publish ran could miss the publish's check and stay PENDING on a published job. Staging (and removing) an
input file now takes the job's lock and moves this count on its row, which the publish reads instead.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29 04:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("input_file_count", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    # The files each job already has, as `files.list_for_job` lists them (input files not deleted).
    op.execute(
        "UPDATE jobs SET input_file_count = (SELECT count(*) FROM stored_files WHERE stored_files.job_id ="
        " jobs.id AND stored_files.kind = 'JOB_INPUT' AND stored_files.status != 'DELETED')"
        " WHERE EXISTS (SELECT 1 FROM stored_files WHERE stored_files.job_id = jobs.id"
        " AND stored_files.kind = 'JOB_INPUT')"
    )


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite 3.35 and later have it): no copy of the jobs table, whose children would
    # otherwise see it dropped.
    op.drop_column("jobs", "input_file_count")
