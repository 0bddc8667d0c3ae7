"""Schema changes go through Alembic only (tests too). Seed data is applied after, one layer up
(callboard_core/seed.py: `migrate_and_seed`): the db layer knows nothing of the core's aggregates."""

from __future__ import annotations

import asyncio

from alembic import command
from alembic.config import Config

from callboard_core.config import PROJECT_ROOT


def alembic_config(database_url: str) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


async def upgrade(database_url: str) -> None:
    """The schema to the latest migration."""
    # Alembic's env runs its own event loop for the async engine; keep it off ours.
    await asyncio.to_thread(command.upgrade, alembic_config(database_url), "head")


def head_revision() -> str:
    """The migration head this code expects (read from the scripts, no database)."""
    from alembic.script import ScriptDirectory

    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None, "the migrations have no head"
    return str(head)
