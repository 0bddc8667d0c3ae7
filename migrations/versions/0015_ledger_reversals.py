"""a reversal is its own ledger transaction kind, linked to the transaction it reverses

`ledger_transactions.reverses_id`: the transaction a PAYOUT_REVERSED (a transfer the processor took back)
undoes. A reference by id, not a foreign key, like the ledger's other references (and an ADD COLUMN keeps
SQLite's triggers on the table, where a batch copy would drop them). Reversals posted before this release
stay as they were written (PAYOUT_FAILED with `metadata.reversal`): posted rows never change.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 06:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("ledger_transactions", sa.Column("reverses_id", sa.String(length=40), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE ledger_transactions DROP COLUMN reverses_id")
