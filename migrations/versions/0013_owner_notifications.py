"""owner notifications: the per-owner log (one row per channel and event) and the owner's preferences

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

import callboard_core.db.base

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "owner_notifications",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner_id", sa.String(length=40), nullable=False),
        sa.Column("type", sa.String(length=48), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("event_key", sa.String(length=200), nullable=False),
        sa.Column("subject", sa.String(length=300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("action_url", sa.String(length=2048), nullable=True),
        sa.Column(
            "metadata_json", sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"), nullable=True
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("sent_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("read_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner_id", "type", "channel", "event_key", name="uq_owner_notifications_event"),
    )
    op.create_index("ix_owner_notifications_owner", "owner_notifications", ["owner_id", "channel", "created_at"])
    op.create_index("ix_owner_notifications_due", "owner_notifications", ["status", "next_attempt_at"])
    op.create_table(
        "owner_notification_preferences",
        sa.Column("owner_id", sa.String(length=40), nullable=False),
        sa.Column("type", sa.String(length=48), nullable=False),
        sa.Column("email_enabled", sa.Boolean(), nullable=False),
        sa.Column("in_app_enabled", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("owner_id", "type"),
    )


def downgrade() -> None:
    op.drop_table("owner_notification_preferences")
    op.drop_index("ix_owner_notifications_due", table_name="owner_notifications")
    op.drop_index("ix_owner_notifications_owner", table_name="owner_notifications")
    op.drop_table("owner_notifications")
