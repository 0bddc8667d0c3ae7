"""Job lifecycle benchmark: discovery over 100,000 open jobs, the agent's home, admission of 5,000 applicants
and the server's memory, on SQLite and on PostgreSQL in one run.

    .venv/bin/python bench/jobs.py                              # both databases (the default)
    .venv/bin/python bench/jobs.py --database sqlite --duration 3 --rounds 1
    .venv/bin/python bench/jobs.py --database postgres --postgres-url postgresql://root@127.0.0.1:5432/test

For each database:
  1. a fresh database (a temporary SQLite file, or a `callboard_bench_<random>` PostgreSQL database created
     through --postgres-url and dropped afterwards), migrated with callboard_core.seed.migrate_and_seed (the
     code behind `callboard migrate`);
  2. owners and claimed agents with read+write keys through the core's own services (dashboard.create): a
     worker with two capability tags, requesters, and a "home" agent;
  3. phase A, empty database: `callboard serve --no-migrate` (sweeper and rate limiting off) and the bare
     Starlette app (bench/bare_app.py); GET /api/v2/jobs for the worker, plain, `include=rookie` and with a
     `cursor`, measured by wrk (warm-up, then interleaved rounds, medians); then the home agent's slots,
     invitations and jobs are made through the HTTP API;
  4. 100,000 ADMISSION_OPEN jobs inserted set-based (the seeded capability tags plus some untagged ones,
     realistic titles, published over the last week, deadlines in the future; on PostgreSQL then VACUUM
     ANALYZE, as autovacuum would, so it does not run during the measurement);
  5. phase B, a fresh server over the 100,000 jobs: the bare endpoint and GET /api/v2/home at higher
     concurrency (requests per second), the three discovery requests at the same concurrency as phase A
     (latency); then the server's resident memory from /proc;
  6. admission in-process: close_admission for a job with 5,000 PENDING applications (participantCap 50),
     a few repetitions on fresh jobs, median;
  7. the query plans of the three discovery statements (EXPLAIN QUERY PLAN / EXPLAIN ANALYZE), for the report.

The report goes to bench/jobs_results.md (overwritten). Helpers (ports, processes, wrk, /proc, the CPU
meter, the throwaway PostgreSQL database) come from bench/run.py. The exit code is 0 whether the targets
pass or fail; it is non-zero only when the benchmark could not run (wrk missing, PostgreSQL unreachable,
a server that did not start, a request refused, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from sqlalchemy import Table

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
for _path in (str(ROOT), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import run as base  # noqa: E402  (bench/run.py: processes, wrk, /proc, the CPU meter, throwaway databases)
from run import BenchError, CpuMeter, Measurement, Memory, Result, Scenario, Server  # noqa: E402

DEFAULT_OUTPUT = BENCH_DIR / "jobs_results.md"
DEFAULT_POSTGRES_URL = "postgresql://root@127.0.0.1:5432/test"

# Targets (from the issue).
DISCOVERY_P99_MS = 25.0
DISCOVERY_EMPTY_FACTOR = 2.0
HOME_SHARE_OF_BARE = 0.40
ADMISSION_SECONDS = 1.0
RSS_MB = 150.0

WORKER_TAGS = ["python", "sql"]
HOME_TAGS = ["python", "data-analysis"]
UNTAGGED_SHARE = 0.10
OWN_OWNER_SHARE = 0.01  # jobs posted by another agent of the worker's own owner: discovery must skip them
BUSY_MACHINE_CPUS = 0.25  # other processes' CPU above which the report warns (as bench/run.py)


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


# --- fixtures -----------------------------------------------------------------------------------------


@dataclass
class AgentRef:
    id: str
    key: str
    owner_id: str


@dataclass
class Fixtures:
    worker: AgentRef
    home: AgentRef
    home_requester: AgentRef  # invites the home agent to its jobs
    requesters: list[AgentRef]  # post the 100,000 jobs
    own_requester: AgentRef  # an agent of the worker's owner
    admission_requester: AgentRef
    applicants_owner_id: str
    tag_ids: dict[str, str]  # slug -> id, every seeded capability tag
    general_type: tuple[str, Any]  # the `general` job type's id and submission requirements
    seed_seconds: float = 0.0
    home_counts: dict[str, int] = field(default_factory=dict)


def table(model: Any) -> Table:
    """A model's Table, for set-based inserts (`session.execute(table(Job).insert(), rows)`)."""
    return cast(Table, model.__table__)


def bench_settings(database_url: str, tmp: Path, secret_key: str, **overrides: Any) -> Any:
    from callboard_core.config import load_settings

    return load_settings(
        **{
            "database_url": database_url,
            "env": "development",
            "secret_key": secret_key,
            "rate_limit_enabled": False,
            "sweeper_in_server": False,
            "var_dir": tmp / "var",
            "mail_backend": "outbox",
            **overrides,
        }
    )


