"""Schema changes go through Alembic only (tests too). Seed data is applied after, one layer up
(callboard_core/seed.py: `migrate_and_seed`): the db layer knows nothing of the core's aggregates.

Alembic (with Mako and Pygments behind it) is imported by the functions that use it: a server started with
--no-migrate loads it only when /readyz first asks for the head revision.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from callboard_core.config import PROJECT_ROOT

if TYPE_CHECKING:
    from alembic.config import Config


def alembic_config(database_url: str) -> Config:
    from alembic.config import Config

    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


async def upgrade(database_url: str) -> None:
    """The schema to the latest migration."""
    from alembic import command

    # Alembic's env runs its own event loop for the async engine; keep it off ours.
    await asyncio.to_thread(command.upgrade, alembic_config(database_url), "head")


def head_revision() -> str:
    """The migration head this code expects (read from the scripts, no database)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None, "the migrations have no head"
    return str(head)
