"""Throughput benchmark: callboard against a bare Starlette app, both under the same uvicorn, driven by wrk.

    .venv/bin/python bench/run.py                       # SQLite in a temporary directory (the default)
    .venv/bin/python bench/run.py --duration 5 --rounds 1
    .venv/bin/python bench/run.py --database-url postgresql+asyncpg://root@127.0.0.1:5432/postgres

What it does:
  1. makes a temporary var dir and database (SQLite there, or a fresh `callboard_bench_<random>` database
     next to the PostgreSQL admin URL given, dropped afterwards) and runs `callboard migrate`;
  2. starts `callboard serve --no-migrate` (the production entry point: uvicorn, httptools/uvloop when
     installed) and the bare app (bench/bare_app.py) on free 127.0.0.1 ports, in their own process groups;
  3. registers an agent to get an API key;
  4. runs every scenario with wrk: a short warm-up, then `--rounds` interleaved measurements, keeping the
     median of each figure; then reads each server's peak and current resident memory from /proc;
  5. prints a Markdown report and writes it to bench/results.md (overwritten).

wrk and the servers share the machine, so the figures only compare runs on the same machine. During every
measurement the script also accounts the CPU used by other processes (a test suite running next to it);
the report warns when that skews the figures.

The exit code is 0 whether the targets pass or fail (this is a report); it is non-zero only when the
benchmark itself could not run (wrk missing, a server did not start, a request was refused, ...).
wrk comes from the distribution: `apt-get install wrk`.

To add a scenario, append a Scenario to SCENARIOS (method, path, headers, body, which server); headers may
use {api_key}. To add a target, append a Check to CHECKS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from verdicts import Verdict  # noqa: E402
from verdicts import write as write_verdicts  # noqa: E402

DEFAULT_OUTPUT = BENCH_DIR / "results.md"
MB = 1024 * 1024


def percentile(samples: list[float], q: float) -> float:
    """The sample at rank q of the sorted samples (p99 of 100 samples is the slowest); NaN if none."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class BenchError(RuntimeError):
    """The benchmark could not run (as opposed to a target not being met)."""


# --- what is measured ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    server: str  # "callboard" or "bare"
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)  # values may use {api_key} and {writer_key}
    body: bytes | None = None
    expect_status: int = 200


def _draft_body() -> bytes:
    now = datetime.now(UTC)
    return json.dumps(
        {
            "title": "Summarise the quarterly sales report",
            "description": "Two paragraphs, plain English.",
            "jobTypeKey": "general",
            "admissionClosesAt": (now + timedelta(days=1)).isoformat(),
            "fairWorkDurationMs": 2 * 3600 * 1000,
            "latestSubmissionDeadlineAt": (now + timedelta(days=2)).isoformat(),
            "reviewDeadlineAt": (now + timedelta(days=3)).isoformat(),
            "participantCap": 2,
        }
    ).encode()


DRAFT_BODY = _draft_body()

# Measured in this order in every round: each ratio's two scenarios run next to each other (bare between
# the two it is compared with; one worker just before two).
SCENARIOS: list[Scenario] = [
    Scenario("callboard GET /healthz", "callboard", "GET", "/healthz"),
    Scenario(
        "callboard GET /api/v2/agents/me",
        "callboard",
        "GET",
        "/api/v2/agents/me",
        headers={"X-API-Key": "{api_key}"},
    ),
    Scenario("bare GET /ping", "bare", "GET", "/ping"),
    Scenario(
        "callboard GET /api/v2/home", "callboard", "GET", "/api/v2/home", headers={"X-API-Key": "{api_key}"}
    ),
    Scenario(
        "callboard, 2 workers, GET /api/v2/home",
        "callboard-2w",
        "GET",
        "/api/v2/home",
        headers={"X-API-Key": "{api_key}"},
    ),
    # A write against its floor: the same JSON body, a draft job (a claimed agent's key) and one INSERT.
    Scenario(
        "callboard POST /api/v2/jobs (draft)",
        "callboard",
        "POST",
        "/api/v2/jobs",
        headers={"X-API-Key": "{writer_key}"},
        body=DRAFT_BODY,
        expect_status=201,
    ),
    Scenario("bare POST /write", "bare", "POST", "/write", body=DRAFT_BODY, expect_status=201),
]


