"""the ledger proves itself: each entry records its account's version and resulting balance, and the database
refuses a transaction whose entries do not sum to zero

- `ledger_accounts.version`: moved with the cached balance by the same guarded UPDATE; each entry records the
  version it made (`account_version`, unique per account) and the balance after it (`balance_after_cents`).
  Entries already posted are numbered in (created_at, id) order, their running sums recorded.
- Zero sum at commit. PostgreSQL: a deferred constraint trigger on both ledger tables checks the
  transaction's entries (at least two, summing to 0) when the database transaction commits. SQLite has no
  deferred triggers: a row per open ledger transaction (`ledger_unbalanced`, kept by row triggers, deleted
  once its entries sum to 0 over at least two) carries a deferred foreign key to a table that stays empty,
  so a commit that leaves any such row fails.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 05:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PG_CHECK = "ledger_check_balanced"
CHECKED = ("ledger_transactions", "ledger_entries")
NUMBERED = """
    UPDATE ledger_entries SET account_version = numbered.version, balance_after_cents = numbered.balance
    FROM (
        SELECT id,
               ROW_NUMBER() OVER (PARTITION BY account_id ORDER BY created_at, id) AS version,
               SUM(amount_cents) OVER (
                   PARTITION BY account_id ORDER BY created_at, id ROWS UNBOUNDED PRECEDING
               ) AS balance
        FROM ledger_entries
    ) AS numbered
    WHERE ledger_entries.id = numbered.id
"""
COUNTED = (
    "UPDATE ledger_accounts SET version = "
    "(SELECT COUNT(*) FROM ledger_entries e WHERE e.account_id = ledger_accounts.id)"
)
SQLITE_IMMUTABLE = (
    "CREATE TRIGGER ledger_entries_immutable BEFORE UPDATE ON ledger_entries "
    "BEGIN SELECT RAISE(ABORT, 'ledger_entries rows are immutable: post a correcting transaction'); END"
)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column("ledger_accounts", sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("ledger_entries", sa.Column("account_version", sa.BigInteger(), nullable=True))
    op.add_column("ledger_entries", sa.Column("balance_after_cents", sa.BigInteger(), nullable=True))

    # Number the entries already posted (the immutability trigger steps aside for this one update).
    if postgres:
        op.execute("ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_immutable")
        op.execute(NUMBERED)
        op.execute("ALTER TABLE ledger_entries ENABLE TRIGGER ledger_entries_immutable")
    else:
        op.execute("DROP TRIGGER ledger_entries_immutable")
        op.execute(NUMBERED)
        op.execute(SQLITE_IMMUTABLE)
    op.execute(COUNTED)
    op.create_index(
        "uq_ledger_entries_account_version", "ledger_entries", ["account_id", "account_version"], unique=True
    )

    if postgres:
        op.execute(
            f"CREATE FUNCTION {PG_CHECK}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "DECLARE txn text; total bigint; n integer; BEGIN "
            "IF TG_TABLE_NAME = 'ledger_entries' THEN txn := NEW.transaction_id; ELSE txn := NEW.id; END IF; "
            "SELECT COALESCE(SUM(amount_cents), 0), COUNT(*) INTO total, n "
            "FROM ledger_entries WHERE transaction_id = txn; "
            "IF total <> 0 OR n < 2 THEN RAISE EXCEPTION "
            "'ledger transaction % does not balance: % entries summing to %', txn, n, total "
            "USING ERRCODE = 'check_violation'; END IF; "
            "RETURN NULL; END $$"
        )
        for table in CHECKED:
            op.execute(
                f"CREATE CONSTRAINT TRIGGER {table}_balanced AFTER INSERT ON {table} "
                f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {PG_CHECK}()"
            )
        return

    op.execute("CREATE TABLE ledger_never_balanced (id VARCHAR(16) PRIMARY KEY)")
    op.execute(
        "CREATE TABLE ledger_unbalanced ("
        " transaction_id VARCHAR(40) PRIMARY KEY,"
        " sum_cents BIGINT NOT NULL DEFAULT 0,"
        " entries INTEGER NOT NULL DEFAULT 0,"
        " guard VARCHAR(16) NOT NULL DEFAULT 'open'"
        " REFERENCES ledger_never_balanced (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    op.execute(
        "CREATE TRIGGER ledger_transactions_balanced AFTER INSERT ON ledger_transactions BEGIN "
        "INSERT INTO ledger_unbalanced (transaction_id) VALUES (NEW.id); END"
    )
    op.execute(
        "CREATE TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries BEGIN "
        "INSERT OR IGNORE INTO ledger_unbalanced (transaction_id) VALUES (NEW.transaction_id); "
        "UPDATE ledger_unbalanced SET sum_cents = sum_cents + NEW.amount_cents, entries = entries + 1 "
        "WHERE transaction_id = NEW.transaction_id; "
        "DELETE FROM ledger_unbalanced WHERE transaction_id = NEW.transaction_id "
        "AND sum_cents = 0 AND entries >= 2; END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in CHECKED:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_balanced ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS {PG_CHECK}()")
    else:
        for table in CHECKED:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_balanced")
        op.execute("DROP TABLE IF EXISTS ledger_unbalanced")
        op.execute("DROP TABLE IF EXISTS ledger_never_balanced")
    op.drop_index("uq_ledger_entries_account_version", table_name="ledger_entries")
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): a batch copy would drop the ledger's triggers.
    for table, column in (
        ("ledger_entries", "balance_after_cents"),
        ("ledger_entries", "account_version"),
        ("ledger_accounts", "version"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