async def migrate_and_create_agents(settings: Any) -> Fixtures:
    from sqlalchemy import select

    from callboard_core.agents import dashboard
    from callboard_core.agents.schemas import AgentCreate
    from callboard_core.capabilities.models import CapabilityTag
    from callboard_core.container import Core
    from callboard_core.job_types.models import JobType
    from callboard_core.principals import Actor
    from callboard_core.seed import migrate_and_seed
    from callboard_core.users import service as users

    await migrate_and_seed(settings)
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            session = uow.session
            owners: dict[str, str] = {}
            for role in ("worker", "requesters", "home", "inviter", "admission", "applicants"):
                user = await users.create(session, email=f"bench-{role}-{secrets.token_hex(4)}@example.com")
                owners[role] = user.id

            async def agent(owner: str, name: str, tags: list[str]) -> AgentRef:
                body = AgentCreate.model_validate(
                    {"name": name, "endpointUrl": "https://agent.example.com/hook", "capabilities": tags}
                )
                created = await dashboard.create(session, Actor.owner(owners[owner]), body)
                return AgentRef(created.agent.id, created.api_key, owners[owner])

            worker = await agent("worker", "Bench Worker", WORKER_TAGS)
            own_requester = await agent("worker", "Bench Worker's Sibling", [])
            home = await agent("home", "Bench Home", HOME_TAGS)
            home_requester = await agent("inviter", "Bench Inviter", ["python"])
            requesters = [await agent("requesters", f"Bench Requester {i}", []) for i in range(12)]
            admission_requester = await agent("admission", "Bench Admission", [])
            tags = dict(
                (
                    await session.execute(
                        select(CapabilityTag.slug, CapabilityTag.id).order_by(CapabilityTag.slug)
                    )
                ).all()
            )
            general = (
                await session.execute(
                    select(JobType.id, JobType.submission_requirements_json).where(JobType.key == "general")
                )
            ).one()
    finally:
        await core.close()
    return Fixtures(
        worker=worker,
        home=home,
        home_requester=home_requester,
        requesters=requesters,
        own_requester=own_requester,
        admission_requester=admission_requester,
        applicants_owner_id=owners["applicants"],
        tag_ids=tags,
        general_type=(general[0], general[1]),
    )


_VERBS = [
    "Summarise",
    "Translate",
    "Review",
    "Refactor",
    "Write unit tests for",
    "Classify",
    "Extract the tables from",
    "Draft release notes for",
    "Benchmark",
    "Fix the flaky test in",
    "Label",
    "Transcribe",
    "Proofread",
    "Audit",
    "Migrate",
    "Document",
    "Profile",
    "Clean up",
    "Compare",
    "Annotate",
]
_OBJECTS = [
    "the quarterly sales report",
    "our onboarding FAQ",
    "a 40-page supplier contract",
    "the payments service",
    "last week's support tickets",
    "the Terraform modules",
    "a product catalogue CSV",
    "the churn dashboard",
    "a customer interview recording",
    "the mobile app's release checklist",
    "two competing vendor proposals",
    "the invoice parser",
    "a German privacy notice",
    "the nightly ETL job",
    "the public API's error messages",
    "a dataset of 12k product reviews",
    "the Kubernetes manifests",
    "the landing page copy",
    "an academic paper on retrieval",
    "the PostgreSQL slow query log",
]
_SUFFIXES = [
    "",
    "",
    "",
    " (English to German)",
    " before Friday",
    ": two pages at most",
    " for the board meeting",
    " with a short risk summary",
    " and flag anything unusual",
    " in plain English",
]


def job_rows(fixtures: Fixtures, count: int, now: datetime, rng: random.Random) -> list[dict[str, Any]]:
    from callboard_core.ids import new_id
    from callboard_core.jobs.states import JobStatus

    type_id, requirements = fixtures.general_type
    tags = list(fixtures.tag_ids.items())
    rows = []
    for _ in range(count):
        requester = (
            fixtures.own_requester if rng.random() < OWN_OWNER_SHARE else rng.choice(fixtures.requesters)
        )
        slug, tag_id = (None, None) if rng.random() < UNTAGGED_SHARE else rng.choice(tags)
        published = now - timedelta(seconds=rng.uniform(60, 7 * 86400))
        admission = now + timedelta(seconds=rng.uniform(3600, 7 * 86400))
        fair_ms = rng.choice([2, 4, 8, 24]) * 3600 * 1000
        latest = admission + timedelta(milliseconds=fair_ms) + timedelta(hours=rng.uniform(1, 48))
        title = f"{rng.choice(_VERBS)} {rng.choice(_OBJECTS)}{rng.choice(_SUFFIXES)}"
        rows.append(
            dict(
                id=new_id("job"),
                requester_agent_id=requester.id,
                owner_id=requester.owner_id,
                status=JobStatus.ADMISSION_OPEN,
                title=title,
                description=f"{title}. Deliver a structured summary with sources; ask clarifying questions "
                "before you start if anything is ambiguous.",
                job_type_id=type_id,
                job_type_key="general",
                capability_tag_id=tag_id,
                capability_slug=slug,
                preview_json={"pages": rng.randint(1, 60), "language": rng.choice(["en", "de", "fr"])},
                work_brief_json={"instructions": "The full brief, shown once the slot is acknowledged."},
                submission_requirements_json=requirements,
                reward_amount_cents=0,
                currency="usd",
                application_cap=50,
                participant_cap=rng.choice([1, 2, 3, 5]),
                application_count=rng.randint(0, 12),
                admission_closes_at=admission,
                fair_work_duration_ms=fair_ms,
                latest_submission_deadline_at=latest,
                review_deadline_at=latest + timedelta(days=2),
                published_at=published,
                created_at=published - timedelta(minutes=rng.uniform(1, 120)),
                updated_at=published,
            )
        )
    return rows


async def seed_jobs(settings: Any, fixtures: Fixtures, count: int, batch: int = 5000) -> float:
    """`count` open jobs, set-based; on PostgreSQL then VACUUM ANALYZE, a checkpoint and no autovacuum running.
    Returns the seconds it took."""
    from callboard_core.clock import now as clock_now
    from callboard_core.container import Core
    from callboard_core.jobs.models import Job

    rng = random.Random(20260101)
    started = time.perf_counter()
    core = Core.build(settings)
    try:
        now = clock_now()
        done = 0
        while done < count:
            n = min(batch, count - done)
            async with core.uow() as uow:
                await uow.session.execute(table(Job).insert(), job_rows(fixtures, n, now, rng))
            done += n
        if not core.db.is_sqlite:
            async with core.db.write_engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.exec_driver_sql("VACUUM ANALYZE")
                # Flush what seeding dirtied and let autovacuum finish now, not during the measurements.
                await conn.exec_driver_sql("CHECKPOINT")
                for _ in range(120):
                    busy = (
                        await conn.exec_driver_sql(
                            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
                        )
                    ).scalar_one()
                    if not busy:
                        break
                    await asyncio.sleep(0.5)
    finally:
        await core.close()
    return time.perf_counter() - started


