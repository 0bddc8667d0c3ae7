"""job payments: one row per paid job (escrow at publish, capture at award, release otherwise) and the
platform fee recorded on the job at publish

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 14:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import callboard_core.db.base

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    when = callboard_core.db.base.UTCDateTime(timezone=True)
    op.add_column("jobs", sa.Column("platform_fee_cents", sa.BigInteger(), nullable=True))
    op.create_table(
        "job_payments",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("requester_agent_id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("pay_cents", sa.BigInteger(), nullable=False),
        sa.Column("fee_cents", sa.BigInteger(), nullable=False),
        sa.Column("fee_bps", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("missing", callboard_core.db.base.JSONType, nullable=False),
        sa.Column("confirmed_total_cents", sa.BigInteger(), nullable=True),
        sa.Column("confirmed_at", when, nullable=True),
        sa.Column("autotopup_attempt", sa.Integer(), nullable=False),
        sa.Column("autotopup_pending_cents", sa.BigInteger(), nullable=True),
        sa.Column("autotopup_charge_id", sa.String(length=255), nullable=True),
        sa.Column("autotopup_status", sa.String(length=32), nullable=True),
        sa.Column("reserve_transaction_id", sa.String(length=40), nullable=True),
        sa.Column("capture_transaction_id", sa.String(length=40), nullable=True),
        sa.Column("release_transaction_id", sa.String(length=40), nullable=True),
        sa.Column("worker_agent_id", sa.String(length=40), nullable=True),
        sa.Column("worker_owner_id", sa.String(length=40), nullable=True),
        sa.Column("reserved_at", when, nullable=True),
        sa.Column("captured_at", when, nullable=True),
        sa.Column("released_at", when, nullable=True),
        sa.Column("created_at", when, nullable=False),
        sa.Column("updated_at", when, nullable=False),
        sa.CheckConstraint(
            "pay_cents > 0 AND fee_cents >= 0 AND fee_bps >= 0", name=op.f("ck_job_payments_amounts_valid")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_payments_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_payments")),
        sa.UniqueConstraint("job_id", name=op.f("uq_job_payments_job_id")),
    )
    op.create_index("ix_job_payments_user_reserved", "job_payments", ["user_id", "reserved_at"])
    op.create_index("ix_job_payments_agent_reserved", "job_payments", ["requester_agent_id", "reserved_at"])


def downgrade() -> None:
    op.drop_index("ix_job_payments_agent_reserved", table_name="job_payments")
    op.drop_index("ix_job_payments_user_reserved", table_name="job_payments")
    op.drop_table("job_payments")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("platform_fee_cents")
