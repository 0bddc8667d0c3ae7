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
     in --batches rounds, each a batch of drafts, a batch of free publishes and one of paid publishes back
     to back, so a busy moment of the machine hits both sides of a ratio;
  4. award: --jobs free and --jobs paid jobs brought to review over HTTP (apply, admission, acknowledge,
     submit; apply, acknowledge and submit of the free jobs measured in rounds, each after as many
     drafts), then awarded in rounds as published;
  5. contention: another owner funded for exactly half of --race paid jobs publishes all --race drafts at
     once: exactly half must publish and half be refused with 409 payment_not_ready (BALANCE), nothing else,
     no deadlock (every request answered within --race-timeout), and the books verify afterwards.

Per operation (a draft, publish, apply, acknowledge, submit and award; publish and award free and paid)
it reports latency (p50, p99), throughput, and the server's CPU per operation (the server process and, on
PostgreSQL, the backends serving it: less sensitive to a busy machine than latency). Targets (issues 11
and 28), judged on server CPU per operation: a paid publish and a paid award each cost at most 1.5x their
free counterpart; a paid award at most 5 ms on PostgreSQL; publish, apply, submit and award each at most 3x
a draft, each the median of the rounds' ratios (as bench/run.py judges its own); the contention run is
exact and finishes (latency, p99 above all, moves with whatever else the machine runs and with SQLite's
single writer queueing 8 clients: it is reported, not judged). The report
goes to bench/money_results.md, its verdicts to bench/money_results.json (read by bench/summary.py).
Exit code 0 whether targets pass or fail; non-zero only when the benchmark could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
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
import verdicts as verdict_file  # noqa: E402
from run import BenchError  # noqa: E402
from verdicts import Verdict  # noqa: E402

DEFAULT_OUTPUT = BENCH_DIR / "money_results.md"
DEFAULT_POSTGRES_URL = "postgresql://root@127.0.0.1:5432/test"
REWARD_CENTS = 500
COST_FACTOR = 1.5  # a paid operation costs at most this many times its free counterpart (issue 28)
PAID_AWARD_CPU_MS = 5.0  # server CPU per paid award on PostgreSQL (issue 28)
STEP_FACTOR = 3.0  # publish, apply, submit and award each cost at most this many drafts (issue 28)
STEPS = ("publish", "apply", "submit", "award")  # the free lifecycle's steps judged against a draft
QUIET_S, IDLE_CPU_S, SETTLE_MAX_S = 0.05, 0.002, 3.0  # when a batch's trailing work is done (Meter.settled)


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
    batch_cpu_ms: list[float] = field(default_factory=list)  # server CPU per operation, each batch

    def add(self, latencies: list[float], seconds: float, cpu_s: float) -> None:
        self.latencies_ms += latencies
        self.seconds += seconds
        self.cpu_s += cpu_s
        self.batch_cpu_ms.append(cpu_s * 1000 / max(len(latencies), 1))

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


@dataclass
class Paired:
    """A ratio judged as run.py judges its own: the median of the rounds' ratios, each round measuring its two
    sides back to back (a slow spell of the shared machine weighs on both sides of one round)."""

    rounds: list[tuple[float, float]] = field(default_factory=list)  # (measured, reference) ms per op

    def add(self, measured: OpStats, reference: OpStats) -> None:
        self.rounds.append((measured.batch_cpu_ms[-1], reference.batch_cpu_ms[-1]))

    @property
    def ratios(self) -> list[float]:
        return [m / r if r else float("inf") for m, r in self.rounds]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    def text(self) -> str:
        measured = statistics.median(m for m, _ in self.rounds)
        reference = statistics.median(r for _, r in self.rounds)
        rounds = ", ".join(f"{x:.2f}" for x in self.ratios)
        return f"{self.ratio:.2f}x (rounds {rounds}; medians {measured:.2f} / {reference:.2f} ms)"


