"""an owner's unread notifications counted from an index alone (the console's header on every page)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 18:45:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_owner_notifications_unread", "owner_notifications", ["owner_id", "channel", "read_at"])


def downgrade() -> None:
    op.drop_index("ix_owner_notifications_unread", table_name="owner_notifications")