@dataclass
class Measurement:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    socket_errors: int
    background_cores: float = 0.0  # CPU used by processes other than wrk, the servers and this script
    steal_cores: float = 0.0  # CPU the hypervisor gave to other guests


@dataclass
class Result:
    scenario: Scenario
    runs: list[Measurement] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return statistics.median(m.rps for m in self.runs)

    @property
    def p50_ms(self) -> float:
        return statistics.median(m.p50_ms for m in self.runs)

    @property
    def p99_ms(self) -> float:
        return statistics.median(m.p99_ms for m in self.runs)


@dataclass
class Memory:
    peak_mb: float  # VmHWM
    current_mb: float  # VmRSS
    started_mb: float = 0.0  # VmRSS once the server answered, before any load


@dataclass
class Outcome:
    """What the checks read: the measurements, the servers' memory and the database kind."""

    results: dict[str, Result]
    memory: dict[str, Memory]
    on_postgres: bool


@dataclass(frozen=True)
class Check:
    name: str
    target: str  # "" for an informational row
    measure: Callable[[Outcome], tuple[str, bool | None]]


def _ratio(outcome: Outcome, name: str, base: str) -> tuple[str, float]:
    """The median of the rounds' ratios: each round measures the two scenarios seconds apart, so a slow
    spell of a shared machine weighs on both sides of a ratio instead of on one median."""
    value, reference = outcome.results[name], outcome.results[base]
    ratios = [v.rps / r.rps if r.rps else 0.0 for v, r in zip(value.runs, reference.runs, strict=True)]
    ratio = statistics.median(ratios)
    return (
        f"{ratio:.2f} (rounds {', '.join(f'{x:.2f}' for x in ratios)}; medians "
        f"{value.rps:,.0f} / {reference.rps:,.0f} req/s)",
        ratio,
    )


def _share(name: str, least: float) -> Callable[[Outcome], tuple[str, bool | None]]:
    def check(outcome: Outcome) -> tuple[str, bool | None]:
        text, ratio = _ratio(outcome, name, "bare GET /ping")
        return text, ratio >= least

    return check


def _scale_out(outcome: Outcome) -> tuple[str, bool | None]:
    """Two workers against one: the target holds on PostgreSQL; SQLite's one writer file is shown only."""
    text, factor = _ratio(outcome, "callboard, 2 workers, GET /api/v2/home", "callboard GET /api/v2/home")
    return text, (factor >= 1.6 if outcome.on_postgres else None)


def _write_share(outcome: Outcome) -> tuple[str, bool | None]:
    text, ratio = _ratio(outcome, "callboard POST /api/v2/jobs (draft)", "bare POST /write")
    return text, ratio >= 0.25


def _rss_check(outcome: Outcome) -> tuple[str, bool | None]:
    peak = outcome.memory["callboard"].peak_mb
    return f"{peak:.1f} MB peak", peak < 150


CHECKS: list[Check] = [
    Check(
        "GET /api/v2/agents/me (API key, request log on) vs bare Starlette",
        ">= 0.6 of bare req/s",
        _share("callboard GET /api/v2/agents/me", 0.6),
    ),
    Check(
        "GET /api/v2/home (API key, request log on) vs bare Starlette",
        ">= 0.6 of bare req/s",
        _share("callboard GET /api/v2/home", 0.6),
    ),
    Check(
        "GET /healthz (middleware and routing, no database) vs bare Starlette",
        ">= 0.9 of bare req/s",
        _share("callboard GET /healthz", 0.9),
    ),
    Check(
        "GET /api/v2/home: `serve --workers 2` vs one worker",
        ">= 1.6x on PostgreSQL (info on SQLite)",
        _scale_out,
    ),
    Check(
        "POST /api/v2/jobs (a draft, API key, request log on) vs a bare write (parse, one INSERT, 201)",
        ">= 0.25 of the bare write's req/s",
        _write_share,
    ),
    Check("callboard server resident memory after load", "< 150 MB (VmHWM)", _rss_check),
]


# --- processes ----------------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


