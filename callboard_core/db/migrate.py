"""Schema changes go through Alembic only (tests too); seed data is applied after, idempotently."""

from __future__ import annotations

import asyncio

from alembic import command
from alembic.config import Config

from callboard_core.config import PROJECT_ROOT, Settings


def alembic_config(database_url: str) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


async def upgrade(settings: Settings, *, seed: bool = True) -> None:
    config = alembic_config(settings.database_url)
    # Alembic's env runs its own event loop for the async engine; keep it off ours.
    await asyncio.to_thread(command.upgrade, config, "head")
    if seed:
        from callboard_core.container import Core
        from callboard_core.seed import apply_seed

        core = Core.build(settings)
        try:
            async with core.uow() as uow:
                await apply_seed(uow.session)
        finally:
            await core.db.dispose()
