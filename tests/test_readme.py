"""The README's "Connect your agent" runs as written: its shell block (mint, name, activate, `callboard kit
install`) against a real server with a signed-in owner's cookie jar, then its Python block (an MCP client from
the kit's configuration), which must print the starter job as the first step."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from callboard_core.auth import sessions
from callboard_core.container import Core
from tests.conftest import make_settings, make_user
from tests.mcp_helpers import serving
from tests.netutil import free_port

README = Path(__file__).resolve().parent.parent / "README.md"
pytestmark = pytest.mark.slow


def _blocks(section: str) -> dict[str, str]:
    """The first fenced block of each language in the README section with this heading."""
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    found: dict[str, str] = {}
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S):
        found.setdefault(lang, body)
    return found


async def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """In a thread: the server answering it runs on this event loop."""
    return await asyncio.to_thread(
        subprocess.run, argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


async def test_connect_your_agent_runs_as_written(core: Any, tmp_path: Path) -> None:
    blocks = _blocks("Connect your agent")
    assert set(blocks) >= {"sh", "python"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    served = Core.build(make_settings(core.settings.database_url, core.settings.var_dir, base_url=url))
    _, token = await make_user(core)  # a verified owner, signed in
    # The jar curl's -c would have written at sign-in (Netscape format).
    (tmp_path / "jar").write_text(f"127.0.0.1\tFALSE\t/\tFALSE\t0\t{sessions.COOKIE_NAME}\t{token}\n")
    env = {**os.environ, "B": url, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(served.close)
        await stack.enter_async_context(serving(served, port=port))
        shell = await _run(["bash", "-euo", "pipefail", "-c", blocks["sh"]], tmp_path, env)
        assert shell.returncode == 0, shell.stdout + shell.stderr
        assert (tmp_path / "kit" / "mcp.json").exists()
        client = await _run([sys.executable, "-c", blocks["python"]], tmp_path, env)
    assert client.returncode == 0, client.stdout + client.stderr
    first = json.loads(client.stdout.strip().splitlines()[-1])
    assert first["tool"] == "start_starter_job", first
