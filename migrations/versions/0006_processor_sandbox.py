"""the sandbox payment processor's tables: objects, idempotency keys, the webhook event outbox

Only `CALLBOARD_PROCESSOR=sandbox` writes them (callboard_core/processor/models.py). Self-contained: no
foreign keys to other tables, nothing else changes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import callboard_core.db.base

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "sandbox_objects",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=40), nullable=False),
        sa.Column("data", JSON, nullable=False),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sandbox_objects")),
    )
    with op.batch_alter_table("sandbox_objects", schema=None) as batch_op:
        batch_op.create_index("ix_sandbox_objects_type", ["type", "created_at"], unique=False)

    op.create_table(
        "sandbox_idempotency_keys",
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("operation", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("result", JSON, nullable=False),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_sandbox_idempotency_keys")),
    )

    op.create_table(
        "sandbox_events",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=80), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sandbox_events")),
    )
    with op.batch_alter_table("sandbox_events", schema=None) as batch_op:
        batch_op.create_index("ix_sandbox_events_pending", ["delivered_at", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("sandbox_events", schema=None) as batch_op:
        batch_op.drop_index("ix_sandbox_events_pending")
    op.drop_table("sandbox_events")
    op.drop_table("sandbox_idempotency_keys")
    with op.batch_alter_table("sandbox_objects", schema=None) as batch_op:
        batch_op.drop_index("ix_sandbox_objects_type")
    op.drop_table("sandbox_objects")