# --- admission ----------------------------------------------------------------------------------------


@dataclass
class AdmissionRun:
    call_s: float  # close_admission itself
    total_s: float  # with the commit
    admitted: int
    waitlisted: int


async def bench_admission(
    settings: Any, fixtures: Fixtures, applicants: int, participant_cap: int, reps: int
) -> list[AdmissionRun]:
    from sqlalchemy import func, select

    from callboard_core.agents.models import Agent, ClaimStatus
    from callboard_core.clock import now as clock_now
    from callboard_core.container import Core
    from callboard_core.ids import new_id
    from callboard_core.jobs.admission import close_admission
    from callboard_core.jobs.models import Job, JobApplication, ParticipationSlot
    from callboard_core.jobs.states import ApplicationStatus

    rng = random.Random(7)
    core = Core.build(settings)
    runs: list[AdmissionRun] = []
    try:
        now = clock_now()
        agent_ids = [new_id("agt") for _ in range(applicants)]
        tag = secrets.token_hex(3)
        agent_rows = [
            dict(
                id=a,
                owner_id=fixtures.applicants_owner_id,
                name=f"Applicant {i}",
                handle=f"applicant-{tag}-{i}",
                endpoint_url="https://agent.example.com/hook",
                claim_status=ClaimStatus.CLAIMED,
                claimed_at=now,
                created_at=now,
                updated_at=now,
            )
            for i, a in enumerate(agent_ids)
        ]
        async with core.uow() as uow:
            for start in range(0, len(agent_rows), 2500):
                await uow.session.execute(table(Agent).insert(), agent_rows[start : start + 2500])

        for rep in range(reps):
            now = clock_now()
            job_row = job_rows(fixtures, 1, now, rng)[0]
            job_row.update(
                requester_agent_id=fixtures.admission_requester.id,
                owner_id=fixtures.admission_requester.owner_id,
                title=f"Admission benchmark {rep + 1}",
                application_cap=applicants,
                participant_cap=participant_cap,
                new_worker_reserved_slot_count=min(5, participant_cap),
                application_count=applicants,
            )
            new_workers = [rng.random() < 0.2 for _ in agent_ids]
            job_row["new_worker_application_count"] = sum(new_workers)
            applications = [
                dict(
                    id=new_id("app"),
                    job_id=job_row["id"],
                    worker_agent_id=a,
                    status=ApplicationStatus.PENDING,
                    rookie=rng.random() < 0.3,
                    new_worker=new_workers[i],
                    capability_reputation=round(rng.uniform(0, 100), 2),
                    created_at=now - timedelta(seconds=rng.uniform(0, 86400)),
                    updated_at=now,
                )
                for i, a in enumerate(agent_ids)
            ]
            async with core.uow() as uow:
                await uow.session.execute(table(Job).insert(), [job_row])
                for start in range(0, len(applications), 2500):
                    await uow.session.execute(
                        table(JobApplication).insert(), applications[start : start + 2500]
                    )

            async with core.uow() as uow:
                job = await uow.session.get(Job, job_row["id"])
                assert job is not None
                started = time.perf_counter()
                await close_admission(uow.session, job)
                call_s = time.perf_counter() - started
            total_s = time.perf_counter() - started

            async with core.uow(write=False) as uow:
                slots = (
                    await uow.session.execute(
                        select(func.count())
                        .select_from(ParticipationSlot)
                        .where(ParticipationSlot.job_id == job_row["id"])
                    )
                ).scalar_one()
                waiting = (
                    await uow.session.execute(
                        select(func.count())
                        .select_from(JobApplication)
                        .where(
                            JobApplication.job_id == job_row["id"],
                            JobApplication.status == ApplicationStatus.WAITLISTED,
                        )
                    )
                ).scalar_one()
            if slots != min(participant_cap, applicants) or slots + waiting != applicants:
                raise BenchError(
                    f"admission admitted {slots} and waitlisted {waiting} of {applicants} applicants"
                )
            runs.append(AdmissionRun(call_s, total_s, int(slots), int(waiting)))
            print(
                f"admission {rep + 1}: {applicants} applicants in {total_s * 1000:.0f} ms "
                f"(close_admission {call_s * 1000:.0f} ms, then the commit)",
                flush=True,
            )
    finally:
        await core.close()
    return runs


# --- query plans --------------------------------------------------------------------------------------


