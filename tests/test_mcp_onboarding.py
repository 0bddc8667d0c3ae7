"""End to end, over real HTTP: an owner mints an onboarding session, the agent reports presence and saves its
setup, the owner activates, `callboard kit install` writes the kit, and an MCP client started from the kit's
own configuration calls `home`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard_core.auth import sessions
from callboard_core.container import Core
from callboard_core.users import service as users
from tests.conftest import make_settings
from tests.mcp_helpers import CALLBOARD, call, call_error, serving
from tests.netutil import free_port


@pytest.mark.slow  # spawns `callboard mcp`
async def test_onboarding_to_kit_to_mcp_home(core: Any, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The service as deployed: its base URL is the one kits point at.
    served = Core.build(make_settings(core.settings.database_url, core.settings.var_dir, base_url=url))
    async with core.uow() as uow:
        user = await users.create(uow.session, email=f"o{uuid.uuid4().hex[:10]}@example.com", verified=True)
        token, _ = await sessions.start(uow.session, user, ttl=timedelta(days=1))
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(served.close)
        assert await stack.enter_async_context(serving(served, port=port)) == url
        owner = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, cookies={sessions.COOKIE_NAME: token}, headers={"Origin": url})
        )
        agent = await stack.enter_async_context(httpx.AsyncClient(base_url=url))

        minted = await owner.post(
            "/api/onboarding/mint", json={"role": "SELLER", "sellerCapabilities": ["python"]}
        )
        assert minted.status_code == 201, minted.text
        slug, bearer = minted.json()["workspaceSlug"], {"Authorization": f"Bearer {minted.json()['token']}"}

        # The agent, with nothing but the bearer token, says hello and proposes itself.
        presence = await agent.post(
            f"/api/agent/onboard/{slug}/presence", json={"message": "hi"}, headers=bearer
        )
        assert presence.status_code == 201, presence.text
        setup = await agent.post(
            f"/api/agent/onboard/{slug}/setup",
            headers=bearer,
            json={"agentName": "Kit Agent", "role": "SELLER", "sellerManifest": {"capabilities": ["python"]}},
        )
        assert setup.status_code == 200, setup.text

        # The owner sees it and activates it for a generic MCP runtime.
        [session] = (await owner.get("/api/onboarding/sessions")).json()["sessions"]
        activated = await owner.post(
            f"/api/onboarding/sessions/{session['id']}/activate", json={"runtimeTarget": "MCP"}
        )
        assert activated.status_code == 201, activated.text
        command = shlex.split(activated.json()["installCommand"])
        assert command[:3] == ["callboard", "kit", "install"] and command[command.index("--url") + 1] == url
        assert "${CALLBOARD_API_KEY}" in json.dumps(
            activated.json()["runtimeKit"]
        )  # no key in the owner's copy

        # On the agent's machine: the install command, exactly as given.
        kit_dir = tmp_path / "kit"
        proc = await asyncio.create_subprocess_exec(
            CALLBOARD,
            *command[1:],
            "--dir",
            str(kit_dir),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, (out + err).decode()
        config = json.loads((kit_dir / "mcp.json").read_text())["mcpServers"]["callboard"]
        assert config["url"] == f"{url}/mcp"

        # An MCP client started from the kit's own configuration.
        from mcp.client.client import Client
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        http = create_mcp_http_client(headers=config["headers"])
        async with http, Client(streamable_http_client(config["url"], http_client=http)) as mcp:
            home = await call(mcp, "home")
            assert home["agentId"] == activated.json()["activation"]["agentId"]
            assert home["readiness"]["claimed"] is True
            # The first hour, guided by home alone: home -> the starter job -> submit, three calls, though
            # the owner left the public listing off (the default).
            assert home["readiness"]["workerEnabled"] is False
            first = home["readiness"]["nextSteps"][0]
            assert first["tool"] == "start_starter_job", home["readiness"]["nextSteps"]
            started = await call(mcp, first["tool"], **first["arguments"])
            submit = started["nextAction"]
            assert submit["tool"] == "submit", started
            arguments = json.loads(
                json.dumps(submit["arguments"]).replace('""', '"I summarise Python code."')
            )
            submitted = await call(mcp, "submit", **arguments)
            assert submitted["jobStatus"] == "AWARDED", submitted
            # Nothing the agent does lists it against its owner's choice; home says whom to ask, and names
            # the notifications tool for the award's notice.
            refused = await call_error(mcp, "update_profile", changes={"workerEnabled": True})
            assert refused["code"] == "owner_decides_listing" and refused["nextAction"]["tool"] is None
            after = await call(mcp, "home")
            asks = [s for s in after["readiness"]["nextSteps"] if s["tool"] is None]
            assert asks and "worker role" in asks[0]["description"], after["readiness"]
            assert after["unreadNotifications"] >= 1  # the award's notice
            assert "notifications" in [s["tool"] for s in after["readiness"]["nextSteps"]], after
        handle = (await owner.get(f"/agents/dashboard/{home['agentId']}")).json()["handle"]
        assert (await agent.get(f"/api/v2/directory/agents/{handle}")).status_code == 404

        # The install token worked once.
        again = await asyncio.create_subprocess_exec(
            CALLBOARD,
            *command[1:],
            "--dir",
            str(tmp_path / "again"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(again.communicate(), 60)
        assert again.returncode != 0 and b"install_token_used" in err
