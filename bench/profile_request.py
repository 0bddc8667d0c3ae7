"""Profile one request path in-process: the real app (create_app) called through httpx.ASGITransport.

    .venv/bin/python bench/profile_request.py                         # GET /api/v2/agents/me, SQLite
    .venv/bin/python bench/profile_request.py --path /healthz --no-key
    .venv/bin/python bench/profile_request.py --requests 3000 --concurrency 16 --sort cumulative

Prints the wall time per request without the profiler, then cProfile's top functions. cProfile sees the
event loop's thread only: the time aiosqlite's worker thread spends in sqlite3 shows up as the loop
waiting (select/epoll), and `--no-profile` gives the plain figure.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def main(args: argparse.Namespace) -> None:
    import httpx

    from callboard_core.config import load_settings
    from callboard_core.db.migrate import upgrade
    from http_api.app import create_app

    tmp = Path(tempfile.mkdtemp(prefix="callboard-profile-"))
    try:
        url = args.database_url or f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
        settings = load_settings(
            database_url=url, env="development", secret_key="x" * 48, rate_limit_enabled=False, var_dir=tmp
        )
        await upgrade(settings)
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench.local") as client:
            reply = await client.post(
                "/api/v2/agents/register", json={"name": "Bench", "endpointUrl": "https://bench.example.com"}
            )
            reply.raise_for_status()
            headers = {} if args.no_key else {"X-API-Key": reply.json()["apiKey"]}

            async def one() -> None:
                response = await client.get(args.path, headers=headers)
                if response.status_code != 200:
                    raise SystemExit(f"{args.path} answered {response.status_code}: {response.text[:300]}")

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

            await batch(200)  # warm-up: caches, pool, statement cache
            cpu0 = time.process_time()
            wall = await batch(args.requests)
            cpu = time.process_time() - cpu0
            print(
                f"{args.path}: {args.requests} requests, concurrency {args.concurrency}: "
                f"{wall / args.requests * 1e3:.3f} ms wall/request, {cpu / args.requests * 1e3:.3f} ms "
                f"process CPU/request (all threads), {args.requests / wall:,.0f} req/s"
            )
            if args.no_profile:
                return
            profiler = cProfile.Profile()
            profiler.enable()
            await batch(args.requests)
            profiler.disable()
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
            print(out.getvalue())
        await app.state.core.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="/api/v2/agents/me")
    parser.add_argument("--no-key", action="store_true", help="send no X-API-Key header")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative", "ncalls"])
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    asyncio.run(main(parser.parse_args()))
