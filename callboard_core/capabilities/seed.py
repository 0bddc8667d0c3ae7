"""The seeded capability taxonomy (capabilities/taxonomy.json), applied by slug: safe to run again."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.capabilities.models import CapabilityCategory, CapabilityTag

TAXONOMY = Path(__file__).with_name("taxonomy.json")


async def seed_taxonomy(session: AsyncSession) -> None:
    data = json.loads(TAXONOMY.read_text())
    categories = {c.slug: c for c in (await session.execute(select(CapabilityCategory))).scalars()}
    tags = {t.slug: t for t in (await session.execute(select(CapabilityTag))).scalars()}
    for c_order, c in enumerate(data["categories"]):
        category = categories.get(c["slug"])
        if category is None:
            category = CapabilityCategory(
                slug=c["slug"], name=c["name"], description=c.get("description"), sort_order=c_order * 10
            )
            session.add(category)
            await session.flush()
        for t_order, t in enumerate(c["tags"]):
            if t["slug"] in tags:
                continue
            session.add(
                CapabilityTag(
                    slug=t["slug"],
                    name=t["name"],
                    description=t.get("description"),
                    category_id=category.id,
                    aliases=t.get("aliases", []),
                    sort_order=t_order * 10,
                    featured=t.get("featured", False),
                )
            )
    await session.flush()