class Meter:
    """Runs work with `concurrency` clients; named work is timed and its server CPU added to stats[name].
    A step judged against a draft runs in `batches` rounds, each right after as many drafts (`draft`, one
    draft request), and each round's two figures go to pairs[...]."""

    def __init__(
        self,
        server_cpu: Callable[[], Awaitable[float]],
        concurrency: int,
        stats: dict[str, OpStats],
        batches: int,
    ) -> None:
        self.server_cpu, self.concurrency, self.stats, self.batches = server_cpu, concurrency, stats, batches
        self.pairs: dict[str, Paired] = {}
        self.draft: Callable[[], Awaitable[Any]] | None = None

    async def run(self, name: str | None, work: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
        if name is None:
            return await gather_limited(self.concurrency, work)
        latencies: list[float] = []

        async def clocked(fn: Callable[[], Awaitable[Any]]) -> Any:
            t0 = time.perf_counter()
            result = await fn()
            latencies.append((time.perf_counter() - t0) * 1000)
            return result

        cpu0, t0 = await self.server_cpu(), time.perf_counter()
        results = await gather_limited(self.concurrency, [lambda fn=fn: clocked(fn) for fn in work])
        seconds = time.perf_counter() - t0
        self.stats.setdefault(name, OpStats(name)).add(latencies, seconds, await self.settled() - cpu0)
        return results

    async def settled(self) -> float:
        """The server's CPU once the work a batch left behind it (what a request does after its answer: the
        after-commit handlers, mail delivery) has run: counted with the batch that caused it, not the next one.
        Idle is two readings QUIET_S apart within IDLE_CPU_S of each other."""
        last = await self.server_cpu()
        deadline = time.perf_counter() + SETTLE_MAX_S
        while time.perf_counter() < deadline:
            await asyncio.sleep(QUIET_S)
            now = await self.server_cpu()
            if now - last <= IDLE_CPU_S:
                return now
            last = now
        return last

    def pair(self, key: str, measured: str, reference: str) -> None:
        self.pairs.setdefault(key, Paired()).add(self.stats[measured], self.stats[reference])

    async def beside_drafts(self, name: str, work: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
        """`work` measured right after as many drafts: one round of `name` against a draft."""
        if self.draft is None:
            raise BenchError("no draft request to measure beside")
        await self.run("draft", [self.draft] * len(work))
        results = await self.run(name, work)
        self.pair(f"{name} vs draft", name, "draft")
        return results

    async def in_rounds(self, name: str, work: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
        results: list[Any] = []
        for part in batched(work, self.batches):
            results += await self.beside_drafts(name, part)
        return results


def batched(work: list[Any], batches: int) -> list[list[Any]]:
    """`work` in `batches` consecutive parts of (nearly) equal size."""
    if len(work) < batches:
        raise BenchError(f"{len(work)} operations cannot fill {batches} batches")
    edges = [len(work) * b // batches for b in range(batches + 1)]
    return [work[edges[b] : edges[b + 1]] for b in range(batches)]


async def drafts(
    meter: Meter, client: httpx.AsyncClient, agent: Agent, count: int, paid: bool, measure: str | None = None
) -> list[str]:
    made = await meter.run(
        measure,
        [lambda: call(client, "POST", "/api/v2/jobs", agent, job_body(paid), 201) for _ in range(count)],
    )
    return [job["id"] for job in made]


async def in_review(
    meter: Meter, client: httpx.AsyncClient, fx: Fixtures, job_ids: list[str], measure: bool = False
) -> list[tuple[str, str]]:
    """(job id, submission id) for each job: a worker applied, was admitted, acknowledged and submitted.
    Step by step over all the jobs, so with `measure` each step's server CPU is its own."""
    worker = {job_id: fx.workers[i % len(fx.workers)] for i, job_id in enumerate(job_ids)}

    async def step(name: str, work: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
        return await (meter.in_rounds(name, work) if measure else meter.run(None, work))

    def post(path: str, agent: Agent, body: Any = None, expect: int = 200) -> Callable[[], Awaitable[Any]]:
        return lambda: call(client, "POST", path, agent, body, expect)

    # Publishing is measured on its own, interleaved free and paid (bench_one).
    await meter.run(None, [post(f"/api/v2/jobs/{j}/publish", fx.requester) for j in job_ids])
    await step("apply", [post(f"/api/v2/jobs/{j}/applications", worker[j], expect=201) for j in job_ids])
    await meter.run(None, [post(f"/api/v2/jobs/{j}/admission/run", fx.requester) for j in job_ids])
    slot_of: dict[str, str] = {}
    for agent in fx.workers:
        slots = await call(client, "GET", "/api/v2/worker-agents/me/participation-slots", agent)
        slot_of.update({s["jobId"]: s["id"] for s in slots["slots"]})
    await step(
        "acknowledge",
        [post(f"/api/v2/participation-slots/{slot_of[j]}/acknowledge", worker[j]) for j in job_ids],
    )
    answer = {"artifactType": "text", "structuredPayloadJson": {"summary": "Done", "answer": "The answer."}}
    subs = await step(
        "submit",
        [post(f"/api/v2/participation-slots/{slot_of[j]}/submit", worker[j], answer, 201) for j in job_ids],
    )
    return [(j, sub["id"]) for j, sub in zip(job_ids, subs, strict=True)]


async def interleaved(
    meter: Meter,
    op: str,
    free: list[Callable[[], Awaitable[Any]]],
    paid: list[Callable[[], Awaitable[Any]]],
) -> None:
    """Rounds of drafts, free `op`s and paid `op`s, back to back: each round is one ratio of the free `op` to
    a draft and one of the paid `op` to the free."""
    for free_part, paid_part in zip(batched(free, meter.batches), batched(paid, meter.batches), strict=True):
        await meter.beside_drafts(f"free {op}", free_part)
        await meter.run(f"paid {op}", paid_part)
        meter.pair(f"paid {op} vs free", f"paid {op}", f"free {op}")


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

    stats: dict[str, OpStats] = {}
    meter = Meter(server_cpu, args.concurrency, stats, args.batches)
    try:
        limits = httpx.Limits(max_connections=args.concurrency * 2)
        async with httpx.AsyncClient(base_url=server.base, timeout=30.0, limits=limits) as client:
            print(f"[{label}] publish: {args.jobs} free and {args.jobs} paid drafts", flush=True)
            # The draft each measured step is paired with (Meter.beside_drafts); these jobs go no further.
            meter.draft = lambda: call(client, "POST", "/api/v2/jobs", fx.requester, job_body(False), 201)
            await drafts(meter, client, fx.requester, 2, False)  # warm-up
            free = await drafts(meter, client, fx.requester, args.jobs, False)
            paid = await drafts(meter, client, fx.requester, args.jobs, True)
            # Warm the paths once (connections, statement caches) outside the measurement.
            for job_id in (free.pop(), paid.pop()):
                await call(client, "POST", f"/api/v2/jobs/{job_id}/publish", fx.requester)

            def publish(job_id: str) -> Callable[[], Awaitable[Any]]:
                return lambda: call(client, "POST", f"/api/v2/jobs/{job_id}/publish", fx.requester)

            await interleaved(meter, "publish", [publish(j) for j in free], [publish(j) for j in paid])

            print(
                f"[{label}] award: bringing {args.jobs} free and {args.jobs} paid jobs to review", flush=True
            )
            await in_review(meter, client, fx, await drafts(meter, client, fx.requester, 2, False))  # warm-up
            free_drafts = await drafts(meter, client, fx.requester, args.jobs, False)
            free_review = await in_review(meter, client, fx, free_drafts, measure=True)
            paid_drafts = await drafts(meter, client, fx.requester, args.jobs, True)
            paid_review = await in_review(meter, client, fx, paid_drafts)

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
                meter, "award", [award(p) for p in free_review], [award(p) for p in paid_review]
            )

            print(f"[{label}] contention: {args.race} paid publishes against one balance", flush=True)
            race = await contention(args, settings, meter, client, fx)
    finally:
        job_bench.stop_server(server)
    return {"stats": stats, "pairs": meter.pairs, "race": race}


async def contention(
    args: argparse.Namespace, settings: Any, meter: Meter, client: httpx.AsyncClient, fx: Fixtures
) -> Race:
    job_ids = await drafts(meter, client, fx.racer, args.race, True)
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


def verdicts(results: dict[str, dict[str, Any]]) -> list[Verdict]:
    out: list[Verdict] = []
    for label, result in results.items():
        st: dict[str, OpStats] = result["stats"]
        pairs: dict[str, Paired] = result["pairs"]
        for op in ("publish", "award"):
            paired = pairs[f"paid {op} vs free"]
            p99 = st[f"paid {op}"].pct(0.99) / st[f"free {op}"].pct(0.99)
            out.append(
                Verdict(
                    f"paid {op} costs <= {COST_FACTOR:g}x free (server CPU/op)",
                    label,
                    f"{paired.text()}; p99 {p99:.2f}x",
                    paired.ratio <= COST_FACTOR,
                )
            )
        award = statistics.median(st["paid award"].batch_cpu_ms)
        rounds = ", ".join(f"{x:.2f}" for x in st["paid award"].batch_cpu_ms)
        out.append(
            Verdict(
                f"server CPU per paid award <= {PAID_AWARD_CPU_MS:g} ms on PostgreSQL",
                label,
                f"{award:.2f} ms (rounds {rounds})",
                award <= PAID_AWARD_CPU_MS if label == "postgres" else None,
            )
        )
        for step in STEPS:
            paired = pairs[f"{'free ' if step in ('publish', 'award') else ''}{step} vs draft"]
            out.append(
                Verdict(
                    f"{step} costs <= {STEP_FACTOR:g}x a draft (server CPU/op)",
                    label,
                    paired.text(),
                    paired.ratio <= STEP_FACTOR,
                )
            )
        race: Race = result["race"]
        exact = (
            race.published == race.jobs // 2
            and race.refused == race.jobs - race.jobs // 2
            and not race.other
            and race.books_clean
            and race.reserved_cents == race.funded_cents
        )
        out.append(
            Verdict(
                f"{race.jobs} concurrent paid publishes against a balance for half: exactly half refused, books clean",
                label,
                f"{race.published} published, {race.refused} refused (payment_not_ready), other "
                f"{race.other or 'none'}, {race.seconds:.2f} s, slowest {race.slowest_ms:.0f} ms, books "
                f"{'clean' if race.books_clean else 'NOT CLEAN'}, reserved {race.reserved_cents} of "
                f"{race.funded_cents}",
                exact,
            )
        )
    return out


def rounds_text(values: list[float], shown: int) -> str:
    if len(values) <= shown:
        return ", ".join(f"{x:.2f}" for x in values)
    return f"{len(values)} rounds, {min(values):.2f} to {max(values):.2f}"


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]], judged: list[Verdict]) -> str:
    lines = [
        "# Money benchmark (bench/money.py)",
        "",
        f"Run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; {args.jobs} jobs per operation, "
        f"{args.concurrency} concurrent clients, {args.batches} rounds; contention: {args.race} "
        "paid publishes at once against a balance funded for half of them. Server CPU: the server process "
        "(all threads) and, on PostgreSQL, the backends serving it, per operation: the median of the rounds. "
        "Each round measures its two sides back to back (as many drafts, then the step; the free operation, "
        "then the paid one) and a ratio is the median of the rounds' ratios.",
        "",
        "| Database | Operation | ops/s | p50 ms | p99 ms | server CPU ms/op (rounds) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, result in results.items():
        for s in result["stats"].values():
            lines.append(
                f"| {label} | {s.name} | {s.per_second:,.0f} | {s.pct(0.5):.2f} | {s.pct(0.99):.2f} | "
                f"{statistics.median(s.batch_cpu_ms):.2f} ({rounds_text(s.batch_cpu_ms, args.batches)}) |"
            )
    lines += ["", "| Target | Database | Measured | Pass |", "|---|---|---|---|"]
    lines += [f"| {v.target} | {v.database} | {v.measured} | {v.word} |" for v in judged]
    lines += ["", "Machine: " + ", ".join(f"{k} {v}" for k, v in base.machine().items()), ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark paid publish and award on SQLite and PostgreSQL.")
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--jobs", type=int, default=200, help="jobs per operation and kind (default 200)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument(
        "--batches", type=int, default=5, help="measured rounds of each operation (default 5)"
    )
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
    judged = verdicts(results)
    text = report(args, results, judged)
    args.output.write_text(text)
    verdict_file.write(
        args.output.with_suffix(".json"), "money", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), judged
    )
    print(text)
    passed = all(v.ok is not False for v in judged)
    print(f"targets: {'all pass' if passed else 'some FAIL'}; report written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
