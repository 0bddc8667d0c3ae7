"""Seed data every deployment needs. Later aggregates (job types) add their seeders here."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.capabilities.seed import seed_taxonomy


async def apply_seed(session: AsyncSession) -> None:
    await seed_taxonomy(session)
