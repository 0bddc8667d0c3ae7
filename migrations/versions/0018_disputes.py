"""disputes: the dispute table, the job's open dispute and staff archive, a payment's refunds, balance refunds, the audit entry's role and request

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 10:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import callboard_core.db.base

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIME = callboard_core.db.base.UTCDateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job_disputes",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("side", sa.String(length=16), nullable=False),
        sa.Column("opened_by_agent_id", sa.String(length=40), nullable=True),
        sa.Column("opened_by_user_id", sa.String(length=40), nullable=True),
        sa.Column("submission_id", sa.String(length=40), nullable=True),
        sa.Column("reason_code", sa.String(length=32), nullable=False),
        sa.Column("reason_text", sa.Text(), nullable=False),
        sa.Column("evidence_json", JSON, nullable=True),
        sa.Column("held_cents", sa.BigInteger(), nullable=False),
        sa.Column("response_due_at", TIME, nullable=False),
        sa.Column("resolution_due_at", TIME, nullable=False),
        sa.Column("due_soon_minutes", sa.Integer(), nullable=False),
        sa.Column("responded_at", TIME, nullable=True),
        sa.Column("sla_state", sa.String(length=24), nullable=False),
        sa.Column("sla_next_at", TIME, nullable=True),
        sa.Column("resolution", sa.String(length=32), nullable=True),
        sa.Column("resolution_notes", sa.Text(), nullable=True),
        sa.Column("resolution_key", sa.String(length=200), nullable=True),
        sa.Column("resolution_json", JSON, nullable=True),
        sa.Column("resolved_by_user_id", sa.String(length=40), nullable=True),
        sa.Column("resolved_at", TIME, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "opened_by_agent_id", name="uq_job_disputes_job_opener"),
    )
    op.create_index("ix_job_disputes_job_id", "job_disputes", ["job_id"])
    op.create_index("ix_job_disputes_status", "job_disputes", ["status", "created_at"])
    op.create_index("ix_job_disputes_sla_due", "job_disputes", ["status", "sla_next_at"])
    op.create_table(
        "balance_refunds",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("request_key", sa.String(length=200), nullable=False),
        sa.Column("source_transaction_id", sa.String(length=40), nullable=False),
        sa.Column("processor_payment_ref", sa.String(length=255), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("processor_refund_id", sa.String(length=255), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("staff_user_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint("amount_cents > 0", name=op.f("ck_balance_refunds_amount_positive")),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_balance_refunds_request", "balance_refunds", ["request_key"])
    op.create_index("ix_balance_refunds_source", "balance_refunds", ["source_transaction_id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("open_dispute_id", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("staff_archived_at", TIME, nullable=True))
        batch.create_index("ix_jobs_open_dispute_id", ["open_dispute_id"])
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("actor_role", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("request_id", sa.String(length=128), nullable=True))
    with op.batch_alter_table("job_payments") as batch:
        batch.add_column(sa.Column("refund_transaction_id", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("refunded_cents", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("refunded_at", TIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_column("request_id")
        batch.drop_column("actor_role")
    with op.batch_alter_table("job_payments") as batch:
        batch.drop_column("refunded_at")
        batch.drop_column("refunded_cents")
        batch.drop_column("refund_transaction_id")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_open_dispute_id")
        batch.drop_column("staff_archived_at")
        batch.drop_column("open_dispute_id")
    op.drop_index("ix_balance_refunds_source", table_name="balance_refunds")
    op.drop_index("ix_balance_refunds_request", table_name="balance_refunds")
    op.drop_table("balance_refunds")
    op.drop_index("ix_job_disputes_sla_due", table_name="job_disputes")
    op.drop_index("ix_job_disputes_status", table_name="job_disputes")
    op.drop_index("ix_job_disputes_job_id", table_name="job_disputes")
    op.drop_table("job_disputes")