_children: list[subprocess.Popen[bytes]] = []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """A child in its own process group (so its own children die with it), logging to log_path."""
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children.append(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the child's process group; SIGKILL the group if the child is still there after `grace` s.

    Signals go to the group only while its leader (our child) is unreaped, so the id cannot be reused."""
    if proc.poll() is not None:
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(grace)


def stop_all() -> None:
    while _children:
        stop(_children.pop())


def _on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks, which stop every child


def memory_of(pid: int) -> Memory:
    """The largest process of the server (a `--workers N` server: its biggest worker, not the supervisor)."""
    peak = current = 0.0
    for member in CpuMeter.tree(pid):
        fields: dict[str, float] = {}
        with suppress(OSError), open(f"/proc/{member}/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmHWM", "VmRSS"):
                    fields[name] = int(value.split()[0]) * 1024 / MB  # kB
        peak, current = max(peak, fields.get("VmHWM", 0.0)), max(current, fields.get("VmRSS", 0.0))
    return Memory(peak_mb=peak, current_mb=current)


class CpuMeter:
    """Machine-wide busy CPU during a measurement, minus what wrk, the servers and this script used: what is
    left is other processes competing for the CPUs (a concurrent test suite, a build), which skews results."""

    _TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    @staticmethod
    def _machine() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            values = [int(x) for x in stat.readline().split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
        return user + nice + system + irq + softirq, steal

    @staticmethod
    def tree(pid: int) -> list[int]:
        """pid and its descendants (a `--workers N` server's worker processes)."""
        found, todo = [], [pid]
        while todo:
            current = todo.pop()
            found.append(current)
            with suppress(OSError):
                for task in os.listdir(f"/proc/{current}/task"):
                    with open(f"/proc/{current}/task/{task}/children") as children:
                        todo.extend(int(child) for child in children.read().split())
        return found

    def _ours(self) -> float:
        jiffies = 0
        for pid in [p for root in self.pids for p in self.tree(root)]:
            with suppress(OSError), open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
                jiffies += int(fields[11]) + int(fields[12])  # utime, stime
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk, once reaped
        me = resource.getrusage(resource.RUSAGE_SELF)
        return jiffies / self._TICK + children.ru_utime + children.ru_stime + me.ru_utime + me.ru_stime

    def __enter__(self) -> CpuMeter:
        self._start = (time.monotonic(), *self._machine(), self._ours())
        return self

    def __exit__(self, *_: object) -> None:
        t0, busy0, steal0, ours0 = self._start
        elapsed = time.monotonic() - t0
        busy1, steal1 = self._machine()
        others = (busy1 - busy0) / self._TICK - (self._ours() - ours0)
        self.background_cores = max(0.0, others / elapsed)
        self.steal_cores = (steal1 - steal0) / self._TICK / elapsed


# --- HTTP helpers (stdlib only, so the client adds nothing to the servers' processes) --------------------


def http(
    method: str, url: str, *, headers: dict[str, str] | None = None, body: Any = None, timeout: float = 10.0
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_ready(server: Server, path: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise BenchError(
                f"the {server.name} server exited with {server.proc.returncode}:\n{server.log_tail()}"
            )
        try:
            status, _ = http("GET", server.base + path, timeout=1.0)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise BenchError(
        f"the {server.name} server did not answer {path} within {timeout:.0f}s:\n{server.log_tail()}"
    )


# --- wrk ----------------------------------------------------------------------------------------------

_TIME_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text.strip())
    if not match:
        raise BenchError(f"cannot read wrk time {text!r}")
    return float(match.group(1)) * _TIME_UNITS[match.group(2)]


def parse_wrk(output: str) -> Measurement:
    def grab(pattern: str) -> str:
        match = re.search(pattern, output, re.MULTILINE)
        if not match:
            raise BenchError(f"cannot find {pattern!r} in wrk output:\n{output}")
        return match.group(1)

    non_2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", output)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return Measurement(
        rps=float(grab(r"^Requests/sec:\s*([\d.]+)")),
        p50_ms=_ms(grab(r"^\s*50(?:\.000)?%\s+(\S+)")),
        p99_ms=_ms(grab(r"^\s*99(?:\.000)?%\s+(\S+)")),
        requests=int(grab(r"^\s*(\d+) requests in")),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(x) for x in sock.groups()) if sock else 0,
    )


def _lua_string(value: str | bytes) -> str:
    raw = value.encode() if isinstance(value, str) else value
    out = []
    for byte in raw:
        char = chr(byte)
        out.append(char if 32 <= byte < 127 and char not in '"\\' else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def wrk_script(scenario: Scenario, keys: dict[str, str], directory: Path) -> Path:
    """Method, headers and body go through a Lua script, so any request shape works the same way."""
    lines = [f"wrk.method = {_lua_string(scenario.method)}"]
    for name, value in scenario.headers.items():
        lines.append(f"wrk.headers[{_lua_string(name)}] = {_lua_string(value.format(**keys))}")
    if scenario.body is not None:
        lines.append(f"wrk.body = {_lua_string(scenario.body)}")
        lines.append('wrk.headers["Content-Type"] = "application/json"')
    path = directory / (re.sub(r"[^A-Za-z0-9]+", "_", scenario.name).strip("_") + ".lua")
    path.write_text("\n".join(lines) + "\n")
    return path


def run_wrk(wrk: str, url: str, script: Path, *, threads: int, connections: int, seconds: int) -> Measurement:
    argv = [
        wrk,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "--timeout",
        "5s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise BenchError(f"wrk failed ({done.returncode}): {' '.join(argv)}\n{done.stdout}{done.stderr}")
    return parse_wrk(done.stdout)


# --- databases ----------------------------------------------------------------------------------------


@contextmanager
def database(url: str | None, tmp: Path) -> Iterator[str]:
    """The database URL to benchmark: a temporary SQLite file by default, a throwaway PostgreSQL database
    created next to (and dropped through) a given postgresql URL, or any other URL as given."""
    if url is None:
        yield f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
        return
    from sqlalchemy.engine import make_url

    admin = make_url(url)
    if not admin.get_backend_name().startswith("postgresql"):
        yield url
        return
    name = f"callboard_bench_{secrets.token_hex(4)}"
    dsn = admin.set(drivername="postgresql").render_as_string(hide_password=False)

    async def admin_sql(sql: str) -> None:
        import asyncpg

        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    try:
        asyncio.run(admin_sql(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        raise BenchError(f"cannot create database {name} through {_redact(url)}: {exc!r}") from exc
    print(f"created PostgreSQL database {name}", flush=True)
    try:
        yield admin.set(drivername="postgresql+asyncpg", database=name).render_as_string(hide_password=False)
    finally:
        stop_all()  # connections must be gone before the drop
        try:
            asyncio.run(admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            print(f"dropped PostgreSQL database {name}", flush=True)
        except Exception as exc:
            print(f"warning: could not drop database {name}: {exc}", file=sys.stderr)


# --- the run ------------------------------------------------------------------------------------------


def callboard_command() -> list[str]:
    script = Path(sys.executable).with_name("callboard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "http_api"]


def server_env(tmp: Path, database_url: str, port: int) -> dict[str, str]:
    env = dict(os.environ)
    # The servers run this checkout's code: the venv's `callboard` script would import the editable install,
    # which is another checkout's when the bench runs in a git worktree sharing the venv.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(
        CALLBOARD_DATABASE_URL=database_url,
        CALLBOARD_ENV="development",
        CALLBOARD_SECRET_KEY=secrets.token_urlsafe(48),
        CALLBOARD_RATE_LIMIT_ENABLED="false",
        CALLBOARD_VAR_DIR=str(tmp / "var"),
        CALLBOARD_BASE_URL=f"http://127.0.0.1:{port}",
        CALLBOARD_MAIL_BACKEND="outbox",
    )
    return env


def start_servers(tmp: Path, database_url: str) -> dict[str, Server]:
    port = free_port()
    env = server_env(tmp, database_url, port)
    migrate_log = tmp / "migrate.log"
    with migrate_log.open("wb") as log:
        done = subprocess.run(
            [*callboard_command(), "migrate"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    if done.returncode != 0:
        raise BenchError(
            f"`callboard migrate` failed ({done.returncode}):\n{migrate_log.read_text()[-3000:]}"
        )

    servers: dict[str, Server] = {}
    # The default `callboard serve`: the request log on (one line per request, to the server's log file).
    argv = [*callboard_command(), "serve", "--no-migrate", "--host", "127.0.0.1", "--port", str(port)]
    log_path = tmp / "callboard.log"
    servers["callboard"] = Server("callboard", port, spawn(argv, env, log_path), log_path)
    # The same with two worker processes, over the same database (its own port and var dir).
    port2 = free_port()
    env2 = {**env, "CALLBOARD_BASE_URL": f"http://127.0.0.1:{port2}", "CALLBOARD_VAR_DIR": str(tmp / "var2")}
    argv = [*callboard_command(), "serve", "--no-migrate", "--host", "127.0.0.1", "--port", str(port2)]
    log_path = tmp / "callboard-2w.log"
    servers["callboard-2w"] = Server(
        "callboard-2w", port2, spawn([*argv, "--workers", "2"], env2, log_path), log_path
    )

    # Same uvicorn options as `callboard serve`: loop and http "auto" (uvloop/httptools when installed),
    # proxy headers on, one worker, access log silenced by the warning level.
    bare_port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "bare_app:app",
        "--app-dir",
        str(BENCH_DIR),
        "--host",
        "127.0.0.1",
        "--port",
        str(bare_port),
        "--log-level",
        "warning",
        "--loop",
        "auto",
        "--http",
        "auto",
        "--proxy-headers",
    ]
    log_path = tmp / "bare.log"
    bare_env = {**os.environ, "BENCH_BARE_DATABASE_URL": database_url}  # its write floor's database
    servers["bare"] = Server("bare", bare_port, spawn(argv, bare_env, log_path), log_path)

    wait_ready(servers["callboard"], "/healthz")
    wait_ready(servers["callboard-2w"], "/healthz")
    wait_ready(servers["bare"], "/ping")
    return servers


async def claimed_agent_key(database_url: str, tmp: Path) -> str:
    """A claimed agent's key (a draft needs an owner), made in process: an API key is a hash in the database,
    so the servers take it whatever secret they run with."""
    from callboard_core.agents import dashboard
    from callboard_core.agents.schemas import AgentCreate
    from callboard_core.config import load_settings
    from callboard_core.container import Core
    from callboard_core.principals import Actor
    from callboard_core.users import service as users

    settings = load_settings(
        database_url=database_url,
        env="development",
        secret_key=secrets.token_urlsafe(48),
        var_dir=tmp / "var",
    )
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            owner = await users.create(
                uow.session, email=f"bench-{secrets.token_hex(4)}@example.com", verified=True
            )
            body = AgentCreate.model_validate(
                {"name": "Bench Writer", "endpointUrl": "https://agent.example.com/hook", "capabilities": []}
            )
            created = await dashboard.create(uow.session, Actor.owner(owner.id), body)
        return str(created.api_key)
    finally:
        await core.close()


def register_agent(server: Server) -> str:
    status, body = http(
        "POST",
        server.base + "/api/v2/agents/register",
        body={"name": "Bench", "endpointUrl": "https://bench.example.com"},
    )
    if status != 201:
        raise BenchError(f"registering the bench agent answered {status}: {body[:500]!r}")
    return str(json.loads(body)["apiKey"])


def check_scenario(scenario: Scenario, server: Server, keys: dict[str, str]) -> None:
    headers = {k: v.format(**keys) for k, v in scenario.headers.items()}
    status, body = http(scenario.method, server.base + scenario.path, headers=headers, body=scenario.body)
    if status != scenario.expect_status:
        raise BenchError(f"{scenario.name}: expected {scenario.expect_status}, got {status}: {body[:500]!r}")


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for package in (
        "uvicorn",
        "starlette",
        "sqlalchemy",
        "pydantic",
        "uvloop",
        "httptools",
        "aiosqlite",
        "asyncpg",
    ):
        try:
            from importlib.metadata import version

            versions.append(f"{package} {version(package)}")
        except Exception:
            continue
    return {
        "nproc": f"{len(os.sched_getaffinity(0))} (cpu_count {os.cpu_count()})",
        "cpu": cpu,
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "packages": ", ".join(versions),
    }


def run(args: argparse.Namespace, wrk: str) -> tuple[str, list[Verdict]]:
    started = datetime.now(UTC)
    tmp = Path(tempfile.mkdtemp(prefix="callboard-bench-"))
    try:
        with database(args.database_url, tmp) as database_url:
            try:
                servers = start_servers(tmp, database_url)
                at_start = {name: memory_of(server.proc.pid) for name, server in servers.items()}
                keys = {
                    "api_key": register_agent(servers["callboard"]),
                    "writer_key": asyncio.run(claimed_agent_key(database_url, tmp)),
                }
                for scenario in SCENARIOS:
                    check_scenario(scenario, servers[scenario.server], keys)
                scripts = {s.name: wrk_script(s, keys, tmp) for s in SCENARIOS}
                results = {s.name: Result(s) for s in SCENARIOS}

                pids = [server.proc.pid for server in servers.values()]

                def measure(scenario: Scenario, seconds: int) -> Measurement:
                    url = servers[scenario.server].base + scenario.path
                    with CpuMeter(pids) as meter:
                        m = run_wrk(
                            wrk,
                            url,
                            scripts[scenario.name],
                            threads=args.threads,
                            connections=args.connections,
                            seconds=seconds,
                        )
                    m.background_cores, m.steal_cores = meter.background_cores, meter.steal_cores
                    return m

                chosen = [s for s in SCENARIOS if not args.only or any(o in s.name for o in args.only)]
                for scenario in chosen:
                    if args.warmup:
                        print(f"warm-up  {scenario.name} ({args.warmup}s)", flush=True)
                        measure(scenario, args.warmup)
                for round_no in range(1, args.rounds + 1):
                    for scenario in chosen:
                        m = measure(scenario, args.duration)
                        print(
                            f"round {round_no}  {scenario.name}: {m.rps:,.0f} req/s, p50 {m.p50_ms:.2f} ms, "
                            f"p99 {m.p99_ms:.2f} ms; other processes {m.background_cores:.2f} CPUs",
                            flush=True,
                        )
                        if m.non_2xx or m.socket_errors:
                            raise BenchError(
                                f"{scenario.name}: {m.non_2xx} non-2xx responses and "
                                f"{m.socket_errors} socket errors in {m.requests} requests; "
                                f"the measurement is not valid.\n"
                                f"{servers[scenario.server].log_tail()}"
                            )
                        results[scenario.name].runs.append(m)
                memory = {name: memory_of(server.proc.pid) for name, server in servers.items()}
                for name, mem in memory.items():
                    mem.started_mb = at_start[name].current_mb
                for name, server in servers.items():
                    if server.proc.poll() is not None:
                        raise BenchError(f"the {name} server died during the run:\n{server.log_tail()}")
            finally:
                stop_all()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.only:
        for name, mem in memory.items():
            print(f"memory  {name}: {mem.started_mb:.1f} MB at start, {mem.peak_mb:.1f} MB peak")
        return "", []
    database_kind = "SQLite (temporary file)" if args.database_url is None else _redact(args.database_url)
    return report(args, started, database_kind, results, memory)


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _fmt_ms(value: float) -> str:
    return f"{value:.2f} ms"


BUSY_MACHINE_CPUS = 0.25


def _background_lines(args: argparse.Namespace, results: dict[str, Result]) -> list[str]:
    runs = [m for result in results.values() for m in result.runs]
    worst = max(m.background_cores for m in runs)
    steal = max(m.steal_cores for m in runs)
    lines = [
        f"- Other processes during the measurements: up to {worst:.2f} CPUs busy"
        f" (median {statistics.median(m.background_cores for m in runs):.2f}); hypervisor steal up to {steal:.2f} CPUs"
    ]
    if args.database_url is not None:
        lines.append("  (with an external database, its server's CPU is counted as another process)")
    if worst > BUSY_MACHINE_CPUS and args.database_url is None:
        lines += [
            "",
            f"> **Warning**: other processes used up to {worst:.2f} CPUs while wrk was running; the"
            " figures are skewed. Rerun on a quiet machine.",
        ]
    return lines


def report(
    args: argparse.Namespace,
    started: datetime,
    database_kind: str,
    results: dict[str, Result],
    memory: dict[str, Memory],
) -> tuple[str, list[Verdict]]:
    info = machine()
    lines = [
        "# callboard benchmark",
        "",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: nproc {info['nproc']}, {info['cpu']}, Linux {info['kernel']}",
        f"- Python: {info['python']}; {info['packages']}",
        f"- Database: {database_kind}",
        f"- Load: wrk -t{args.threads} -c{args.connections}, {args.duration}s x {args.rounds} rounds "
        f"(interleaved; ratios are the median of the rounds' ratios), {args.warmup}s warm-up; wrk shares the machine with the servers",
        "- Servers: `callboard serve --no-migrate` as shipped (request log on, written to a file), the same "
        "with `--workers 2` over the same database, and `uvicorn bare_app:app` (bench/bare_app.py) with the "
        "same uvicorn options; one worker unless named",
        *_background_lines(args, results),
        "",
        "| Scenario | Req/s (median) | p50 | p99 | Req/s per round | Server RSS peak |",
        "|---|--:|--:|--:|---|--:|",
    ]
    for name, result in results.items():
        rounds = ", ".join(f"{m.rps:,.0f}" for m in result.runs)
        lines.append(
            f"| {name} | {result.rps:,.0f} | {_fmt_ms(result.p50_ms)} | {_fmt_ms(result.p99_ms)} | "
            f"{rounds} | {memory[result.scenario.server].peak_mb:.1f} MB |"
        )
    lines += [
        "",
        "| Server (largest process) | RSS after start-up | RSS peak (VmHWM) | RSS after load (VmRSS) |",
        "|---|--:|--:|--:|",
    ]
    for name, mem in memory.items():
        lines.append(f"| {name} | {mem.started_mb:.1f} MB | {mem.peak_mb:.1f} MB | {mem.current_mb:.1f} MB |")
    lines += ["", "| Check | Measured | Target | Result |", "|---|---|---|---|"]
    outcome = Outcome(results, memory, on_postgres=(args.database_url or "").startswith("postgres"))
    judged: list[Verdict] = []
    for check in CHECKS:
        measured, ok = check.measure(outcome)
        verdict = Verdict(
            f"{check.name}: {check.target}", "postgres" if outcome.on_postgres else "sqlite", measured, ok
        )
        judged.append(verdict)
        lines.append(f"| {check.name} | {measured} | {check.target or '-'} | {verdict.word} |")
    return "\n".join(lines) + "\n", judged


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark callboard against a bare Starlette app with wrk.")
    parser.add_argument("--duration", type=int, default=8, help="whole seconds per measurement (default 8)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved measurements per scenario (default 5)"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="warm-up seconds per scenario, 0 for none (default 2)"
    )
    parser.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    parser.add_argument(
        "--database-url",
        default=None,
        help="default: a temporary SQLite file. A postgresql URL is an admin URL: a fresh "
        "callboard_bench_<random> database is created through it, used and dropped.",
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="report file (default bench/results.md)"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="TEXT",
        help="measure only the scenarios whose name contains TEXT (repeatable): the rounds are printed, no "
        "report or verdicts are written (for quick comparisons)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.duration < 1 or args.warmup < 0 or args.connections < 1 or args.threads < 1:
        parser.error(
            "--rounds, --duration, --connections and --threads must be positive, --warmup not negative"
        )
    if args.threads > args.connections:
        parser.error("--threads cannot exceed --connections")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wrk = shutil.which("wrk")
    if wrk is None:
        print(
            "bench: wrk is not installed; install it with `apt-get install wrk` (Debian/Ubuntu).",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    try:
        text, judged = run(args, wrk)
    except BenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        stop_all()
    if args.only:
        return 0
    print()
    print(text, end="")
    args.output.write_text(text)
    write_verdicts(
        args.output.with_suffix(".json"), "run", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), judged
    )
    print(f"\nwritten to {args.output} (verdicts in {args.output.with_suffix('.json').name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
