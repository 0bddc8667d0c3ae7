"""Directory benchmark: the public directory over 50,000 worker agents, on SQLite and PostgreSQL in one run.

    .venv/bin/python bench/directory.py                           # both databases (the default)
    .venv/bin/python bench/directory.py --database sqlite --agents 50000 --requests 400

For each database: a fresh database (bench/run.py `database`), migrated and seeded set-based with --agents
listable workers (and 10% that must stay private: requester-only, unclaimed), each with one to three of six
capability tags, presence spread over ONLINE, DEGRADED and OFFLINE and reputations, wins and completions
drawn at random (so ties happen, and the agentId tiebreak is exercised); then `callboard serve --no-migrate`
and, one kept-alive client at a time, --requests requests of each query: the first page, a capability's first
page, a deep page (page 50), a capability's deep page, a free-text search and a profile. It reports p50 and
p99 latency per query, and the query plans (EXPLAIN QUERY PLAN / EXPLAIN) of the two listing statements.

Target (issue 12): p99 <= 25 ms for every listing query on both databases, the listing statements walking an
index (no sort of the table). The report goes to bench/directory_results.md.
Exit code 0 whether targets pass or fail; non-zero only when the benchmark could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import sys
import tempfile
import time
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

import jobs as job_bench  # noqa: E402  (bench/jobs.py: settings, the server)
import run as base  # noqa: E402  (bench/run.py: processes, throwaway databases)
from run import BenchError  # noqa: E402

DEFAULT_OUTPUT = BENCH_DIR / "directory_results.md"
DEFAULT_POSTGRES_URL = "postgresql://root@127.0.0.1:5432/test"
P99_TARGET_MS = 25.0
TAGS = ("python", "rust", "typescript", "data-analysis", "copywriting", "translation")


@dataclass
class Query:
    name: str
    path: str
    params: dict[str, Any]
    listing: bool = True
    samples: list[float] = field(default_factory=list)

    def p(self, q: float) -> float:
        return base.percentile(self.samples, q)


@dataclass
class Report:
    kind: str
    agents: int
    seed_s: float
    queries: list[Query]
    plans: dict[str, str]


async def seed(settings: Any, count: int, batch: int = 5000) -> tuple[float, str]:
    """`count` listable workers plus 10% private agents, set-based; returns (seconds, a listed handle)."""
    from sqlalchemy import select

    from callboard_core.agents import reputation
    from callboard_core.agents.models import Agent, AgentCapability
    from callboard_core.capabilities.models import CapabilityTag
    from callboard_core.container import Core
    from callboard_core.ids import new_id
    from callboard_core.seed import migrate_and_seed
    from callboard_core.users import service as users

    await migrate_and_seed(settings)
    rng = random.Random(20261125)
    started = time.perf_counter()
    core = Core.build(settings)
    try:
        async with core.uow() as uow:
            owner = (await users.create(uow.session, email=f"bench-{secrets.token_hex(4)}@example.com")).id
            rows = (await uow.session.execute(select(CapabilityTag.slug, CapabilityTag.id))).all()
            tags = {slug: tag_id for slug, tag_id in rows if slug in TAGS}
        missing = set(TAGS) - set(tags)
        if missing:
            raise BenchError(f"the taxonomy lacks {sorted(missing)}")
        now = datetime.now(UTC)
        total = count + count // 10
        done, first_handle = 0, ""
        while done < total:
            agents, links = [], []
            for i in range(done, min(done + batch, total)):
                private = i >= count
                rank = rng.choice((3, 3, 2, 0, 0, 0))
                wins = rng.randint(0, 20)
                completions = wins + rng.randint(0, 30)
                agent_id = new_id("agt")
                handle = f"bench-{i:06d}"
                first_handle = first_handle or handle
                agents.append(
                    {
                        "id": agent_id,
                        "owner_id": None if private and i % 2 else owner,
                        "name": f"Bench worker {i}",
                        "handle": handle,
                        "description": rng.choice(
                            ("Fast and careful.", "Data pipelines.", "Technical writing.")
                        ),
                        "endpoint_url": "https://agent.example.com/hook",
                        "pricing_model": "PER_TASK",
                        "price_per_unit": 0.0,
                        "currency": "usd",
                        "auth_method": "API_KEY",
                        "status": "ACTIVE",
                        "reputation_score": reputation.stored(completions + 3 * wins - rng.randint(0, 3)),
                        "total_tasks": completions,
                        "success_rate": wins / completions if completions else 0.0,
                        "avg_response_ms": 0.0,
                        "dispute_rate": 0.0,
                        "win_count": wins,
                        "processor_onboarding_complete": False,
                        "processor_charges_enabled": False,
                        "processor_payouts_enabled": False,
                        "claim_status": "PROVISIONAL" if private and i % 2 else "CLAIMED",
                        "requester_enabled": True,
                        "worker_enabled": True,
                        "auto_publish_limit_cents": 0,
                        "intent": "REQUESTER" if private and not i % 2 else "BOTH",
                        "is_house": False,
                        "featured": False,
                        "presence_rank": rank,
                        "presence_seen_at": now if rank else None,
                        "created_at": now - timedelta(days=rng.randint(0, 300)),
                        "updated_at": now,
                    }
                )
                for slug in rng.sample(TAGS, rng.randint(1, 3)):
                    tag_wins = rng.randint(0, wins)
                    tag_done = tag_wins + rng.randint(0, max(0, completions - wins))
                    links.append(
                        {
                            "agent_id": agent_id,
                            "tag_id": tags[slug],
                            "tag_slug": slug,
                            "source": "DECLARED",
                            "completed_count": tag_done,
                            "win_count": tag_wins,
                            "reputation": reputation.stored(tag_done + 3 * tag_wins),
                            "presence_rank": rank,
                            "created_at": now,
                        }
                    )
            async with core.uow() as uow:
                await uow.session.execute(job_bench.table(Agent).insert(), agents)
                await uow.session.execute(job_bench.table(AgentCapability).insert(), links)
            done += len(agents)
        if not core.db.is_sqlite:
            async with core.db.write_engine.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.exec_driver_sql("VACUUM ANALYZE")
                await conn.exec_driver_sql("CHECKPOINT")
        else:
            async with core.db.write_engine.connect() as conn:
                await conn.exec_driver_sql("ANALYZE")
    finally:
        await core.close()
    return time.perf_counter() - started, first_handle


async def explain(settings: Any) -> dict[str, str]:
    """The plans of the two listing statements (the first page, overall and under a capability)."""
    from sqlalchemy import select

    from callboard_core.capabilities.models import CapabilityTag
    from callboard_core.container import Core
    from callboard_core.directory import service as directory
    from callboard_core.directory.schemas import DirectoryQuery

    core = Core.build(settings)
    plans: dict[str, str] = {}
    try:
        async with core.uow(write=False) as uow:
            session = uow.session
            tag_id = await session.scalar(select(CapabilityTag.id).where(CapabilityTag.slug == "rust"))
            for name, query in (
                ("overall", DirectoryQuery()),
                ("capability", DirectoryQuery(capability="rust")),
            ):
                stmt = directory.statement(query, tag_id if query.capability else None).limit(21)
                conn = await session.connection()
                compiled = stmt.compile(conn.engine, compile_kwargs={"literal_binds": True})
                prefix = "EXPLAIN QUERY PLAN " if core.db.is_sqlite else "EXPLAIN "
                rows = (await conn.exec_driver_sql(prefix + str(compiled))).all()
                plans[name] = "\n".join(" ".join(str(c) for c in row) for row in rows)
    finally:
        await core.close()
    return plans


def measure(server: Any, queries: list[Query], requests: int) -> None:
    with httpx.Client(base_url=server.base, timeout=10) as client:
        for query in queries:
            for _ in range(5):  # warm the connection and the caches
                client.get(query.path, params=query.params)
            for _ in range(requests):
                started = time.perf_counter()
                response = client.get(query.path, params=query.params)
                query.samples.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise BenchError(f"{query.name}: {response.status_code} {response.text[:300]}")


def bench_database(kind: str, args: argparse.Namespace) -> Report:
    url = None if kind == "sqlite" else args.postgres_url
    with tempfile.TemporaryDirectory(prefix="callboard-directory-") as tmpdir:
        tmp = Path(tmpdir)
        with base.database(url, tmp) as database_url:
            secret_key = secrets.token_urlsafe(48)
            settings = job_bench.bench_settings(database_url, tmp, secret_key)
            print(f"[{kind}] seeding {args.agents:,} agents", flush=True)
            seconds, handle = asyncio.run(seed(settings, args.agents))
            plans = asyncio.run(explain(settings))
            server = job_bench.start_callboard(tmp, database_url, secret_key, kind)
            try:
                path = "/api/v2/directory/agents"
                queries = [
                    Query("first page", path, {}),
                    Query("capability, first page", path, {"capability": "rust"}),
                    Query("page 50", path, {"page": 50}),
                    Query("capability, page 50", path, {"capability": "rust", "page": 50}),
                    Query("search (q)", path, {"q": "pipelines"}),
                    Query("profile", f"{path}/{handle}", {}, listing=False),
                ]
                print(f"[{kind}] measuring", flush=True)
                measure(server, queries, args.requests)
            finally:
                job_bench.stop_server(server)
    return Report(kind, args.agents, seconds, queries, plans)


def render(reports: list[Report], args: argparse.Namespace) -> str:
    lines = [
        "# Directory benchmark",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, `bench/directory.py`: {args.agents:,} listable workers "
        f"(plus 10% private), {args.requests} sequential requests per query on one kept-alive connection.",
        f"Target: p99 <= {P99_TARGET_MS:.0f} ms for every listing query.",
        "",
    ]
    for report in reports:
        lines += [
            f"## {report.kind}",
            "",
            f"Seeded in {report.seed_s:.1f} s.",
            "",
            "| query | p50 | p99 | target |",
            "|---|---|---|---|",
        ]
        for q in report.queries:
            verdict = ("PASS" if q.p(0.99) <= P99_TARGET_MS else "FAIL") if q.listing else "(information)"
            lines.append(f"| {q.name} | {q.p(0.5):.2f} ms | {q.p(0.99):.2f} ms | {verdict} |")
        for name, plan in report.plans.items():
            lines += ["", f"Plan, {name}:", "", "```", plan, "```"]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--agents", type=int, default=50_000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    kinds = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    try:
        reports = [bench_database(kind, args) for kind in kinds]
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1
    finally:
        base.stop_all()
    text = render(reports, args)
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
