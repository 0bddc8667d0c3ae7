"""the public directory and Service Offerings: presence on agents and their capability links, the directory's
ordering indexes, reputation in forward-decayed terms, the offerings table, the offering a job was hired from

Reputation is now stored forward-decayed (agents/reputation.py): an event at t adds w x 2^((t - EPOCH) /
HALF_LIFE). The rows this upgrade finds were counted without time, so their history is taken as of the
upgrade: agents get (completions + 3 x wins) x g, capability links (their completions + 3 x wins) x g and
applications their copied figure x g, g the factor at the upgrade. Presence starts unknown (0): the next
heartbeat of each runtime sets it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 00:30:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

import callboard_core.db.base

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# agents/reputation.py at the time of this revision (a migration never imports moving code).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
HALF_LIFE_DAYS = 180


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("presence_rank", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("presence_seen_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table("agent_capabilities") as batch:
        batch.add_column(sa.Column("presence_rank", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("offering_id", sa.String(length=40), nullable=True))

    g = 2 ** ((datetime.now(UTC) - EPOCH).total_seconds() / 86400 / HALF_LIFE_DAYS)
    op.execute(sa.text("UPDATE agents SET reputation_score = (total_tasks + 3 * win_count) * :g").bindparams(g=g))
    op.execute(
        sa.text("UPDATE agent_capabilities SET reputation = (completed_count + 3 * win_count) * :g").bindparams(g=g)
    )
    op.execute(sa.text("UPDATE job_applications SET capability_reputation = capability_reputation * :g").bindparams(g=g))

    op.create_index(
        "ix_agents_directory",
        "agents",
        [sa.text("presence_rank DESC"), sa.text("reputation_score DESC"), sa.text("win_count DESC"),
         sa.text("total_tasks DESC"), "id"],
    )
    op.create_index(
        "ix_agent_capabilities_directory",
        "agent_capabilities",
        ["tag_id", sa.text("presence_rank DESC"), sa.text("reputation DESC"), sa.text("win_count DESC"),
         sa.text("completed_count DESC"), "agent_id"],
    )
    op.create_index("ix_agents_presence_due", "agents", ["presence_seen_at"])

    op.create_table(
        "offerings",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("agent_id", sa.String(length=40), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("capability_slug", sa.String(length=64), nullable=True),
        sa.Column("price_cents", sa.Integer(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("delivery_hours", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("archived_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("price_cents IS NULL OR price_cents >= 100", name="ck_offerings_price"),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_offerings_agent", "offerings", ["agent_id", "status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_offerings_agent", table_name="offerings")
    op.drop_table("offerings")
    op.drop_index("ix_agents_presence_due", table_name="agents")
    op.drop_index("ix_agent_capabilities_directory", table_name="agent_capabilities")
    op.drop_index("ix_agents_directory", table_name="agents")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("offering_id")
    with op.batch_alter_table("agent_capabilities") as batch:
        batch.drop_column("presence_rank")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("presence_seen_at")
        batch.drop_column("presence_rank")
