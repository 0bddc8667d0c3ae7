"""Money benchmark: a paid publish and a paid award against their free counterparts, and many concurrent
paid publishes against one balance, on SQLite and on PostgreSQL in one run.

    .venv/bin/python bench/money.py                               # both databases (the default)
    .venv/bin/python bench/money.py --database sqlite --jobs 100
    .venv/bin/python bench/money.py --database postgres --postgres-url postgresql://root@127.0.0.1:5432/test

For each database:
  1. a fresh database (bench/run.py `database`), migrated and seeded; in-process, through the core's own
     services: a requester owner whose requester agent auto-publishes paid jobs up to $1,000
     (autoPublishLimitCents), workers of other owners (claimed, so they can be paid), and the requester's
     balance funded by a top-up posted as a completed checkout would post it;
  2. `callboard serve --no-migrate` with the sandbox processor (sweeper and rate limits off);
  3. publish: --jobs free and --jobs paid drafts made over HTTP, then published by --concurrency clients
     in interleaved batches (free, paid, free, paid, ...), so a busy moment of the machine hits both;
  4. award: --jobs free and --jobs paid jobs brought to review over HTTP (apply, admission, acknowledge,
     submit), then awarded the same way;
  5. contention: another owner funded for exactly half of --race paid jobs publishes all --race drafts at
     once: exactly half must publish and half be refused with 409 payment_not_ready (BALANCE), nothing else,
     no deadlock (every request answered within --race-timeout), and the books verify afterwards.

Per operation it reports latency (p50, p99), throughput, and the server's CPU per operation (the server
process and, on PostgreSQL, the backends serving it: less sensitive to a busy machine than latency).
Targets (issue 11): a paid publish and a paid award each cost at most 2x their free counterpart, measured as
the server's CPU per operation (latency, p99 above all, moves with whatever else the machine runs and with
SQLite's single writer queueing 8 clients: it is reported, not judged); the contention run is exact and
finishes. The report goes to bench/money_results.md.
Exit code 0 whether targets pass or fail; non-zero only when the benchmark could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
for _path in (str(ROOT), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import jobs as job_bench  # noqa: E402  (bench/jobs.py: the server, its CPU, PostgreSQL backends)
import run as base  # noqa: E402  (bench/run.py: processes, throwaway databases)
from run import BenchError  # noqa: E402

DEFAULT_OUTPUT = BENCH_DIR / "money_results.md"
DEFAULT_POSTGRES_URL = "postgresql://root@127.0.0.1:5432/test"
REWARD_CENTS = 500
COST_FACTOR = 2.0  # a paid operation costs at most this many times its free counterpart


@dataclass
class Agent:
    id: str
    key: str
    owner_id: str

    @property
    def h(self) -> dict[str, str]:
        return {"X-API-Key": self.key}


@dataclass
class Fixtures:
    requester: Agent
    racer: Agent  # the contention run's requester, funded for exactly half of its jobs
    workers: list[Agent]


@dataclass
class OpStats:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the timed batches
    cpu_s: float = 0.0  # server CPU over the timed batches

    def add(self, latencies: list[float], seconds: float, cpu_s: float) -> None:
        self.latencies_ms += latencies
        self.seconds += seconds
        self.cpu_s += cpu_s

    @property
    def count(self) -> int:
        return len(self.latencies_ms)

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return self.cpu_s * 1000 / max(self.count, 1)


@dataclass
class Race:
    jobs: int
    published: int
    refused: int
    other: dict[int, int]
    seconds: float
    slowest_ms: float
    books_clean: bool
    reserved_cents: int
    funded_cents: int


# --- fixtures, in-process ---------------------------------------------------------------------------------


async def create_fixtures(settings: Any, jobs: int, race: int) -> Fixtures:
    from callboard_core.agents import dashboard
    from callboard_core.agents.models import Agent as AgentRow
    from callboard_core.agents.schemas import AgentCreate
    from callboard_core.container import Core
    from callboard_core.ledger import service as ledger
    from callboard_core.principals import Actor
    from callboard_core.seed import migrate_and_seed
    from callboard_core.users import service as users

    await migrate_and_seed(settings)
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            session = uow.session

            async def agent(label: str, tags: list[str]) -> Agent:
                user = await users.create(session, email=f"bench-{label}-{secrets.token_hex(4)}@example.com")
                body = AgentCreate.model_validate(
                    {
                        "name": f"Bench {label}",
                        "endpointUrl": "https://agent.example.com/hook",
                        "capabilities": tags,
                    }
                )
                created = await dashboard.create(session, Actor.owner(user.id), body)
                row = await session.get(AgentRow, created.agent.id)
                assert row is not None
                row.auto_publish_limit_cents = 100_000  # paid publishes up to $1,000 need no confirmation
                return Agent(created.agent.id, created.api_key, user.id)

            requester = await agent("requester", [])
            racer = await agent("racer", [])
            workers = [await agent(f"worker-{i}", ["python"]) for i in range(8)]
            await session.flush()
            # Far more than the benchmark spends, as a completed checkout would post it.
            await ledger.top_up(
                session,
                user_id=requester.owner_id,
                amount_cents=10_000_000,
                processor_ref=f"pi_bench_{secrets.token_hex(6)}",
            )
    finally:
        await core.close()
    return Fixtures(requester, racer, workers)


async def fund_exactly(settings: Any, user_id: str, amount_cents: int) -> None:
    from callboard_core.container import Core
    from callboard_core.ledger import service as ledger

    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            await ledger.top_up(
                uow.session,
                user_id=user_id,
                amount_cents=amount_cents,
                processor_ref=f"pi_race_{secrets.token_hex(6)}",
            )
    finally:
        await core.close()


async def books(settings: Any, user_id: str) -> tuple[bool, int]:
    """(the ledger verifies clean, the owner's reserved cents)."""
    from callboard_core.container import Core
    from callboard_core.ledger import service as ledger

    core = Core.build(settings)
    try:
        async with core.uow(write=False) as uow:
            problems = await ledger.verify(uow.session)
            balance = await ledger.balances(uow.session, user_id)
    finally:
        await core.close()
    for problem in problems[:5]:
        print(f"  ledger problem: {problem}", flush=True)
    return not problems, balance.reserved_cents


# --- over HTTP ----------------------------------------------------------------------------------------------


def job_body(paid: bool) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "title": "Summarise the quarterly report" + (" (paid)" if paid else ""),
        "description": "Two paragraphs, plain English.",
        "jobTypeKey": "general",
        "capabilitySlug": "python",
        "admissionClosesAt": (now + timedelta(hours=1)).isoformat(),
        "fairWorkDurationMs": 2 * 3600 * 1000,
        "latestSubmissionDeadlineAt": (now + timedelta(hours=6)).isoformat(),
        "reviewDeadlineAt": (now + timedelta(hours=12)).isoformat(),
        "participantCap": 1,
        "applicationCap": 5,
        "rewardAmountCents": REWARD_CENTS if paid else 0,
    }