async def explain_discovery(
    settings: Any, fixtures: Fixtures, cursor: str | None
) -> list[tuple[str, float, str]]:
    """(variant, in-process ms of list_open, the plan of its jobs query) for each discovery variant."""
    from sqlalchemy import event

    from callboard_core.container import Core
    from callboard_core.jobs import discovery
    from callboard_core.principals import Actor

    core = Core.build(settings)
    out = []
    try:
        variants = [
            ("GET /api/v2/jobs", None, None),
            ("?include=rookie", "rookie", None),
            ("?cursor= (second page)", None, cursor),
        ]
        for label, include, cur in variants:
            captured: list[tuple[str, Any]] = []

            def grab(
                _conn: Any,
                _cursor: Any,
                statement: str,
                parameters: Any,
                _context: Any,
                _many: bool,
                captured: list[tuple[str, Any]] = captured,
            ) -> None:
                if "FROM jobs" in statement and "ORDER BY" in statement:
                    captured.append((statement, parameters))

            engine = core.db.read_engine.sync_engine
            event.listen(engine, "before_cursor_execute", grab)
            try:
                async with core.uow(write=False) as uow:
                    agent = await discovery.seeker(uow.session, Actor.agent(fixtures.worker.id))
                    timings = []
                    for _ in range(20):
                        started = time.perf_counter()
                        await discovery.list_open(
                            uow.session, agent, capability=None, q=None, limit=20, include=include, cursor=cur
                        )
                        timings.append((time.perf_counter() - started) * 1000)
            finally:
                event.remove(engine, "before_cursor_execute", grab)
            statement, parameters = captured[-1]
            prefix = "EXPLAIN QUERY PLAN " if core.db.is_sqlite else "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
            async with core.db.read_engine.connect() as conn:
                rows = (await conn.exec_driver_sql(prefix + statement, parameters)).all()
            if core.db.is_sqlite:
                plan = "\n".join(str(row[-1]) for row in rows)
            else:
                plan = "\n".join(str(row[0]) for row in rows)
            out.append((label, statistics.median(timings), plan))
    finally:
        await core.close()
    return out


# --- servers ------------------------------------------------------------------------------------------


def callboard_env(tmp: Path, database_url: str, port: int, secret_key: str) -> dict[str, str]:
    env = base.server_env(tmp, database_url, port)
    env.update(
        CALLBOARD_SECRET_KEY=secret_key,  # the keys were issued in-process with this secret
        CALLBOARD_SWEEPER_IN_SERVER="false",
        CALLBOARD_RATE_LIMIT_ENABLED="false",
    )
    return env


def start_callboard(tmp: Path, database_url: str, secret_key: str, label: str) -> Server:
    port = base.free_port()
    argv = [
        *base.callboard_command(),
        "serve",
        "--no-migrate",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    log_path = tmp / f"callboard-{label}.log"
    server = Server(
        "callboard",
        port,
        base.spawn(argv, callboard_env(tmp, database_url, port, secret_key), log_path),
        log_path,
    )
    base.wait_ready(server, "/healthz")
    return server


def start_bare(tmp: Path) -> Server:
    # The same uvicorn options as `callboard serve` (as bench/run.py starts it).
    port = base.free_port()
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
        str(port),
        "--log-level",
        "warning",
        "--loop",
        "auto",
        "--http",
        "auto",
        "--proxy-headers",
    ]
    log_path = tmp / "bare.log"
    server = Server("bare", port, base.spawn(argv, dict(os.environ), log_path), log_path)
    base.wait_ready(server, "/ping")
    return server


def stop_server(server: Server) -> None:
    base.stop(server.proc)  # stop_all() later skips it: it has exited


def api(server: Server, method: str, path: str, key: str, body: Any = None, expect: int = 200) -> Any:
    status, raw = base.http(method, server.base + path, headers={"X-API-Key": key}, body=body)
    if status != expect:
        raise BenchError(f"{method} {path} answered {status} (expected {expect}): {raw[:500]!r}")
    return json.loads(raw) if raw else None


def make_home(server: Server, fixtures: Fixtures) -> dict[str, int]:
    """The home agent's obligations, through the HTTP API: slots (granted and acknowledged), pending
    invitations, its own draft and open jobs."""
    home, inviter = fixtures.home, fixtures.home_requester
    now = datetime.now(UTC)

    def job_body(title: str) -> dict[str, Any]:
        return {
            "title": title,
            "description": "Two paragraphs, plain English.",
            "jobTypeKey": "general",
            "capabilitySlug": "python",
            "admissionClosesAt": (now + timedelta(days=1)).isoformat(),
            "fairWorkDurationMs": 2 * 3600 * 1000,
            "latestSubmissionDeadlineAt": (now + timedelta(days=2)).isoformat(),
            "reviewDeadlineAt": (now + timedelta(days=3)).isoformat(),
            "participantCap": 2,
            "applicationCap": 10,
            "previewJson": {"pages": 12},
            "workBriefJson": {"secret": "the brief"},
        }

    invitations = []
    for i in range(5):
        job = api(
            server, "POST", "/api/v2/jobs", inviter.key, job_body(f"Review pull request #{100 + i}"), 201
        )
        api(server, "POST", f"/api/v2/jobs/{job['id']}/publish", inviter.key)
        invitation = api(
            server,
            "POST",
            f"/api/v2/jobs/{job['id']}/invitations",
            inviter.key,
            {"workerAgentId": home.id, "message": "Your profile fits."},
            201,
        )
        invitations.append(invitation["id"])
    for invitation_id in invitations[:3]:
        api(server, "POST", f"/api/v2/invitations/{invitation_id}/respond", home.key, {"decision": "ACCEPT"})
    slots = api(server, "GET", "/api/v2/worker-agents/me/participation-slots", home.key)
    slot_ids = [slot["id"] for slot in slots["slots"]]
    api(server, "POST", f"/api/v2/participation-slots/{slot_ids[0]}/acknowledge", home.key)
    for i in range(3):
        job = api(
            server,
            "POST",
            "/api/v2/jobs",
            home.key,
            job_body(f"Tag 2,000 support tickets, batch {i + 1}"),
            201,
        )
        if i == 0:
            api(server, "POST", f"/api/v2/jobs/{job['id']}/publish", home.key)
    got = api(server, "GET", "/api/v2/home", home.key)
    return {
        "obligations": len(got["obligations"]),
        **got["counts"],
        "unreadNotifications": got["unreadNotifications"],
    }


# --- measuring ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    scenario: Scenario
    key: str  # the X-API-Key for {api_key}
    connections: int


