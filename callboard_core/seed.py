"""Seed data every deployment needs. Later aggregates (job types) add their seeders here."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.capabilities.seed import seed_taxonomy
from callboard_core.job_types.seed import seed_job_types


async def apply_seed(session: AsyncSession) -> None:
    await seed_taxonomy(session)
    await seed_job_types(session)  # after the taxonomy: types link tags by slug
