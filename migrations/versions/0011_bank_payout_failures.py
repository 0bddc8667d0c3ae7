"""payout accounts remember the processor's last failed bank payout (`payout.failed` on a Connect account)

Two nullable columns on payout_accounts; nothing else changes.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import callboard_core.db.base

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("payout_accounts") as batch:
        batch.add_column(sa.Column("bank_payout_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("bank_payout_failed_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("payout_accounts") as batch:
        batch.drop_column("bank_payout_failed_at")
        batch.drop_column("bank_payout_error")