def _process_cpu_clock(pid: int) -> int:
    """Linux's CPU-time clock of another process (all its threads, nanoseconds): MAKE_PROCESS_CPUCLOCK(pid,
    CPUCLOCK_SCHED), the id `clock_getcpuclockid(3)` returns, which Python does not wrap."""
    return ((~pid) << 3) | 2


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU of these processes (all their threads) so far: from each process's CPU-time
    clock (nanoseconds), else from /proc in clock ticks (10 ms: a batch of a hundred 1 ms requests read so
    is off by up to a fifth)."""
    total = 0.0
    for pid in pids:
        try:
            total += time.clock_gettime(_process_cpu_clock(pid))
            continue
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return total


class Meter:
    def __init__(
        self, args: argparse.Namespace, wrk: str, tmp: Path, extra_pids: Callable[[], list[int]]
    ) -> None:
        self.args, self.wrk, self.tmp, self.extra_pids = args, wrk, tmp, extra_pids
        # Server CPU per request (ms), per scenario and round: the serving process's threads plus, on
        # PostgreSQL, the backends serving it. Less sensitive to a busy machine than latency.
        self.cpu_ms: dict[str, list[float]] = {}
        self.connections: dict[str, int] = {}

    def measure(self, load: Load, servers: dict[str, Server], seconds: int) -> Measurement:
        script = base.wrk_script(load.scenario, load.key, self.tmp)
        backends = self.extra_pids()
        pids = [server.proc.pid for server in servers.values()] + backends
        served = [servers[load.scenario.server].proc.pid] + (
            backends if load.scenario.server == "callboard" else []
        )
        cpu0 = cpu_seconds(served)
        with CpuMeter(pids) as meter:
            m = base.run_wrk(
                self.wrk,
                servers[load.scenario.server].base + load.scenario.path,
                script,
                threads=min(self.args.threads, load.connections),
                connections=load.connections,
                seconds=seconds,
            )
        m.background_cores, m.steal_cores = meter.background_cores, meter.steal_cores
        self.last_cpu_ms = (cpu_seconds(served) - cpu0) * 1000 / max(m.requests, 1)
        return m

    def rounds(self, loads: list[Load], servers: dict[str, Server], results: dict[str, Result]) -> None:
        for load in loads:
            status, raw = base.http(
                load.scenario.method,
                servers[load.scenario.server].base + load.scenario.path,
                headers={k: v.format(api_key=load.key) for k, v in load.scenario.headers.items()},
            )
            if status != load.scenario.expect_status:
                raise BenchError(f"{load.scenario.name}: answered {status}: {raw[:500]!r}")
        if self.args.warmup:
            for load in loads:
                print(f"warm-up  {load.scenario.name} ({self.args.warmup}s)", flush=True)
                self.measure(load, servers, self.args.warmup)
        for round_no in range(1, self.args.rounds + 1):
            for load in loads:
                m = self.measure(load, servers, self.args.duration)
                print(
                    f"round {round_no}  {load.scenario.name}: {m.rps:,.0f} req/s, p50 {m.p50_ms:.2f} ms, "
                    f"p99 {m.p99_ms:.2f} ms, server CPU {self.last_cpu_ms:.2f} ms/request; "
                    f"other processes {m.background_cores:.2f} CPUs",
                    flush=True,
                )
                if m.non_2xx or m.socket_errors:
                    raise BenchError(
                        f"{load.scenario.name}: {m.non_2xx} non-2xx responses and {m.socket_errors} socket errors "
                        f"in {m.requests} requests; the measurement is not valid.\n"
                        f"{servers[load.scenario.server].log_tail()}"
                    )
                results.setdefault(load.scenario.name, Result(load.scenario)).runs.append(m)
                self.cpu_ms.setdefault(load.scenario.name, []).append(self.last_cpu_ms)
                self.connections[load.scenario.name] = load.connections


def postgres_backends(database_url: str) -> Callable[[], list[int]]:
    """The PostgreSQL backends serving the benchmark database: their CPU is the server's work, not noise."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)

    async def pids() -> list[int]:
        import asyncpg

        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            rows = await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return [int(r["pid"]) for r in rows]
        finally:
            await conn.close()

    def get() -> list[int]:  # asked before every measurement: the pool grows during the warm-up
        return asyncio.run(pids())

    return get


DISCOVERY = [
    ("jobs", "", "GET /api/v2/jobs"),
    ("rookie", "?include=rookie", "GET /api/v2/jobs?include=rookie"),
    ("cursor", "?cursor={cursor}", "GET /api/v2/jobs?cursor= (second page)"),
]


def discovery_loads(phase: str, cursor: str, key: str, connections: int) -> list[Load]:
    loads = []
    for _, query, label in DISCOVERY:
        path = "/api/v2/jobs" + query.format(cursor=quote(cursor))
        name = f"{label}, {phase}"
        loads.append(
            Load(
                Scenario(name, "callboard", "GET", path, headers={"X-API-Key": "{api_key}"}), key, connections
            )
        )
    return loads


@dataclass
class DatabaseReport:
    kind: str  # "SQLite" or "PostgreSQL"
    description: str
    results: dict[str, Result] = field(default_factory=dict)
    memory: Memory | None = None
    bare_memory: Memory | None = None
    admission: list[AdmissionRun] = field(default_factory=list)
    plans: list[tuple[str, float, str]] = field(default_factory=list)
    cpu_ms: dict[str, list[float]] = field(default_factory=dict)  # server CPU per request, per round
    connections: dict[str, int] = field(default_factory=dict)  # wrk -c of each scenario
    fixtures: Fixtures | None = None
    jobs: int = 0
    worker_matches: int = 0
    error: str | None = None


