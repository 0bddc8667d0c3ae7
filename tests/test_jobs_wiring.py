"""How the job lifecycle is wired into the agent lifecycle: the hooks (work in flight blocks archive and
delete) come from Core.build, not from importing callboard_core.jobs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from callboard_core.container import Core
from tests.jobs_helpers import new_agent, new_owner

ROOT = Path(__file__).resolve().parent.parent

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
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    env["PYTHONPATH"] = str(ROOT)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", ARCHIVE_IN_FRESH_PROCESS, json.dumps(args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": "agent_lifecycle_blocked", "blockers": ["LIVE_SLOTS"]}
    got = (await owner.client.get(f"/agents/dashboard/{worker.id}")).json()
    assert got["archived"] is False and got["status"] == "ACTIVE"
