"""Discovery's query plans on PostgreSQL: each query shape settles on one generic plan (planned once per
connection, not on every request: planning cost more than running the query) and that plan reads index
ranges, never the whole jobs table.

A generic plan knows no parameter values: a LIMIT left as a parameter is planned as if a tenth of the table
were wanted (the planner then sorts every open job instead of walking an index backwards: 32 ms over 100,000
jobs where the walk takes 0.2 ms), and a status parameter as if it were any status. So the page size and the
status are written into the statement, and PostgreSQL's own cost check then prefers the generic plan."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.jobs import discovery
from callboard_core.jobs.models import Job
from callboard_core.principals import Actor
from tests.jobs_helpers import create_published, new_agent, new_owner

JOBS = 4000


def _literal(value: Any) -> str:
    text_value = value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text_value.replace("'", "''") + "'"


async def _seed(core: Any, template_id: str, owners: list[str]) -> None:
    """JOBS open jobs copied from one published job, spread over these owners, every seeded tag (a tenth
    untagged) and a week."""
    overrides = {
        "owner_id": "(CAST(:owners AS text[]))[1 + g % 5]",
        "id": "jobs.id || '_' || g",
        "capability_tag_id": "CASE WHEN g % 10 = 0 THEN NULL ELSE (tags.ids)[1 + g % cardinality(tags.ids)] END",
        "capability_slug": "NULL",
        "published_at": "jobs.published_at - g * interval '150 seconds'",
        "title": "'Job ' || g",
    }
    columns = [c.name for c in Job.__table__.columns]
    values = ", ".join(overrides.get(name, f"jobs.{name}") for name in columns)
    async with core.uow() as uow:
        await uow.session.execute(
            text(
                f"INSERT INTO jobs ({', '.join(columns)}) SELECT {values} FROM jobs, generate_series(1, :n) AS g, "
                "(SELECT array_agg(id ORDER BY id) AS ids FROM capability_tags) AS tags WHERE jobs.id = :id"
            ),
            {"n": JOBS, "id": template_id, "owners": owners},
        )
    async with core.db.write_engine.connect() as conn:
        await (await conn.execution_options(isolation_level="AUTOCOMMIT")).exec_driver_sql("ANALYZE jobs")


async def test_each_discovery_shape_keeps_one_index_driven_generic_plan(
    app: Any, core: Any, client: Any, database_url: str
) -> None:
    if core.db.is_sqlite:
        pytest.skip("PostgreSQL's plan cache")
    owners = [await new_owner(app, core) for _ in range(5)]
    requester = await new_agent(owners[0])
    worker = await new_agent(await new_owner(app, core), capabilities=["python", "translation"])
    template = await create_published(requester, client, capabilitySlug="python")
    await _seed(core, template["id"], [owner.user_id for owner in owners])

    shapes: dict[str, dict[str, Any]] = {
        "default": {},
        "rookie": {"include": "rookie"},
        "one tag": {"capability": "translation"},
    }  # (a text search keeps custom plans: no generic plan can know how selective a pattern is)
    captured: list[tuple[str, Any]] = []

    def grab(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any, _many: bool) -> None:
        if statement.lstrip().startswith("SELECT jobs.id") and "ORDER BY" in statement:
            captured.append((statement, parameters))

    engine = core.db.read_engine
    event.listen(engine.sync_engine, "before_cursor_execute", grab)
    try:
        async with engine.connect() as conn:
            session = AsyncSession(bind=conn)
            seeker = await discovery.seeker(session, Actor.agent(worker.id))
            first = await discovery.list_open(
                session, seeker, capability=None, q=None, limit=20, include=None, cursor=None
            )
            assert len(first.jobs) == 20 and first.next_cursor
            shapes["second page"] = {"cursor": first.next_cursor}
            statements = {}
            for name, options in shapes.items():
                for _ in range(8):  # PostgreSQL weighs a generic plan after five custom ones
                    page = await discovery.list_open(
                        session,
                        seeker,
                        limit=20,
                        **{"capability": None, "q": None, "include": None, "cursor": None} | options,
                    )
                    assert page.jobs, name
                statements[name] = captured[-1]
            cached = {
                row.statement: (row.generic_plans, row.custom_plans)
                for row in (
                    await conn.execute(
                        text("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
                    )
                ).all()
            }
            for name, (statement, _) in statements.items():
                generic, custom = cached[statement]
                assert generic >= 3 and custom <= 5, (name, generic, custom)  # planned once, then reused
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", grab)

    # The generic plan itself reads index ranges (an index-only walk per range), never the table.
    async with engine.connect() as conn:
        await conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        for i, (name, (statement, parameters)) in enumerate(statements.items()):
            await conn.exec_driver_sql(f"PREPARE discovery_{i} AS {statement}")
            args = ", ".join(_literal(v) for v in parameters)
            plan = "\n".join(
                row[0]
                for row in (
                    await conn.exec_driver_sql(f"EXPLAIN (COSTS OFF) EXECUTE discovery_{i}({args})")
                ).all()
            )
            assert "Index Only Scan Backward using ix_jobs_discovery_" in plan, (name, plan)
            assert "Seq Scan" not in plan and "Bitmap" not in plan, (name, plan)
            assert "$1" in plan, (name, plan)  # the generic plan, not one made for these values
        await conn.rollback()
        # Named statements outlive a rollback: the connection is closed, not handed to the next test.
        await conn.invalidate()