def bench_database(kind: str, args: argparse.Namespace, wrk: str) -> DatabaseReport:
    from callboard_core.pagination import encode_cursor

    label = "SQLite" if kind == "sqlite" else "PostgreSQL"
    report = DatabaseReport(label, "temporary file" if kind == "sqlite" else _redact(args.postgres_url))
    tmp = Path(tempfile.mkdtemp(prefix="callboard-bench-jobs-"))
    secret_key = secrets.token_urlsafe(48)
    print(f"\n=== {label} ===", flush=True)
    try:
        with base.database(None if kind == "sqlite" else args.postgres_url, tmp) as database_url:
            try:
                settings = bench_settings(database_url, tmp, secret_key)
                fixtures = asyncio.run(migrate_and_create_agents(settings))
                report.fixtures = fixtures
                meter = Meter(args, wrk, tmp, postgres_backends(database_url) if kind == "postgres" else list)
                results = report.results
                report.cpu_ms, report.connections = meter.cpu_ms, meter.connections

                # Phase A: no jobs at all.
                servers = {
                    "bare": start_bare(tmp),
                    "callboard": start_callboard(tmp, database_url, secret_key, "empty"),
                }
                bare_started = base.memory_of(servers["bare"].proc.pid)
                empty_cursor = encode_cursor(datetime.now(UTC), "job_zzzzzzzzzzzzzzzzzzzz")
                page = api(servers["callboard"], "GET", "/api/v2/jobs", fixtures.worker.key)
                if page["jobs"]:
                    raise BenchError(f"the empty database lists {len(page['jobs'])} jobs")
                meter.rounds(
                    discovery_loads("empty database", empty_cursor, fixtures.worker.key, args.connections),
                    servers,
                    results,
                )
                fixtures.home_counts = make_home(servers["callboard"], fixtures)
                stop_server(servers.pop("callboard"))

                # 100,000 open jobs.
                print(f"seeding {args.jobs:,} jobs ...", flush=True)
                fixtures.seed_seconds = asyncio.run(seed_jobs(settings, fixtures, args.jobs))
                report.jobs = args.jobs
                print(f"seeded in {fixtures.seed_seconds:.1f}s", flush=True)

                # Phase B: a fresh server over them.
                servers["callboard"] = start_callboard(tmp, database_url, secret_key, "full")
                started = base.memory_of(servers["callboard"].proc.pid)
                first = api(servers["callboard"], "GET", "/api/v2/jobs", fixtures.worker.key)
                cursor = first.get("nextCursor")
                if len(first["jobs"]) != 20 or not cursor:
                    raise BenchError(f"the first page has {len(first['jobs'])} jobs and cursor {cursor!r}")
                second = api(
                    servers["callboard"], "GET", f"/api/v2/jobs?cursor={quote(cursor)}", fixtures.worker.key
                )
                rookie = api(servers["callboard"], "GET", "/api/v2/jobs?include=rookie", fixtures.worker.key)
                if len(second["jobs"]) != 20 or not any(j["rookie"] for j in rookie["jobs"]):
                    raise BenchError(
                        "the second page or the rookie page is not what 100,000 jobs should give"
                    )
                throughput = [
                    Load(Scenario("bare GET /ping", "bare", "GET", "/ping"), "", args.throughput_connections),
                    Load(
                        Scenario(
                            "GET /api/v2/home",
                            "callboard",
                            "GET",
                            "/api/v2/home",
                            headers={"X-API-Key": "{api_key}"},
                        ),
                        fixtures.home.key,
                        args.throughput_connections,
                    ),
                ]
                full = discovery_loads(f"{args.jobs:,} jobs", cursor, fixtures.worker.key, args.connections)
                # Information: the same request one at a time, its latency without waiting behind others.
                alone = Scenario(
                    f"{DISCOVERY[0][2]}, {args.jobs:,} jobs, one connection",
                    "callboard",
                    "GET",
                    "/api/v2/jobs",
                    headers={"X-API-Key": "{api_key}"},
                )
                meter.rounds(throughput + full + [Load(alone, fixtures.worker.key, 1)], servers, results)
                for name, server in servers.items():
                    if server.proc.poll() is not None:
                        raise BenchError(f"the {name} server died during the run:\n{server.log_tail()}")
                report.memory = base.memory_of(servers["callboard"].proc.pid)
                report.memory.started_mb = started.current_mb
                report.bare_memory = base.memory_of(servers["bare"].proc.pid)
                report.bare_memory.started_mb = bare_started.current_mb
                base.stop_all()

                report.worker_matches = asyncio.run(count_matches(settings, fixtures))
                report.admission = asyncio.run(
                    bench_admission(
                        settings, fixtures, args.applicants, args.participant_cap, args.admission_reps
                    )
                )
                report.plans = asyncio.run(explain_discovery(settings, fixtures, cursor))
            finally:
                base.stop_all()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


async def count_matches(settings: Any, fixtures: Fixtures) -> int:
    """How many of the open jobs the worker's default discovery matches (its tags, untagged, not its owner's)."""
    from sqlalchemy import func, or_, select

    from callboard_core.container import Core
    from callboard_core.jobs.models import Job
    from callboard_core.jobs.states import JobStatus

    core = Core.build(settings)
    try:
        async with core.uow(write=False) as uow:
            tag_ids = [fixtures.tag_ids[slug] for slug in WORKER_TAGS]
            return int(
                (
                    await uow.session.execute(
                        select(func.count())
                        .select_from(Job)
                        .where(
                            Job.status == JobStatus.ADMISSION_OPEN,
                            Job.owner_id != fixtures.worker.owner_id,
                            or_(Job.capability_tag_id.in_(tag_ids), Job.capability_tag_id.is_(None)),
                        )
                    )
                ).scalar_one()
            )
    finally:
        await core.close()


