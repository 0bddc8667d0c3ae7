"""payout accounts, payouts and their attempts; setup links and their starts

Self-contained: new tables only (callboard_core/payouts/models.py, callboard_core/setup_links/models.py).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import callboard_core.db.base

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC = callboard_core.db.base.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "payout_accounts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("holder", sa.String(length=48), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("agent_id", sa.String(length=40), nullable=True),
        sa.Column("processor_account_id", sa.String(length=255), nullable=True),
        sa.Column("details_submitted", sa.Boolean(), nullable=False),
        sa.Column("charges_enabled", sa.Boolean(), nullable=False),
        sa.Column("payouts_enabled", sa.Boolean(), nullable=False),
        sa.Column("status_at", UTC(timezone=True), nullable=True),
        sa.Column("created_at", UTC(timezone=True), nullable=False),
        sa.Column("updated_at", UTC(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_payout_accounts_user_id_users"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_payout_accounts_agent_id_agents"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payout_accounts")),
        sa.UniqueConstraint("holder", name=op.f("uq_payout_accounts_holder")),
        sa.UniqueConstraint("processor_account_id", name=op.f("uq_payout_accounts_processor_account_id")),
    )
    op.create_index("ix_payout_accounts_user", "payout_accounts", ["user_id"])

    op.create_table(
        "payouts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("worker_agent_id", sa.String(length=40), nullable=True),
        sa.Column("job_id", sa.String(length=40), nullable=True),
        sa.Column("job_payment_id", sa.String(length=40), nullable=True),
        sa.Column("capture_transaction_id", sa.String(length=40), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTC(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("current_attempt_id", sa.String(length=40), nullable=True),
        sa.Column("payout_account_id", sa.String(length=40), nullable=True),
        sa.Column("processor_account_id", sa.String(length=255), nullable=True),
        sa.Column("processor_transfer_id", sa.String(length=255), nullable=True),
        sa.Column("paid_at", UTC(timezone=True), nullable=True),
        sa.Column("created_at", UTC(timezone=True), nullable=False),
        sa.Column("updated_at", UTC(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payouts")),
        sa.UniqueConstraint("capture_transaction_id", name=op.f("uq_payouts_capture_transaction_id")),
    )
    op.create_index("ix_payouts_due", "payouts", ["status", "next_attempt_at"])
    op.create_index("ix_payouts_user", "payouts", ["user_id", "created_at"])

    op.create_table(
        "payout_attempts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("payout_id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("payout_account_id", sa.String(length=40), nullable=False),
        sa.Column("processor_account_id", sa.String(length=255), nullable=False),
        sa.Column("processor_transfer_id", sa.String(length=255), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTC(timezone=True), nullable=False),
        sa.Column("finished_at", UTC(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["payout_id"], ["payouts.id"], name=op.f("fk_payout_attempts_payout_id_payouts"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payout_attempts")),
        sa.UniqueConstraint("payout_id", "number", name="uq_payout_attempts_payout_number"),
    )
    op.create_index("ix_payout_attempts_transfer", "payout_attempts", ["processor_transfer_id"])

    op.create_table(
        "setup_links",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("agent_id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("expires_at", UTC(timezone=True), nullable=False),
        sa.Column("start_count", sa.Integer(), nullable=False),
        sa.Column("processor_account_id", sa.String(length=255), nullable=True),
        sa.Column("completed_at", UTC(timezone=True), nullable=True),
        sa.Column("created_at", UTC(timezone=True), nullable=False),
        sa.Column("updated_at", UTC(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_setup_links_agent_id_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_setup_links_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_setup_links")),
        sa.UniqueConstraint("code_hash", name=op.f("uq_setup_links_code_hash")),
    )
    op.create_index("ix_setup_links_agent", "setup_links", ["agent_id", "created_at"])
    op.create_index("ix_setup_links_account", "setup_links", ["processor_account_id"])

    op.create_table(
        "setup_link_starts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("setup_link_id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("processor_ref", sa.String(length=255), nullable=False),
        sa.Column("setup_intent_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", UTC(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["setup_link_id"],
            ["setup_links.id"],
            name=op.f("fk_setup_link_starts_setup_link_id_setup_links"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_setup_link_starts")),
    )
    op.create_index("ix_setup_link_starts_ref", "setup_link_starts", ["processor_ref"])
    op.create_index("ix_setup_link_starts_intent", "setup_link_starts", ["setup_intent_id"])


def downgrade() -> None:
    op.drop_table("setup_link_starts")
    op.drop_table("setup_links")
    op.drop_table("payout_attempts")
    op.drop_table("payouts")
    op.drop_table("payout_accounts")
