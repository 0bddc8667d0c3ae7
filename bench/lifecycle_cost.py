"""CPU per step of the job lifecycle, in process: no sockets, no uvicorn, the real app called through
httpx.ASGITransport (request log on, as shipped), so each figure is the server's own cost of one request.

    .venv/bin/python bench/lifecycle_cost.py                      # 100 free jobs, SQLite
    .venv/bin/python bench/lifecycle_cost.py --reward 1000        # paid jobs (the requester funded)
    .venv/bin/python bench/lifecycle_cost.py --statements award   # one award's SQL statements, in order
    .venv/bin/python bench/lifecycle_cost.py --statements submit --warm --rounds 2  # a submit's, cache warm
    LC_WIDTH=5000 .venv/bin/python bench/lifecycle_cost.py --statements award  # whole statements (default 160)
    .venv/bin/python bench/lifecycle_cost.py --profile submit     # cProfile of the submits (CPU timer)
    .venv/bin/python bench/lifecycle_cost.py --profile award --profile-out /tmp/award.prof  # for pstats
    .venv/bin/python bench/lifecycle_cost.py --database-url postgresql+asyncpg://root@127.0.0.1:5432/<db>
    .venv/bin/python bench/lifecycle_cost.py --concurrency 8      # 8 requests of a step at once (as make bench)

Each round brings --jobs jobs through draft, publish, apply, (admission), acknowledge, submit and award, and
prints the process CPU per request of each step (all threads; the after-commit work each step leaves is
drained inside its step). The first round warms caches and is printed too; compare later rounds. Compare two
versions only in the same hour, interleaved (this machine's speed moves within a day): for example a git
worktree of the other commit, run with PYTHONPATH set to it.

A PostgreSQL URL must name an existing, empty database: it is migrated in place; a `+db` row then shows the
CPU of the database's backends per request (from /proc), beside the server's own. The fixtures are the
suite's own (tests/jobs_helpers.py, tests/payments_helpers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (str(ROOT), str(ROOT / "bench")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import jobs as job_bench  # noqa: E402  (bench/jobs.py: the benchmarks' settings)

# The suite's fixtures; imported before any event loop runs (tests/conftest.py probes PostgreSQL at import).
from tests.jobs_helpers import job_body, new_agent, new_owner, submit_body  # noqa: E402
from tests.payments_helpers import buyer  # noqa: E402

STEPS = ("draft", "publish", "apply", "acknowledge", "submit", "award")
BASE_URL = "http://testserver"  # the suite's fixtures send this Origin


async def main(args: argparse.Namespace) -> None:
    import httpx
    from sqlalchemy import event

    from callboard_core.container import Core
    from callboard_core.seed import migrate_and_seed
    from http_api.app import create_app

    tmp = Path(tempfile.mkdtemp(prefix="callboard-lifecycle-"))
    url = args.database_url or f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
    settings = job_bench.bench_settings(url, tmp, "x" * 48, base_url=BASE_URL)
    await migrate_and_seed(settings)
    core = Core.build(settings)
    await core.start()
    app = create_app(core=core)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)
    postgres = url.startswith("postgresql")
    backends = job_bench.postgres_backends(url) if postgres else (lambda: [])
    backend_costs: dict[str, float] = {}
    try:
        if args.reward:
            requester = (await buyer(app, core, funds=args.reward * args.jobs * args.rounds * 2)).agent
        else:
            requester = await new_agent(await new_owner(app, core))
        workers = [await new_agent(await new_owner(app, core)) for _ in range(4)]

        async def post(path: str, agent: Any, body: Any = None, expect: int = 200) -> Any:
            r = await client.post(path, json=body, headers=agent.h)
            if r.status_code != expect:
                raise SystemExit(f"POST {path} answered {r.status_code}: {r.text[:300]}")
            return r.json()

        async def settle() -> None:
            await core.bus.drain()
            await core.mailer.drain()

        async def statements_of(call: Callable[[], Awaitable[Any]]) -> Any:
            seen: list[str] = []

            def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
                seen.append(" ".join(statement.split())[: int(os.environ.get("LC_WIDTH", "160"))])

            engines = {core.db.write_engine.sync_engine, core.db.read_engine.sync_engine}
            if not args.warm:
                core.read_cache.clear()
            for engine in engines:
                event.listen(engine, "before_cursor_execute", record)
            try:
                result = await call()
                await settle()
            finally:
                for engine in engines:
                    event.remove(engine, "before_cursor_execute", record)
            print(f"{len(seen)} statements:\n  " + "\n  ".join(seen))
            return result

        async def step(
            name: str, calls: list[Callable[[], Awaitable[Any]]], costs: dict[str, float]
        ) -> list[Any]:
            await settle()
            out: list[Any] = []
            if args.statements == name:
                out.append(await statements_of(calls[0]))
                calls = calls[1:]
            profiler = cProfile.Profile(time.process_time) if args.profile == name else None
            pids = await asyncio.to_thread(backends)
            backend0 = job_bench.cpu_seconds(pids)
            started = time.process_time()
            if profiler:
                profiler.enable()
            if args.concurrency > 1:
                gate = asyncio.Semaphore(args.concurrency)

                async def gated(call: Callable[[], Awaitable[Any]]) -> Any:
                    async with gate:
                        return await call()

                out.extend(await asyncio.gather(*(gated(call) for call in calls)))
            else:
                for call in calls:
                    out.append(await call())
            await settle()
            if profiler:
                profiler.disable()
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats(args.sort).print_stats(args.top)
                print(text.getvalue())
                if args.profile_out:
                    profiler.dump_stats(args.profile_out)
            costs[name] = (time.process_time() - started) * 1000 / max(len(calls), 1)
            backend_costs[name] = (job_bench.cpu_seconds(pids) - backend0) * 1000 / max(len(calls), 1)
            return out

        body = job_body(rewardAmountCents=args.reward) if args.reward else job_body()
        print(
            f"{url.split(':')[0]}, {args.jobs} {'paid' if args.reward else 'free'} jobs per round; ms of CPU per request"
        )
        print("round  " + "  ".join(f"{s:>11s}" for s in STEPS))
        for round_no in range(1, args.rounds + 1):
            costs: dict[str, float] = {}
            made = await step(
                "draft", [lambda: post("/api/v2/jobs", requester, body, 201)] * args.jobs, costs
            )
            jobs = [job["id"] for job in made]
            await step(
                "publish", [lambda j=j: post(f"/api/v2/jobs/{j}/publish", requester) for j in jobs], costs
            )
            worker = {j: workers[i % len(workers)] for i, j in enumerate(jobs)}
            await step(
                "apply",
                [lambda j=j, w=worker[j]: post(f"/api/v2/jobs/{j}/applications", w, None, 201) for j in jobs],
                costs,
            )
            for j in jobs:
                await post(f"/api/v2/jobs/{j}/admission/run", requester)
            slot: dict[str, str] = {}
            for agent in workers:
                r = await client.get("/api/v2/worker-agents/me/participation-slots", headers=agent.h)
                slot.update({s["jobId"]: s["id"] for s in r.json()["slots"]})
            await step(
                "acknowledge",
                [
                    lambda s=slot[j], w=worker[j]: post(f"/api/v2/participation-slots/{s}/acknowledge", w)
                    for j in jobs
                ],
                costs,
            )
            subs = await step(
                "submit",
                [
                    lambda s=slot[j], w=worker[j]: post(
                        f"/api/v2/participation-slots/{s}/submit", w, submit_body(), 201
                    )
                    for j in jobs
                ],
                costs,
            )
            await step(
                "award",
                [
                    lambda j=j, s=s: post(f"/api/v2/jobs/{j}/award", requester, {"submissionId": s["id"]})
                    for j, s in zip(jobs, subs, strict=True)
                ],
                costs,
            )
            print(f"{round_no:>5d}  " + "  ".join(f"{costs[s]:>11.2f}" for s in STEPS), flush=True)
            if postgres:
                print("  +db  " + "  ".join(f"{backend_costs[s]:>11.2f}" for s in STEPS), flush=True)
    finally:
        await client.aclose()
        await core.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100, help="jobs per round (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3; the first warms up)")
    parser.add_argument(
        "--concurrency", type=int, default=1, help="requests of a step in flight at once (default 1)"
    )
    parser.add_argument("--reward", type=int, default=0, help="reward in cents (default 0: free jobs)")
    parser.add_argument("--statements", choices=STEPS, help="print one request's statements for this step")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="--statements with the read cache as the round left it (default: cold)",
    )
    parser.add_argument("--profile", choices=STEPS, help="cProfile this step (process CPU timer)")
    parser.add_argument("--profile-out", help="also write the profile here (pstats: print_callers, snakeviz)")
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative", "ncalls"])
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--database-url", default=os.environ.get("CALLBOARD_BENCH_DATABASE_URL"))
    asyncio.run(main(parser.parse_args()))