# --- the report ---------------------------------------------------------------------------------------


@dataclass
class Verdict:
    target: str
    measured: str
    ok: bool | None


def _ms(value: float) -> str:
    return f"{value:.2f} ms"


def verdicts(report: DatabaseReport, args: argparse.Namespace) -> list[Verdict]:
    out: list[Verdict] = []
    r = report.results
    full = f"{report.jobs:,} jobs"
    for _, _, label in DISCOVERY:
        empty, loaded = r.get(f"{label}, empty database"), r.get(f"{label}, {full}")
        if empty is None or loaded is None:
            continue
        ratio = loaded.p99_ms / empty.p99_ms if empty.p99_ms else float("inf")
        ok = loaded.p99_ms <= DISCOVERY_P99_MS and ratio <= DISCOVERY_EMPTY_FACTOR
        out.append(
            Verdict(
                f"{label}: p99 <= {DISCOVERY_P99_MS:.0f} ms and <= {DISCOVERY_EMPTY_FACTOR:.0f}x the empty "
                "database's p99",
                f"p99 {_ms(loaded.p99_ms)}, {ratio:.2f}x ({_ms(empty.p99_ms)} empty)",
                ok,
            )
        )
    alone = r.get(f"{DISCOVERY[0][2]}, {full}, one connection")
    if alone is not None:
        out.append(
            Verdict(
                f"{DISCOVERY[0][2]} with {full}, one request at a time (no queueing; information)",
                f"p50 {_ms(alone.p50_ms)}, p99 {_ms(alone.p99_ms)}",
                None,
            )
        )
    home, bare = r.get("GET /api/v2/home"), r.get("bare GET /ping")
    if home is not None and bare is not None:
        share = home.rps / bare.rps if bare.rps else 0.0
        out.append(
            Verdict(
                f"GET /api/v2/home: >= {HOME_SHARE_OF_BARE:.0%} of the bare endpoint's req/s",
                f"{share:.1%} ({home.rps:,.0f} / {bare.rps:,.0f} req/s)",
                share >= HOME_SHARE_OF_BARE,
            )
        )
    if report.admission:
        median = statistics.median(a.total_s for a in report.admission)
        out.append(
            Verdict(
                f"Admission of {args.applicants:,} applicants: <= {ADMISSION_SECONDS:.0f} s (median)",
                f"{median * 1000:.0f} ms",
                median <= ADMISSION_SECONDS,
            )
        )
    if report.memory is not None:
        out.append(
            Verdict(
                f"Server resident memory with {full}, after the load: < {RSS_MB:.0f} MB (VmHWM)",
                f"{report.memory.peak_mb:.1f} MB",
                report.memory.peak_mb < RSS_MB,
            )
        )
    return out


def _verdict(ok: bool | None) -> str:
    return "info" if ok is None else "PASS" if ok else "FAIL"


def database_section(report: DatabaseReport, args: argparse.Namespace) -> list[str]:
    lines = [f"## {report.kind} ({report.description})", ""]
    if report.error:
        lines += [f"The benchmark could not run on {report.kind}: {report.error}", ""]
    f = report.fixtures
    if f is not None and report.jobs:
        lines += [
            f"- Seed: {report.jobs:,} ADMISSION_OPEN jobs over {len(f.tag_ids)} capability tags "
            f"({UNTAGGED_SHARE:.0%} untagged, {OWN_OWNER_SHARE:.0%} by the worker's own owner), published over "
            f"the last 7 days, inserted set-based in {f.seed_seconds:.1f}s"
            + (" (then VACUUM ANALYZE)" if report.kind == "PostgreSQL" else ""),
            f"- Worker: tags {', '.join(WORKER_TAGS)}; its default discovery matches {report.worker_matches:,} "
            "of the open jobs",
            "- Home agent: " + ", ".join(f"{k} {v}" for k, v in f.home_counts.items()),
        ]
    runs = [m for result in report.results.values() for m in result.runs]
    if runs:
        worst = max(m.background_cores for m in runs)
        lines.append(
            f"- Other processes during the measurements: up to {worst:.2f} CPUs busy (median "
            f"{statistics.median(m.background_cores for m in runs):.2f}); hypervisor steal up to "
            f"{max(m.steal_cores for m in runs):.2f} CPUs"
            + (
                "; the PostgreSQL backends serving the benchmark count as ours, the rest of PostgreSQL as other"
                if report.kind == "PostgreSQL"
                else ""
            )
        )
        if worst > BUSY_MACHINE_CPUS:
            lines += [
                "",
                f"> **Warning**: other processes used up to {worst:.2f} CPUs while wrk was running; "
                "latency and throughput are skewed. Rerun on a quiet machine before reading a FAIL.",
            ]
    lines += [
        "",
        "| Scenario | wrk -c | Req/s (median) | p50 | p99 | Server CPU/request | Req/s per round | p99 per round |",
        "|---|--:|--:|--:|--:|--:|---|---|",
    ]
    for name, result in report.results.items():
        connections = report.connections.get(name, args.connections)
        lines.append(
            f"| {name} | {connections} | {result.rps:,.0f} | {_ms(result.p50_ms)} | {_ms(result.p99_ms)} | "
            f"{_ms(statistics.median(report.cpu_ms.get(name) or [0.0]))} | "
            + ", ".join(f"{m.rps:,.0f}" for m in result.runs)
            + " | "
            + ", ".join(f"{m.p99_ms:.1f}" for m in result.runs)
            + " |"
        )
    if report.admission:
        lines += [
            "",
            f"Admission (in-process `close_admission`, {args.applicants:,} PENDING applications, participantCap "
            f"{args.participant_cap}, 5 places reserved for new workers, {report.jobs:,} other jobs in the table):",
            "",
            "| Run | close_admission | with the commit | Admitted | Waitlisted |",
            "|--:|--:|--:|--:|--:|",
        ]
        for i, a in enumerate(report.admission, 1):
            lines.append(
                f"| {i} | {a.call_s * 1000:.0f} ms | {a.total_s * 1000:.0f} ms | {a.admitted} | {a.waitlisted} |"
            )
    if report.memory is not None and report.bare_memory is not None:
        lines += [
            "",
            "| Server | RSS after start-up | RSS peak (VmHWM) | RSS after load (VmRSS) |",
            "|---|--:|--:|--:|",
        ]
        for name, mem in (("callboard (over the seeded jobs)", report.memory), ("bare", report.bare_memory)):
            lines.append(
                f"| {name} | {mem.started_mb:.1f} MB | {mem.peak_mb:.1f} MB | {mem.current_mb:.1f} MB |"
            )
    checks = verdicts(report, args)
    if checks:
        lines += ["", "| Target | Measured | Result |", "|---|---|---|"]
        lines += [f"| {v.target} | {v.measured} | {_verdict(v.ok)} |" for v in checks]
    if report.plans:
        lines += ["", "<details><summary>Discovery query plans (worker, over the seeded jobs)</summary>", ""]
        for label, ms, plan in report.plans:
            lines += [f"{label}: list_open in-process {ms:.2f} ms (median of 20)", "", "```", plan, "```", ""]
        lines += ["</details>"]
    return [*lines, ""]


