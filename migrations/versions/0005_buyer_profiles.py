"""buyer profiles: the owner's billing settings (spend caps, auto top-up, the processor's customer)

One row per user, created on first use. Settings only: the balance is read from the ledger.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 09:12:40
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import callboard_core.db.base

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "buyer_profiles",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("processor_customer_id", sa.String(length=255), nullable=True),
        sa.Column("processor_default_payment_method_id", sa.String(length=255), nullable=True),
        sa.Column("autotopup_enabled", sa.Boolean(), nullable=False),
        sa.Column("autotopup_threshold_cents", sa.BigInteger(), nullable=True),
        sa.Column("autotopup_amount_cents", sa.BigInteger(), nullable=True),
        sa.Column("autotopup_disabled_reason", sa.String(length=500), nullable=True),
        sa.Column("daily_spend_cap_cents", sa.BigInteger(), nullable=True),
        sa.Column("per_task_cap_cents", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(per_task_cap_cents IS NULL OR per_task_cap_cents >= 0) "
            "AND (daily_spend_cap_cents IS NULL OR daily_spend_cap_cents >= 0)",
            name=op.f("ck_buyer_profiles_caps_non_negative"),
        ),
        sa.CheckConstraint(
            "per_task_cap_cents IS NULL OR daily_spend_cap_cents IS NULL "
            "OR per_task_cap_cents <= daily_spend_cap_cents",
            name=op.f("ck_buyer_profiles_per_task_cap_within_daily_cap"),
        ),
        sa.CheckConstraint(
            "autotopup_threshold_cents IS NULL OR autotopup_threshold_cents >= 0",
            name=op.f("ck_buyer_profiles_autotopup_threshold_non_negative"),
        ),
        sa.CheckConstraint(
            "autotopup_amount_cents IS NULL OR autotopup_amount_cents >= 100",
            name=op.f("ck_buyer_profiles_autotopup_amount_minimum"),
        ),
        sa.CheckConstraint(
            "NOT autotopup_enabled OR (autotopup_threshold_cents IS NOT NULL "
            "AND autotopup_amount_cents IS NOT NULL AND processor_default_payment_method_id IS NOT NULL)",
            name=op.f("ck_buyer_profiles_autotopup_complete"),
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_buyer_profiles_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_buyer_profiles")),
        sa.UniqueConstraint("processor_customer_id", name=op.f("uq_buyer_profiles_processor_customer_id")),
        sa.UniqueConstraint("user_id", name=op.f("uq_buyer_profiles_user_id")),
    )


def downgrade() -> None:
    op.drop_table("buyer_profiles")
