"""the read cache's credential entries outlive commits that change no credential

`cache_generations` counts, per scope of the read cache (callboard_core/db/readcache.py), the commits that
changed a table (or column) its entries depend on. On SQLite, triggers count them (every connection, every
process); PostgreSQL's change feed hears a notification named after the scope instead
(db/changefeed.install_triggers), so the table stays at zero there. The triggers are this revision's own
copy of the scope: a later change of readcache.SCOPES needs a revision of its own
(tests/test_readcache.py checks that they agree).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27 20:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# scope -> (table, the columns whose update counts; () for every update)
SCOPES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "credentials": (
        ("api_keys", ("key_hash", "agent_id", "owner_id", "scopes", "expires_at", "revoked_at")),
        ("user_sessions", ()),
        ("users", ("role", "status", "email", "email_verified_at", "deleted_at")),
    ),
}


def _triggers(scope: str, table: str, columns: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, DDL) of the three row triggers that count `table`'s changes for `scope`."""
    bump = f"UPDATE cache_generations SET generation = generation + 1 WHERE scope = '{scope}';"
    out = []
    for event in ("INSERT", "UPDATE", "DELETE"):
        name = f"cache_{scope}_{table}_{event.lower()}"
        of = f" OF {', '.join(columns)}" if columns and event == "UPDATE" else ""
        out.append((name, f"CREATE TRIGGER {name} AFTER {event}{of} ON {table} BEGIN {bump} END"))
    return out


def upgrade() -> None:
    op.create_table(
        "cache_generations",
        sa.Column("scope", sa.String(32), primary_key=True),
        sa.Column("generation", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.bulk_insert(
        sa.table("cache_generations", sa.column("scope", sa.String)), [{"scope": s} for s in SCOPES]
    )
    if op.get_bind().dialect.name == "sqlite":
        for scope, tables in SCOPES.items():
            for table, columns in tables:
                for _name, ddl in _triggers(scope, table, columns):
                    op.execute(ddl)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for scope, tables in SCOPES.items():
            for table, columns in tables:
                for name, _ddl in _triggers(scope, table, columns):
                    op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_table("cache_generations")
