"""How the core's packages are wired to each other: by Core.build (idempotent), never as import side effects.
The job lifecycle's hooks into the agent lifecycle (work in flight blocks archive and delete) and the agents'
side of the capability taxonomy (`TagHolders`: a tag renamed or merged reaches the agents holding it)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from callboard_core.container import Core
from tests.conftest import key_headers, owner_client, register_agent
from tests.jobs_helpers import new_agent, new_owner

ROOT = Path(__file__).resolve().parent.parent


async def run_fresh(script: str, args: dict[str, Any]) -> Any:
    """Run `script` in a fresh interpreter (this tree first on the path); its last output line is JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    env["PYTHONPATH"] = str(ROOT)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script, json.dumps(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# Run in a fresh interpreter that imports no job service and no front end itself, only what a CLI or a
# worker needs (the container, the agent lifecycle). Core.build runs twice: the blocker is reported once.
ARCHIVE_IN_FRESH_PROCESS = """
import asyncio, json, sys

from callboard_core.agents import lifecycle
from callboard_core.config import Environment, Settings
from callboard_core.container import Core
from callboard_core.errors import CallboardError
from callboard_core.principals import Actor

args = json.loads(sys.argv[1])


async def main() -> dict:
    settings = Settings(
        env=Environment.TEST,
        database_url=args["url"],
        var_dir=args["var"],
        secret_key="k" * 43,
        base_url="http://testserver",
    )
    Core.build(settings)
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            await lifecycle.archive(uow.session, Actor.owner(args["owner"]), args["agent"])
    except CallboardError as error:
        return {"code": error.code, "blockers": [b["kind"] for b in error.details.get("blockers", [])]}
    finally:
        await core.db.dispose()
    return {"code": None, "blockers": []}


print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.slow  # a fresh Python process
async def test_core_build_registers_the_job_blockers_in_a_fresh_process(
    app: Any, core: Core, client: Any
) -> None:
    owner = await new_owner(app, core)
    worker = await new_agent(owner)
    started = await client.post("/api/v2/agents/me/starter-job", headers=worker.h)
    assert started.status_code == 200, started.text  # the worker now holds a live (acknowledged) slot
    args = {
        "url": core.settings.database_url,
        "var": str(core.settings.var_dir),
        "agent": worker.id,
        "owner": owner.user_id,
    }
    result = await run_fresh(ARCHIVE_IN_FRESH_PROCESS, args)
    assert result == {"code": "agent_lifecycle_blocked", "blockers": ["LIVE_SLOTS"]}
    got = (await owner.client.get(f"/agents/dashboard/{worker.id}")).json()
    assert got["archived"] is False and got["status"] == "ACTIVE"


# A fresh interpreter that imports the agents and the taxonomy first: that wires nothing (a bare bus hears
# nothing); building the Core (twice) does, and a tag renamed on its bus reaches the agents holding it.
RENAME_IN_FRESH_PROCESS = """
import asyncio, json, sys

import callboard_core.agents
from callboard_core import bus
from callboard_core.capabilities import service as capabilities
from callboard_core.config import Environment, Settings
from callboard_core.container import Core

args = json.loads(sys.argv[1])


async def main() -> dict:
    settings = Settings(
        env=Environment.TEST,
        database_url=args["url"],
        var_dir=args["var"],
        secret_key="k" * 43,
        base_url="http://testserver",
    )
    before = bool(bus.MessageBus().handlers(capabilities.TagRenamed))
    Core.build(settings)
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            await bus.publish(uow.session, capabilities.TagRenamed(args["tag"], args["slug"]))
    finally:
        await core.db.dispose()
    return {"before_build": before, "after_build": len(core.bus.handlers(capabilities.TagRenamed)) == 1}


print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.slow  # a fresh Python process
async def test_core_build_wires_the_agents_as_tag_holders_in_a_fresh_process(
    app: Any, core: Core, client: Any
) -> None:
    admin, _ = await owner_client(app, core, role="SUPPORT")
    async with admin:
        category = await admin.post(
            "/admin/capabilities/categories", json={"name": "Wiring " + uuid.uuid4().hex}
        )
        assert category.status_code == 201, category.text
        tag = await admin.post(
            "/admin/capabilities/tags",
            json={"categoryId": category.json()["id"], "name": "Wired " + uuid.uuid4().hex},
        )
        assert tag.status_code == 201, tag.text
    agent = await register_agent(client, capabilities=[tag.json()["slug"]])
    new_slug = "rewired-" + uuid.uuid4().hex[:8]
    args = {
        "url": core.settings.database_url,
        "var": str(core.settings.var_dir),
        "tag": tag.json()["id"],
        "slug": new_slug,
    }
    assert await run_fresh(RENAME_IN_FRESH_PROCESS, args) == {"before_build": False, "after_build": True}
    me = (await client.get("/api/v2/agents/me", headers=key_headers(agent["apiKey"]))).json()
    assert me["capabilities"] == [new_slug]
