"""the double-entry ledger: accounts, transactions, immutable entries

Ledger accounts (a cached balance per (kind, holder, currency), never negative unless the account allows it),
transactions (one per idempotency key) and their entries. Entries and transactions are immutable: a trigger
refuses UPDATE on both (PostgreSQL and SQLite) and, on PostgreSQL, DELETE too (the test suite wipes
PostgreSQL with TRUNCATE, which row triggers do not see; SQLite's wipe is a DELETE, so there DELETE stays).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 13:01:17
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from sqlalchemy import Text  # noqa: F401  (autogenerate renders JSONB(astext_type=Text()))

import callboard_core.db.base

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

IMMUTABLE = ("ledger_entries", "ledger_transactions")
PG_FUNCTION = "ledger_refuse_change"


def upgrade() -> None:
    op.create_table(
        "ledger_accounts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("holder_id", sa.String(length=40), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("allow_negative", sa.Boolean(), nullable=False),
        sa.Column("balance_cents", sa.BigInteger(), nullable=False),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "allow_negative OR balance_cents >= 0", name=op.f("ck_ledger_accounts_non_negative")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_accounts")),
        sa.UniqueConstraint("kind", "holder_id", "currency", name="uq_ledger_accounts_kind_holder_currency"),
    )
    with op.batch_alter_table("ledger_accounts", schema=None) as batch_op:
        batch_op.create_index("ix_ledger_accounts_holder", ["holder_id"], unique=False)

    op.create_table(
        "ledger_transactions",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=24), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=True),
        sa.Column("user_id", sa.String(length=40), nullable=True),
        sa.Column("processor_ref", sa.String(length=255), nullable=True),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_transactions")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_ledger_transactions_idempotency_key")),
    )
    with op.batch_alter_table("ledger_transactions", schema=None) as batch_op:
        batch_op.create_index("ix_ledger_transactions_job", ["job_id"], unique=False)
        batch_op.create_index("ix_ledger_transactions_user", ["user_id", "created_at"], unique=False)

    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("transaction_id", sa.String(length=40), nullable=False),
        sa.Column("account_id", sa.String(length=40), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.Column("created_at", callboard_core.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.CheckConstraint("amount_cents <> 0", name=op.f("ck_ledger_entries_non_zero")),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["ledger_accounts.id"],
            name=op.f("fk_ledger_entries_account_id_ledger_accounts"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["transaction_id"],
            ["ledger_transactions.id"],
            name=op.f("fk_ledger_entries_transaction_id_ledger_transactions"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
    )
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.create_index("ix_ledger_entries_account", ["account_id", "created_at", "id"], unique=False)
        batch_op.create_index("ix_ledger_entries_transaction", ["transaction_id"], unique=False)

    # Posted rows never change: a correction is a new transaction. (A later batch_alter_table on these tables
    # recreates them on SQLite and drops the triggers: such a migration must create them again.)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION '% rows are immutable (% refused): post a correcting transaction', "
            "TG_TABLE_NAME, TG_OP; END $$"
        )
        for table in IMMUTABLE:
            op.execute(
                f"CREATE TRIGGER {table}_immutable BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {PG_FUNCTION}()"
            )
    else:
        for table in IMMUTABLE:
            op.execute(
                f"CREATE TRIGGER {table}_immutable BEFORE UPDATE ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} rows are immutable: post a correcting transaction'); END"
            )


def downgrade() -> None:
    # The triggers go with their tables.
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_ledger_entries_transaction")
        batch_op.drop_index("ix_ledger_entries_account")

    op.drop_table("ledger_entries")
    with op.batch_alter_table("ledger_transactions", schema=None) as batch_op:
        batch_op.drop_index("ix_ledger_transactions_user")
        batch_op.drop_index("ix_ledger_transactions_job")

    op.drop_table("ledger_transactions")
    with op.batch_alter_table("ledger_accounts", schema=None) as batch_op:
        batch_op.drop_index("ix_ledger_accounts_holder")

    op.drop_table("ledger_accounts")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {PG_FUNCTION}()")
