"""Profile one request path in-process: the real app (create_app) called directly as an ASGI app.

    .venv/bin/python bench/profile_request.py                         # GET /api/v2/agents/me, SQLite
    .venv/bin/python bench/profile_request.py --path /healthz --no-key
    .venv/bin/python bench/profile_request.py --requests 3000 --concurrency 16 --sort cumulative
    .venv/bin/python bench/profile_request.py --no-profile --batches 10   # on a busy machine
    .venv/bin/python bench/profile_request.py --database-url postgresql+asyncpg://root@127.0.0.1:5432/<db>
    .venv/bin/python bench/profile_request.py --draft --statements   # POST /api/v2/jobs, SQL counted

The agent is registered through httpx.ASGITransport; the measured requests skip any HTTP client and call
the ASGI app with a prepared scope, so the figures are the server's own cost (no uvicorn, no sockets).
Prints the time per request without the profiler, then cProfile's top functions. cProfile sees the event
loop's thread only: time spent in aiosqlite's worker threads shows up as the loop waiting (select/epoll).
A PostgreSQL URL must name an existing, empty database: it is migrated in place.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench_run


async def main(args: argparse.Namespace) -> None:
    import httpx

    from callboard_core.config import load_settings
    from callboard_core.seed import migrate_and_seed
    from http_api.app import create_app

    tmp = Path(tempfile.mkdtemp(prefix="callboard-profile-"))
    try:
        url = args.database_url or f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
        settings = load_settings(
            database_url=url,
            env="development",
            secret_key="x" * 48,
            rate_limit_enabled=False,
            var_dir=tmp,
            request_log=not args.no_log,
        )
        await migrate_and_seed(settings)
        app = create_app(settings)
        # What the server's lifespan does first: on PostgreSQL the read cache serves nothing until its change
        # feed listens (measured without it, every request read its credential again).
        await app.state.core.start()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench.local"
        ) as client:
            if args.draft:
                api_key = await bench_run.claimed_agent_key(url, tmp)
            else:
                reply = await client.post(
                    "/api/v2/agents/register",
                    json={"name": "Bench", "endpointUrl": "https://bench.example.com"},
                )
                reply.raise_for_status()
                api_key = reply.json()["apiKey"]

        body, method, expect = b"", "GET", 200
        headers = [(b"host", b"bench.local")]
        if args.draft:
            body, method, expect, args.path = bench_run.DRAFT_BODY, "POST", 201, "/api/v2/jobs"
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if not args.no_key:
            headers.append((b"x-api-key", api_key.encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": args.path,
            "raw_path": args.path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 80),
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def one() -> None:
            status = 0

            async def send(message: MutableMapping[str, Any]) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]

            await app(dict(scope, state={}), receive, send)
            if status != expect:
                raise SystemExit(f"{args.path} answered {status}")
            await asyncio.sleep(0)  # let background tasks (lastUsedAt touch) run, as a server would

        async def batch(n: int) -> float:
            started = time.perf_counter()
            if args.concurrency == 1:
                for _ in range(n):
                    await one()
            else:
                sem = asyncio.Semaphore(args.concurrency)

                async def limited() -> None:
                    async with sem:
                        await one()

                await asyncio.gather(*(limited() for _ in range(n)))
            return time.perf_counter() - started

        await batch(300)  # warm-up: caches, pool, statement cache
        walls, cpus = [], []
        for _ in range(args.batches):
            cpu0 = time.process_time()
            walls.append(await batch(args.requests))
            cpus.append(time.process_time() - cpu0)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"{args.path}: {args.requests} requests, concurrency {args.concurrency}: "
            f"{wall / args.requests * 1e6:.0f} us wall/request, {cpu / args.requests * 1e6:.0f} us "
            f"process CPU/request (all threads), {args.requests / wall:,.0f} req/s"
            + (
                f" (median of {args.batches} batches; best {min(cpus) / args.requests * 1e6:.0f} us CPU)"
                if args.batches > 1
                else ""
            )
        )
        if args.statements:
            await _count_statements(app, one)
        if not args.no_profile or args.dump:
            profiler = cProfile.Profile()
            profiler.enable()
            await batch(args.requests)
            profiler.disable()
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
            if args.dump:
                profiler.dump_stats(args.dump)
            print(out.getvalue())
        await app.state.core.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _count_statements(app: Any, one: Any) -> None:
    """One request's SQL statements, printed in order (SQLAlchemy's before_cursor_execute)."""
    from sqlalchemy import event

    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        seen.append(" ".join(statement.split())[:110])

    engines = {app.state.core.db.write_engine.sync_engine, app.state.core.db.read_engine.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        await one()
        await app.state.core.bus.drain()
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)
    print(f"{len(seen)} statements for one request:")
    for line in seen:
        print(f"  {line}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--path", default="/api/v2/agents/me", help="a GET path (default /api/v2/agents/me)")
    parser.add_argument("--no-key", action="store_true", help="send no X-API-Key header")
    parser.add_argument("--draft", action="store_true", help="POST /api/v2/jobs (a draft) instead of a GET")
    parser.add_argument("--statements", action="store_true", help="print one request's SQL statements")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative", "ncalls"])
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--dump", default="", help="also write the cProfile stats to this file")
    parser.add_argument("--no-log", action="store_true", help="the request log off (default: on, as shipped)")
    parser.add_argument(
        "--batches",
        type=int,
        default=1,
        help="measure this many batches of --requests and print the median (and the best CPU figure, "
        "which other processes on a busy machine inflate least)",
    )
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    arguments = parser.parse_args()
    if arguments.batches < 1 or arguments.requests < 1:
        parser.error("--batches and --requests must be positive")
    asyncio.run(main(arguments))
