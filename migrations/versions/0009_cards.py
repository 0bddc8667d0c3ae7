"""cards and top-ups: processor webhook events received, saved cards, top-ups

`processor_events` deduplicates webhook deliveries by event id; `payment_methods` mirrors the owners' saved
cards at the processor; `topups` records each hosted top-up. Self-contained: only new tables.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import callboard_core.db.base

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "processor_events",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("type", sa.String(length=80), nullable=False),
        sa.Column("received_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("handled_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_processor_events")),
        sa.UniqueConstraint("event_id", name=op.f("uq_processor_events_event_id")),
    )
    op.create_table(
        "payment_methods",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("processor_payment_method_id", sa.String(length=255), nullable=False),
        sa.Column("type", sa.String(length=40), nullable=True),
        sa.Column("brand", sa.String(length=40), nullable=True),
        sa.Column("last4", sa.String(length=4), nullable=True),
        sa.Column("exp_month", sa.Integer(), nullable=True),
        sa.Column("exp_year", sa.Integer(), nullable=True),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_payment_methods_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payment_methods")),
        sa.UniqueConstraint(
            "processor_payment_method_id", name=op.f("uq_payment_methods_processor_payment_method_id")
        ),
    )
    with op.batch_alter_table("payment_methods", schema=None) as batch_op:
        batch_op.create_index("ix_payment_methods_user", ["user_id", "created_at"], unique=False)

    op.create_table(
        "topups",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("request_key", sa.String(length=64), nullable=True),
        sa.Column("checkout_id", sa.String(length=255), nullable=True),
        sa.Column("payment_intent_id", sa.String(length=255), nullable=True),
        sa.Column("ledger_transaction_id", sa.String(length=40), nullable=True),
        sa.Column("failure_code", sa.String(length=80), nullable=True),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("amount_cents > 0", name=op.f("ck_topups_amount_positive")),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_topups_user_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_topups")),
        sa.UniqueConstraint("checkout_id", name=op.f("uq_topups_checkout_id")),
        sa.UniqueConstraint("request_key", name=op.f("uq_topups_request_key")),
    )
    with op.batch_alter_table("topups", schema=None) as batch_op:
        batch_op.create_index("ix_topups_user", ["user_id", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_table("topups")
    op.drop_table("payment_methods")
    op.drop_table("processor_events")
