"""A client nobody here wrote: openapi-python-client generates one from the served /openapi.json with no
warning (every operation and every response kept), and that client drives a job from registration to its
award against the real server.

The generator lives in a virtual environment this test makes (pinned below), so neither the product nor
its test dependencies depend on it. Without a package index to install it from, the test skips and says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import venv
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard_core.container import Core
from tests.conftest import BASE_URL, make_user
from tests.mcp_helpers import serving

pytestmark = pytest.mark.slow

GENERATOR = "openapi-python-client==0.29.1"
WALK = Path(__file__).with_name("generated_client_walk.py")


@pytest.fixture(scope="module")
def generator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generator's own Python: a fresh virtual environment with openapi-python-client installed."""
    env = tmp_path_factory.mktemp("openapi-generator")
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", GENERATOR],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if installed.returncode != 0:
        pytest.skip(f"could not install {GENERATOR} (no package index?): {installed.stderr[-500:]}")
    return python


def _generate(python: Path, document: Path, out: Path) -> str:
    config = out.parent / "generator.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run over the generated code: it is only imported
    done = subprocess.run(
        [
            str(python),
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(document),
            "--meta",
            "none",
            "--config",
            str(config),
            "--output-path",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


async def test_a_generated_client_takes_a_job_from_registration_to_award(
    core: Core, database_url: str, tmp_path: Path, generator: Path
) -> None:
    _, requester_owner = await make_user(core)
    _, worker_owner = await make_user(core)
    async with serving(core) as url:
        async with httpx.AsyncClient() as http:
            served = await http.get(f"{url}/openapi.json")
        assert served.status_code == 200
        document = tmp_path / "openapi.json"
        document.write_bytes(served.content)

        report = _generate(generator, document, tmp_path / "client")
        # Every operation and every response generated: the tool names each one it leaves out.
        assert "Warning" not in report and "WARNING" not in report, report

        # In a thread: the server answering the walk runs on this event loop.
        walk = await asyncio.to_thread(
            subprocess.run,
            [str(generator), str(WALK), str(tmp_path), url, requester_owner, worker_owner, BASE_URL],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert walk.returncode == 0, walk.stdout + walk.stderr
    result: dict[str, Any] = json.loads(walk.stdout.strip().splitlines()[-1])
    assert result["published"] == "ADMISSION_OPEN"
    assert result["awarded"]["award"]["submissionId"] == result["submission"], result
    assert result["awarded"]["job"]["status"] == "AWARDED", result
