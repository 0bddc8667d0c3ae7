"""commercial documents' links named for what they hold

`bounty_id`, `bounty_payment_id`, `bounty_payout_id`, `bounty_settlement_entry_id` become `job_id`,
`job_payment_id`, `payout_id`, `settlement_entry_id` (the wire keeps the spec's `bountyId`, ...). A plain
RENAME COLUMN on both databases: no row is rewritten (documents are immutable: their UPDATE trigger never
fires), and on SQLite the table is not copied, so its trigger stays.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 08:10:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RENAMES = (
    ("bounty_id", "job_id"),
    ("bounty_payment_id", "job_payment_id"),
    ("bounty_payout_id", "payout_id"),
    ("bounty_settlement_entry_id", "settlement_entry_id"),
)


def upgrade() -> None:
    for old, new in RENAMES:
        op.execute(f"ALTER TABLE commercial_documents RENAME COLUMN {old} TO {new}")


def downgrade() -> None:
    for old, new in RENAMES:
        op.execute(f"ALTER TABLE commercial_documents RENAME COLUMN {new} TO {old}")
