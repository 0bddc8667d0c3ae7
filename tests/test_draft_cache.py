"""A draft reads its agent's standing and the taxonomy from the read cache (db/scopes.py: `agent_standing`,
`taxonomy`), and a submission its job type's rules, yet each is refused the moment a change that decides it
lands: made by this process or another one."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from callboard_core.db.scopes import AGENT_STANDING, TAXONOMY
from callboard_core.job_types.models import JobType
from tests.jobs_helpers import acknowledged, create_published, job_body, new_agent, new_owner, submit_body
from tests.test_readcache import _Statements, _write_elsewhere


async def _draft(client, agent, **overrides):
    return await client.post("/api/v2/jobs", headers=agent.h, json=job_body(**overrides))


async def _warm(client, agent) -> None:
    for _ in range(2):
        first = await _draft(client, agent)
        assert first.status_code == 201, first.text


async def test_a_warm_draft_reads_neither_its_agent_nor_the_taxonomy(app, client, core):
    agent = await new_agent(await new_owner(app, core))
    await _warm(client, agent)
    statements = _Statements(core)
    try:
        created = await _draft(client, agent)
    finally:
        statements.close()
    assert created.status_code == 201, created.text
    assert (created.json()["jobTypeKey"], created.json()["capabilitySlug"]) == ("general", "python")
    reads = [t for t in statements.texts if t.lstrip().upper().startswith("SELECT")]
    assert not [t for t in reads if "FROM agents" in t or "job_types" in t or "capability_tags" in t], reads


async def test_an_agent_suspended_elsewhere_is_refused_at_once(app, client, core):
    agent = await new_agent(await new_owner(app, core))
    await _warm(client, agent)
    await _write_elsewhere(
        core, "UPDATE agents SET status = 'SUSPENDED' WHERE id = $1", agent.id, scope=AGENT_STANDING
    )
    refused = await _draft(client, agent)
    assert (refused.status_code, refused.json()["code"]) == (409, "agent_not_active")


async def test_a_role_turned_off_here_or_an_owner_gone_elsewhere_is_refused_by_the_next_draft(
    app, client, core
):
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    await _warm(client, agent)
    off = await client.patch("/api/v2/agents/me", headers=agent.h, json={"requesterEnabled": False})
    assert off.status_code == 200, off.text
    refused = await _draft(client, agent)
    assert (refused.status_code, refused.json()["code"]) == (409, "requester_disabled")

    # The owner drafting for an agent no longer theirs: its owner_id moved elsewhere.
    other = await new_agent(owner)
    drafted = await owner.client.post("/api/v2/owner/jobs", json=job_body(requesterAgentId=other.id))
    assert drafted.status_code == 201, drafted.text
    await _write_elsewhere(
        core, "UPDATE agents SET owner_id = NULL WHERE id = $1", other.id, scope=AGENT_STANDING
    )
    gone = await owner.client.post("/api/v2/owner/jobs", json=job_body(requesterAgentId=other.id))
    assert (gone.status_code, gone.json()["code"]) == (404, "agent_not_found")


async def test_an_unrelated_agent_change_keeps_its_standing_cached(app, client, core):
    agent = await new_agent(await new_owner(app, core))
    await _warm(client, agent)
    renamed = await client.patch("/api/v2/agents/me", headers=agent.h, json={"name": "Renamed"})
    assert renamed.status_code == 200, renamed.text
    await _write_elsewhere(core, "UPDATE agents SET description = 'Edited elsewhere' WHERE id = $1", agent.id)
    statements = _Statements(core)
    try:
        assert (await _draft(client, agent)).status_code == 201
    finally:
        statements.close()
    assert not [t for t in statements.texts if "FROM agents" in t]


@pytest.mark.parametrize(
    ("sql", "undo", "field", "code"),
    [
        (
            "UPDATE job_types SET active = false WHERE key = $1",
            "UPDATE job_types SET active = true WHERE key = $1",
            "jobTypeKey",
            "unknown_job_type",
        ),
        (
            "UPDATE capability_tags SET status = 'DEPRECATED' WHERE slug = $1",
            "UPDATE capability_tags SET status = 'ACTIVE' WHERE slug = $1",
            "capabilitySlug",
            "unknown_capability",
        ),
    ],
)
async def test_a_job_type_or_tag_retired_elsewhere_is_refused_at_once(
    app, client, core, sql, undo, field, code
):
    agent = await new_agent(await new_owner(app, core))
    body = {"jobTypeKey": "code-change", "capabilitySlug": "sql"}
    for _ in range(2):
        assert (await _draft(client, agent, **body)).status_code == 201
    arg = body[field]
    await _write_elsewhere(core, sql, arg, scope=TAXONOMY)
    try:
        refused = await _draft(client, agent, **body)
        assert refused.status_code == 422, refused.text
        assert [(e["field"], e["code"]) for e in refused.json()["errors"]] == [(field, code)]
    finally:
        await _write_elsewhere(core, undo, arg, scope=TAXONOMY)
    assert (await _draft(client, agent, **body)).status_code == 201


async def test_a_submit_checks_against_cached_rules_and_a_changed_schema_at_once(app, client, core):
    """A submission is checked against its job type's rules from the read cache's taxonomy scope (no read
    of the type once warm); a schema changed in the database applies to the very next submission."""
    requester = await new_agent(await new_owner(app, core))
    workers = [await new_agent(await new_owner(app, core)) for _ in range(3)]
    job = await create_published(requester, client, participantCap=3)
    slots = await acknowledged(client, job["id"], requester, workers)

    async def submit(i: int):
        return await client.post(
            f"/api/v2/participation-slots/{slots[i]}/submit", json=submit_body(), headers=workers[i].h
        )

    assert (await submit(0)).status_code == 201
    statements = _Statements(core)
    try:
        assert (await submit(1)).status_code == 201
    finally:
        statements.close()
    assert not [t for t in statements.texts if "FROM job_types" in t]

    async with core.uow() as uow:
        general = (await uow.session.scalars(select(JobType).where(JobType.key == "general"))).one()
        before = general.artifact_schema_json
        general.artifact_schema_json = {
            **before,
            "required": [*before["required"], "extra"],
            "properties": {**before["properties"], "extra": {"type": "string"}},
        }
    try:
        refused = await submit(2)
        assert refused.status_code == 422 and "extra" in refused.text, refused.text
    finally:
        async with core.uow() as uow:
            general = (await uow.session.scalars(select(JobType).where(JobType.key == "general"))).one()
            general.artifact_schema_json = before
