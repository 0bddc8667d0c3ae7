"""the read cache's taxonomy and agent-standing entries outlive commits that change neither

Two more scopes of the read cache (callboard_core/db/scopes.py): `taxonomy` (capability tags and job types,
which every draft names) and `agent_standing` (the few columns of an agent that decide whether it may act and
for whom). As in 0021, SQLite counts their changes by triggers, PostgreSQL by the change feed's
notifications (db/changefeed.install_triggers); the triggers are this revision's own copy of the scopes.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 01:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# scope -> (table, the columns whose update counts; () for every update)
SCOPES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "taxonomy": (("capability_tags", ()), ("job_types", ())),
    "agent_standing": (
        (
            "agents",
            ("owner_id", "status", "archived_at", "deleted_at", "requester_enabled", "worker_enabled", "is_house"),
        ),
    ),
}


def _triggers(scope: str, table: str, columns: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, DDL) of the three row triggers that count `table`'s changes for `scope` (as 0021's)."""
    bump = f"UPDATE cache_generations SET generation = generation + 1 WHERE scope = '{scope}';"
    out = []
    for event in ("INSERT", "UPDATE", "DELETE"):
        name = f"cache_{scope}_{table}_{event.lower()}"
        of = f" OF {', '.join(columns)}" if columns and event == "UPDATE" else ""
        out.append((name, f"CREATE TRIGGER {name} AFTER {event}{of} ON {table} BEGIN {bump} END"))
    return out


def upgrade() -> None:
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
    op.execute(
        sa.text("DELETE FROM cache_generations WHERE scope IN ('taxonomy', 'agent_standing')")
    )
