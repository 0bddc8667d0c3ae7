"""onboarding sessions' review and activation, registration drafts, install tokens

Onboarding sessions get the times of the agent's last presence, the owner's review, activation and dismissal.
New: registration drafts (an agent's manifest awaiting an owner), activations (the owner's runtime target and
policy, one per session or draft) and install tokens (single use, hashed; exchanged by `callboard kit install`).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 04:41:13
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from sqlalchemy import Text  # noqa: F401  (autogenerate renders JSONB(astext_type=Text()))

import callboard_core.db.base

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "registration_drafts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_expires_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("owner_id", sa.String(length=40), nullable=True),
        sa.Column("linked_agent_id", sa.String(length=40), nullable=True),
        sa.Column(
            "manifest",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "data", sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"), nullable=True
        ),
        sa.Column("last_seen_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("claimed_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("activated_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["linked_agent_id"],
            ["agents.id"],
            name=op.f("fk_registration_drafts_linked_agent_id_agents"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_registration_drafts_owner_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_registration_drafts")),
        sa.UniqueConstraint("slug", name=op.f("uq_registration_drafts_slug")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_registration_drafts_token_hash")),
    )
    with op.batch_alter_table("registration_drafts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_registration_drafts_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "onboarding_activations",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("owner_id", sa.String(length=40), nullable=False),
        sa.Column("agent_id", sa.String(length=40), nullable=True),
        sa.Column("onboarding_session_id", sa.String(length=40), nullable=True),
        sa.Column("registration_draft_id", sa.String(length=40), nullable=True),
        sa.Column("runtime_target", sa.String(length=32), nullable=False),
        sa.Column("activation_mode", sa.String(length=16), nullable=False),
        sa.Column("enable_buyer", sa.Boolean(), nullable=False),
        sa.Column("approve_seller_listing", sa.Boolean(), nullable=False),
        sa.Column("is_test_mode", sa.Boolean(), nullable=False),
        sa.Column("buyer_intent", sa.Text(), nullable=True),
        sa.Column("max_spend_cents_per_task", sa.Integer(), nullable=False),
        sa.Column("max_spend_cents_per_day", sa.Integer(), nullable=False),
        sa.Column("require_approval_over_cents", sa.Integer(), nullable=False),
        sa.Column(
            "allowed_buyer_capabilities",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("seller_autonomy", sa.String(length=32), nullable=False),
        sa.Column("seller_endpoint_url", sa.String(length=2048), nullable=True),
        sa.Column(
            "availability",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_onboarding_activations_agent_id_agents"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["onboarding_session_id"],
            ["onboarding_sessions.id"],
            name=op.f("fk_onboarding_activations_onboarding_session_id_onboarding_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
            name=op.f("fk_onboarding_activations_owner_id_users"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["registration_draft_id"],
            ["registration_drafts.id"],
            name=op.f("fk_onboarding_activations_registration_draft_id_registration_drafts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_onboarding_activations")),
        sa.UniqueConstraint(
            "onboarding_session_id", name=op.f("uq_onboarding_activations_onboarding_session_id")
        ),
        sa.UniqueConstraint(
            "registration_draft_id", name=op.f("uq_onboarding_activations_registration_draft_id")
        ),
    )
    with op.batch_alter_table("onboarding_activations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_onboarding_activations_agent_id"), ["agent_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_onboarding_activations_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "install_tokens",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("activation_id", sa.String(length=40), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("expires_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("used_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("api_key_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["activation_id"],
            ["onboarding_activations.id"],
            name=op.f("fk_install_tokens_activation_id_onboarding_activations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["api_key_id"],
            ["api_keys.id"],
            name=op.f("fk_install_tokens_api_key_id_api_keys"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_install_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_install_tokens_token_hash")),
    )
    with op.batch_alter_table("install_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_install_tokens_activation_id"), ["activation_id"], unique=False)

    with op.batch_alter_table("onboarding_sessions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("last_seen_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("reviewed_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("activated_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("dismissed_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("onboarding_sessions", schema=None) as batch_op:
        batch_op.drop_column("dismissed_at")
        batch_op.drop_column("activated_at")
        batch_op.drop_column("reviewed_at")
        batch_op.drop_column("last_seen_at")

    with op.batch_alter_table("install_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_install_tokens_activation_id"))

    op.drop_table("install_tokens")
    with op.batch_alter_table("onboarding_activations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_onboarding_activations_owner_id"))
        batch_op.drop_index(batch_op.f("ix_onboarding_activations_agent_id"))

    op.drop_table("onboarding_activations")
    with op.batch_alter_table("registration_drafts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_registration_drafts_owner_id"))

    op.drop_table("registration_drafts")