async def call(
    client: httpx.AsyncClient, method: str, path: str, agent: Agent, body: Any = None, expect: int = 200
) -> Any:
    r = await client.request(method, path, headers=agent.h, json=body)
    if r.status_code != expect:
        raise BenchError(f"{method} {path} answered {r.status_code} (expected {expect}): {r.text[:500]}")
    return r.json() if r.content else None


async def gather_limited(concurrency: int, work: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(fn: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await fn()

    return await asyncio.gather(*(one(fn) for fn in work))


async def drafts(
    client: httpx.AsyncClient, agent: Agent, count: int, paid: bool, concurrency: int
) -> list[str]:
    made = await gather_limited(
        concurrency,
        [lambda: call(client, "POST", "/api/v2/jobs", agent, job_body(paid), 201) for _ in range(count)],
    )
    return [job["id"] for job in made]


async def in_review(
    client: httpx.AsyncClient, fx: Fixtures, job_ids: list[str], concurrency: int
) -> list[tuple[str, str]]:
    """(job id, submission id) for each job: a worker applied, was admitted, acknowledged and submitted."""

    async def one(index: int, job_id: str) -> tuple[str, str]:
        worker = fx.workers[index % len(fx.workers)]
        await call(client, "POST", f"/api/v2/jobs/{job_id}/publish", fx.requester)
        await call(client, "POST", f"/api/v2/jobs/{job_id}/applications", worker, expect=201)
        await call(client, "POST", f"/api/v2/jobs/{job_id}/admission/run", fx.requester)
        slots = await call(client, "GET", "/api/v2/worker-agents/me/participation-slots", worker)
        (slot,) = [s for s in slots["slots"] if s["jobId"] == job_id]
        await call(client, "POST", f"/api/v2/participation-slots/{slot['id']}/acknowledge", worker)
        sub = await call(
            client,
            "POST",
            f"/api/v2/participation-slots/{slot['id']}/submit",
            worker,
            {"artifactType": "text", "structuredPayloadJson": {"summary": "Done", "answer": "The answer."}},
            201,
        )
        return job_id, sub["id"]

    return await gather_limited(concurrency, [lambda i=i, j=j: one(i, j) for i, j in enumerate(job_ids)])


async def timed(
    server_cpu: Callable[[], Awaitable[float]], concurrency: int, work: list[Callable[[], Awaitable[Any]]]
) -> tuple[list[float], float, float]:
    """Run the work with `concurrency` clients: (latencies in ms, wall seconds, server CPU seconds)."""
    latencies: list[float] = []

    async def clocked(fn: Callable[[], Awaitable[Any]]) -> None:
        t0 = time.perf_counter()
        await fn()
        latencies.append((time.perf_counter() - t0) * 1000)

    cpu0, t0 = await server_cpu(), time.perf_counter()
    await gather_limited(concurrency, [lambda fn=fn: clocked(fn) for fn in work])
    seconds = time.perf_counter() - t0
    return latencies, seconds, await server_cpu() - cpu0


async def interleaved(
    server_cpu: Callable[[], Awaitable[float]],
    concurrency: int,
    batches: int,
    free: tuple[OpStats, list[Callable[[], Awaitable[Any]]]],
    paid: tuple[OpStats, list[Callable[[], Awaitable[Any]]]],
) -> None:
    for stats, work in (free, paid):
        if len(work) < batches:
            raise BenchError(f"{stats.name}: fewer operations than batches")
    size = len(free[1]) // batches
    for b in range(batches):
        for stats, work in (free, paid):
            stats.add(*await timed(server_cpu, concurrency, work[b * size : (b + 1) * size]))


async def bench_one(args: argparse.Namespace, label: str, database_url: str, tmp: Path) -> dict[str, Any]:
    secret_key = secrets.token_urlsafe(48)
    settings = job_bench.bench_settings(database_url, tmp, secret_key)
    print(f"[{label}] fixtures", flush=True)
    fx = await create_fixtures(settings, args.jobs, args.race)
    server = job_bench.start_callboard(tmp, database_url, secret_key, label)
    backends = job_bench.postgres_backends(database_url) if label == "postgres" else (lambda: [])

    async def server_cpu() -> float:
        pids = await asyncio.to_thread(backends)  # it runs its own event loop
        return job_bench.cpu_seconds([server.proc.pid, *pids])

    stats = {name: OpStats(name) for name in ("free publish", "paid publish", "free award", "paid award")}
    try:
        limits = httpx.Limits(max_connections=args.concurrency * 2)
        async with httpx.AsyncClient(base_url=server.base, timeout=30.0, limits=limits) as client:
            print(f"[{label}] publish: {args.jobs} free and {args.jobs} paid drafts", flush=True)
            free = await drafts(client, fx.requester, args.jobs, False, args.concurrency)
            paid = await drafts(client, fx.requester, args.jobs, True, args.concurrency)
            # Warm the paths once (connections, statement caches) outside the measurement.
            for job_id in (free.pop(), paid.pop()):
                await call(client, "POST", f"/api/v2/jobs/{job_id}/publish", fx.requester)

            def publish(job_id: str) -> Callable[[], Awaitable[Any]]:
                return lambda: call(client, "POST", f"/api/v2/jobs/{job_id}/publish", fx.requester)

            await interleaved(
                server_cpu,
                args.concurrency,
                args.batches,
                (stats["free publish"], [publish(j) for j in free]),
                (stats["paid publish"], [publish(j) for j in paid]),
            )

            print(
                f"[{label}] award: bringing {args.jobs} free and {args.jobs} paid jobs to review", flush=True
            )
            free_review = await in_review(
                client,
                fx,
                await drafts(client, fx.requester, args.jobs, False, args.concurrency),
                args.concurrency,
            )
            paid_review = await in_review(
                client,
                fx,
                await drafts(client, fx.requester, args.jobs, True, args.concurrency),
                args.concurrency,
            )

            def award(pair: tuple[str, str]) -> Callable[[], Awaitable[Any]]:
                job_id, submission_id = pair
                return lambda: call(
                    client,
                    "POST",
                    f"/api/v2/jobs/{job_id}/award",
                    fx.requester,
                    {"submissionId": submission_id},
                )

            for pairs in (free_review, paid_review):  # warm-up
                await award(pairs.pop())()
            await interleaved(
                server_cpu,
                args.concurrency,
                args.batches,
                (stats["free award"], [award(p) for p in free_review]),
                (stats["paid award"], [award(p) for p in paid_review]),
            )

            print(f"[{label}] contention: {args.race} paid publishes against one balance", flush=True)
            race = await contention(args, settings, client, fx)
    finally:
        job_bench.stop_server(server)
    return {"stats": stats, "race": race}


async def contention(
    args: argparse.Namespace, settings: Any, client: httpx.AsyncClient, fx: Fixtures
) -> Race:
    job_ids = await drafts(client, fx.racer, args.race, True, args.concurrency)
    from callboard_core.payments.service import fee_for

    per_job = REWARD_CENTS + fee_for(REWARD_CENTS, settings.platform_fee_bps)
    affordable = args.race // 2
    await fund_exactly(settings, fx.racer.owner_id, per_job * affordable)
    codes: list[int] = []
    slowest = 0.0

    async def publish(burst: httpx.AsyncClient, job_id: str) -> None:
        nonlocal slowest
        t0 = time.perf_counter()
        r = await burst.post(f"/api/v2/jobs/{job_id}/publish", headers=fx.racer.h, timeout=args.race_timeout)
        slowest = max(slowest, (time.perf_counter() - t0) * 1000)
        if r.status_code == 409 and r.json().get("code") != "payment_not_ready":
            codes.append(-409)  # refused for another reason: counted apart
        else:
            codes.append(r.status_code)

    t0 = time.perf_counter()
    async with httpx.AsyncClient(
        base_url=str(client.base_url), limits=httpx.Limits(max_connections=args.race)
    ) as burst:
        await asyncio.gather(*(publish(burst, j) for j in job_ids))
    seconds = time.perf_counter() - t0
    clean, reserved = await books(settings, fx.racer.owner_id)
    other: dict[int, int] = {}
    for code in codes:
        if code not in (200, 409):
            other[code] = other.get(code, 0) + 1
    return Race(
        jobs=args.race,
        published=codes.count(200),
        refused=codes.count(409),
        other=other,
        seconds=seconds,
        slowest_ms=slowest,
        books_clean=clean,
        reserved_cents=reserved,
        funded_cents=per_job * affordable,
    )


# --- the report -----------------------------------------------------------------------------------------------


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> tuple[str, bool]:
    lines = [
        "# Money benchmark (bench/money.py)",
        "",
        f"Run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; {args.jobs} jobs per operation, "
        f"{args.concurrency} concurrent clients, {args.batches} interleaved batches; contention: {args.race} "
        "paid publishes at once against a balance funded for half of them.",
        "",
        "| Database | Operation | ops/s | p50 ms | p99 ms | server CPU ms/op |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, result in results.items():
        for s in result["stats"].values():
            lines.append(
                f"| {label} | {s.name} | {s.per_second:,.0f} | {s.pct(0.5):.2f} | {s.pct(0.99):.2f} | {s.cpu_ms:.2f} |"
            )
    lines += ["", "| Target | Database | Measured | Pass |", "|---|---|---|---|"]
    all_pass = True
    for label, result in results.items():
        st = result["stats"]
        for op in ("publish", "award"):
            free, paid = st[f"free {op}"], st[f"paid {op}"]
            cpu = paid.cpu_ms / free.cpu_ms if free.cpu_ms else float("inf")
            p99 = paid.pct(0.99) / free.pct(0.99)
            ok = cpu <= COST_FACTOR
            all_pass &= ok
            lines.append(
                f"| paid {op} costs <= {COST_FACTOR:g}x free (server CPU/op) | {label} | "
                f"{cpu:.2f}x CPU (p99 {p99:.2f}x, for information) | {'PASS' if ok else 'FAIL'} |"
            )
        race: Race = result["race"]
        exact = (
            race.published == race.jobs // 2
            and race.refused == race.jobs - race.jobs // 2
            and not race.other
            and race.books_clean
            and race.reserved_cents == race.funded_cents
        )
        all_pass &= exact
        lines.append(
            f"| {race.jobs} concurrent paid publishes, one balance | {label} | {race.published} published, "
            f"{race.refused} refused (payment_not_ready), other {race.other or 'none'}, "
            f"{race.seconds:.2f} s, slowest {race.slowest_ms:.0f} ms, books "
            f"{'clean' if race.books_clean else 'NOT CLEAN'}, reserved {race.reserved_cents} of {race.funded_cents} "
            f"| {'PASS' if exact else 'FAIL'} |"
        )
    lines += ["", "Machine: " + ", ".join(f"{k} {v}" for k, v in base.machine().items()), ""]
    return "\n".join(lines), all_pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark paid publish and award on SQLite and PostgreSQL.")
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--jobs", type=int, default=200, help="jobs per operation and kind (default 200)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--batches", type=int, default=4, help="interleaved batches (default 4)")
    parser.add_argument("--race", type=int, default=200, help="concurrent paid publishes (default 200)")
    parser.add_argument(
        "--race-timeout", type=float, default=30.0, help="seconds a racer may wait (default 30)"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    labels = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    try:
        for label in labels:
            with tempfile.TemporaryDirectory(prefix=f"callboard-money-{label}-") as tmp_name:
                tmp = Path(tmp_name)
                url = None if label == "sqlite" else args.postgres_url
                with base.database(url, tmp) as database_url:
                    results[label] = asyncio.run(bench_one(args, label, database_url, tmp))
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        base.stop_all()
    text, passed = report(args, results)
    args.output.write_text(text)
    print(text)
    print(f"targets: {'all pass' if passed else 'some FAIL'}; report written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
