"""Seed data every deployment needs, and the migration that precedes it. Later aggregates add their
seeders to `apply_seed`."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.capabilities.seed import seed_taxonomy
from callboard_core.config import Settings
from callboard_core.container import Core
from callboard_core.db import migrate
from callboard_core.job_types.seed import seed_job_types


async def apply_seed(session: AsyncSession) -> None:
    await seed_taxonomy(session)
    await seed_job_types(session)  # after the taxonomy: types link tags by slug


async def migrate_and_seed(settings: Settings) -> None:
    """`callboard migrate`: the schema to the latest migration, then the seed data (idempotent, by slug)."""
    await migrate.upgrade(settings.database_url)
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            await apply_seed(uow.session)
    finally:
        await core.db.dispose()