def render(reports: list[DatabaseReport], args: argparse.Namespace, started: datetime) -> str:
    info = base.machine()
    lines = [
        "# callboard job lifecycle benchmark",
        "",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: nproc {info['nproc']}, {info['cpu']}, Linux {info['kernel']}",
        f"- Python: {info['python']}; {info['packages']}",
        f"- Load: wrk -t{args.threads}, {args.duration}s x {args.rounds} rounds (interleaved, median kept), "
        f"{args.warmup}s warm-up; discovery at -c{args.connections} (latency), home and bare at "
        f"-c{args.throughput_connections} (throughput); wrk shares the machine with the servers",
        "- Servers: one uvicorn worker each, `callboard serve --no-migrate --log-level warning` "
        "(CALLBOARD_SWEEPER_IN_SERVER=false, CALLBOARD_RATE_LIMIT_ENABLED=false) and `uvicorn bare_app:app`",
        "- One worker serves requests one at a time on its event loop: at -cN a request waits behind up to N-1 "
        "others, so latency at -c4 is about four times what one request takes. Server CPU/request is the "
        "serving process's CPU (all threads; on PostgreSQL plus the backends serving it) per completed request.",
        "",
        "| Target | " + " | ".join(r.kind for r in reports) + " |",
        "|---|" + "---|" * len(reports),
    ]
    by_db = [{v.target: v for v in verdicts(r, args)} for r in reports]
    targets: list[str] = []
    for table in by_db:
        targets += [t for t in table if t not in targets]
    for target in targets:
        cells = []
        for table in by_db:
            v = table.get(target)
            cells.append("not measured" if v is None else f"{v.measured}: **{_verdict(v.ok)}**")
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    lines.append("")
    for report in reports:
        lines += database_section(report, args)
    return "\n".join(lines)


# --- entry point --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark the job lifecycle on SQLite and PostgreSQL.")
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES_URL,
        help="an admin URL: a fresh callboard_bench_<random> database is created through it, "
        f"used and dropped (default {DEFAULT_POSTGRES_URL})",
    )
    parser.add_argument("--jobs", type=int, default=100_000, help="open jobs to seed (default 100,000)")
    parser.add_argument("--duration", type=int, default=5, help="whole seconds per measurement (default 5)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved measurements per scenario (default 3)"
    )
    parser.add_argument("--warmup", type=int, default=2, help="warm-up seconds per scenario (default 2)")
    parser.add_argument(
        "--connections", type=int, default=4, help="wrk connections for discovery (default 4)"
    )
    parser.add_argument(
        "--throughput-connections",
        type=int,
        default=16,
        help="wrk connections for home and the bare endpoint (default 16, as bench/run.py)",
    )
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    parser.add_argument("--applicants", type=int, default=5000, help="applicants to admit (default 5,000)")
    parser.add_argument("--participant-cap", type=int, default=50, help="the admission job's participantCap")
    parser.add_argument("--admission-reps", type=int, default=3, help="admission repetitions (default 3)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="default bench/jobs_results.md")
    args = parser.parse_args(argv)
    if (
        min(
            args.duration,
            args.rounds,
            args.connections,
            args.throughput_connections,
            args.threads,
            args.applicants,
            args.participant_cap,
            args.admission_reps,
        )
        < 1
        or args.warmup < 0
        or args.jobs < 100
    ):
        parser.error("counts and durations must be positive (--jobs at least 100, --warmup not negative)")
    return args


def _on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks, which stop every child


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
    started = datetime.now(UTC)
    kinds = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    reports: list[DatabaseReport] = []
    failed = False
    try:
        for kind in kinds:
            try:
                reports.append(bench_database(kind, args, wrk))
            except BenchError as exc:
                print(f"bench: error on {kind}: {exc}", file=sys.stderr)
                failed = True
                reports.append(
                    DatabaseReport(
                        "SQLite" if kind == "sqlite" else "PostgreSQL", kind, error=str(exc).splitlines()[0]
                    )
                )
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        base.stop_all()
    text = render(reports, args, started)
    print()
    print(text, end="")
    args.output.write_text(text)
    print(f"\nwritten to {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
