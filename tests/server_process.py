"""A real `callboard serve` as a child process over a test's database, for the tests that kill it.

The child runs this checkout's code (PYTHONPATH = the repository root, ahead of the installed package),
with the test's own database URL and secret key (so the keys, sessions and the sandbox processor's webhook
secret made in-process are the server's too) and its base URL on its own port (so the sandbox's webhook
deliveries reach this very server). It is started in a process group of its own, so `kill()` (SIGKILL, as
an out-of-memory killer or a pulled plug would) takes down whatever it runs, at whatever point it is.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx

from callboard_core.config import Settings
from tests.mcp_helpers import CALLBOARD
from tests.netutil import free_port

ROOT = Path(__file__).resolve().parent.parent
READY_WITHIN = 30.0  # seconds


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def kill(self) -> None:
        """SIGKILL the server's process group: no shutdown, no cleanup, transactions cut where they are."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """A graceful stop (SIGTERM), SIGKILL if it does not go within 10 s."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def server_env(settings: Settings, port: int, *, loop: bool, interval: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        CALLBOARD_ENV=settings.env.value,
        CALLBOARD_DATABASE_URL=settings.database_url,
        CALLBOARD_SECRET_KEY=settings.secret_key,
        CALLBOARD_BASE_URL=f"http://127.0.0.1:{port}",
        CALLBOARD_VAR_DIR=str(settings.var_dir),
        CALLBOARD_PROCESSOR="sandbox",
        CALLBOARD_MAIL_BACKEND="outbox",
        CALLBOARD_RATE_LIMIT_ENABLED="false",
        CALLBOARD_SWEEPER_IN_SERVER="true" if loop else "false",
        CALLBOARD_SWEEP_INTERVAL_SECONDS=str(interval),
    )
    return env


def serve_argv(port: int, *args: str) -> list[str]:
    """`callboard serve` over an already migrated database on 127.0.0.1:port, logging warnings and worse."""
    return [
        CALLBOARD,
        "serve",
        "--no-migrate",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        *args,
    ]


def spawn(
    settings: Settings,
    log_path: Path,
    *,
    loop: bool = True,
    interval: float = 0.05,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> ServerProcess:
    """`callboard serve --no-migrate` (the test's fixtures migrated the database) on a free port, with the
    background loop (sweeper, payouts, webhook deliveries) every `interval` seconds when `loop`; `env` adds
    settings, `args` command-line options (`--workers 2`)."""
    port = free_port()
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            serve_argv(port, *args),
            env={**server_env(settings, port, loop=loop, interval=interval), **(env or {})},
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)


async def wait_ready(server: ServerProcess) -> None:
    deadline = time.monotonic() + READY_WITHIN
    async with httpx.AsyncClient(base_url=server.url, timeout=1.0) as client:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise AssertionError(f"the server exited with {server.proc.returncode}:\n{server.log_tail()}")
            with suppress(httpx.HTTPError):
                if (await client.get("/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    server.kill()
    raise AssertionError(
        f"the server did not answer /healthz within {READY_WITHIN:.0f}s:\n{server.log_tail()}"
    )


def can_spawn() -> str | None:
    """Why this platform cannot run the server as a child process (None: it can)."""
    if not hasattr(os, "killpg") or not Path(CALLBOARD).exists():
        return f"cannot spawn `{CALLBOARD} serve` as a killable process group here"
    return None
