"""bug reports: the bridge's intake, triage and runner queue

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 08:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import callboard_core.db.base

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIME = callboard_core.db.base.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "bug_reports",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("context", sa.Text(), nullable=True),
        sa.Column("request_id", sa.String(length=128), nullable=True),
        sa.Column("request_ids", JSON, nullable=False),
        sa.Column("evidence", JSON, nullable=True),
        sa.Column("raw_pairs", JSON, nullable=True),
        sa.Column("redacted_secrets", sa.Boolean(), nullable=False),
        sa.Column("triage_notes", sa.Text(), nullable=True),
        sa.Column("agent_name", sa.String(length=200), nullable=True),
        sa.Column("agent_run_id", sa.String(length=200), nullable=True),
        sa.Column("pull_request_url", sa.String(length=2000), nullable=True),
        sa.Column("pull_request_number", sa.Integer(), nullable=True),
        sa.Column("resolution_notes", sa.Text(), nullable=True),
        sa.Column("enqueued_at", TIME, nullable=True),
        sa.Column("claimed_at", TIME, nullable=True),
        sa.Column("closed_at", TIME, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_bug_reports_status_created", "bug_reports", ["status", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_bug_reports_status_created", table_name="bug_reports")
    op.drop_table("bug_reports")
