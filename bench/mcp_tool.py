"""The `home` MCP tool over streamable HTTP against `GET /api/v2/home`, in the same run.

    .venv/bin/python bench/mcp_tool.py                     # SQLite in a temporary directory
    .venv/bin/python bench/mcp_tool.py --calls 2000 --rounds 3
    .venv/bin/python bench/mcp_tool.py --database-url postgresql+asyncpg://root@127.0.0.1:5432/postgres

Starts `callboard serve` (bench/run.py's servers), registers an agent, then measures per-call latency one
call at a time (no queueing), interleaving rounds of three series:
  - rest: `GET /api/v2/home` with httpx on a kept-alive connection;
  - mcp: the `home` tool over streamable HTTP on the wire: the very `tools/call` request the `mcp` client
    sends (captured from it: headers, JSON-RPC envelope), posted with the same httpx client, so the two
    differ only by what the server and the protocol cost. This is the target's series;
  - mcp client: the same call through the real `mcp` Python client, which adds its own work per call
    (JSON-RPC bookkeeping, validating the result against the tool's output schema): information, since a
    runtime's client is its own.
Target: the tool's median latency at most 2x the REST call's. Writes bench/mcp_results.md; exit 0 whether
the target passes or not.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import run as base  # bench/run.py: servers, database, machine facts

DEFAULT_OUTPUT = base.BENCH_DIR / "mcp_results.md"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(url: str, key: str, calls: int, rounds: int) -> dict[str, list[list[float]]]:
    import httpx
    import mcp_types as types
    from mcp.client.client import Client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    out: dict[str, list[list[float]]] = {"rest": [], "mcp": [], "mcp client": []}
    http_mcp = create_mcp_http_client(headers={"X-API-Key": key})
    captured: list[tuple[dict[str, str], bytes]] = []

    async def capture(request: Any) -> None:
        if request.headers.get("mcp-method") == "tools/call" and not captured:
            captured.append((dict(request.headers), bytes(request.content)))

    http_mcp.event_hooks["request"].append(capture)
    async with (
        httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as rest,
        http_mcp,
        Client(streamable_http_client(f"{url}/mcp", http_client=http_mcp)) as mcp,
    ):

        async def rest_call() -> None:
            r = await rest.get("/api/v2/home")
            if r.status_code != 200:
                raise base.BenchError(f"GET /api/v2/home answered {r.status_code}: {r.text[:300]}")

        async def client_call() -> None:
            result = await mcp.call_tool("home", {})
            if not isinstance(result, types.CallToolResult) or result.is_error:
                raise base.BenchError(f"the home tool failed: {result}")

        await client_call()
        if not captured:
            raise base.BenchError("the mcp client sent no tools/call request")
        headers, body = captured[0]
        headers = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        envelope = json.loads(body)
        ids = itertools.count(1_000_000)

        async def wire_call() -> None:
            envelope["id"] = next(ids)
            r = await rest.post("/mcp", content=json.dumps(envelope), headers=headers)
            if r.status_code != 200 or r.json().get("result", {}).get("isError"):
                raise base.BenchError(f"tools/call home answered {r.status_code}: {r.text[:300]}")

        series = (("rest", rest_call), ("mcp", wire_call), ("mcp client", client_call))
        for _ in range(max(50, calls // 10)):  # warm-up: caches, connections, statement cache
            for _, fn in series:
                await fn()
        for _ in range(rounds):
            for name, fn in series:
                samples = []
                for _ in range(calls):
                    started = time.perf_counter()
                    await fn()
                    samples.append((time.perf_counter() - started) * 1000)
                out[name].append(samples)
    return out


def render(
    args: argparse.Namespace, started: datetime, db: str, data: dict[str, list[list[float]]], busy: float
) -> str:
    rows = []
    medians: dict[str, float] = {}
    for name, label in (
        ("rest", "GET /api/v2/home (httpx, kept-alive)"),
        ("mcp", "`home` tool, streamable HTTP (the client's tools/call, posted with httpx)"),
        ("mcp client", "`home` tool through the `mcp` Python client (information)"),
    ):
        per_round = [statistics.median(r) for r in data[name]]
        allv = [v for r in data[name] for v in r]
        medians[name] = statistics.median(per_round)
        rows.append(
            f"| {label} | {medians[name]:.2f} ms | {_pct(allv, 0.99):.2f} ms | "
            + ", ".join(f"{m:.2f}" for m in per_round)
            + " |"
        )
    ratio = medians["mcp"] / medians["rest"]
    verdict = "PASS" if ratio <= 2 else "FAIL"
    facts = base.machine()
    lines = [
        "# callboard MCP benchmark",
        "",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC",
        f"- Machine: {facts.get('cpu', '?')}, nproc {facts.get('nproc', '?')}; Python {sys.version.split()[0]}",
        f"- Database: {db}; one uvicorn worker (`callboard serve`), client in another process on the same machine",
        f"- {args.rounds} interleaved rounds of {args.calls} sequential calls each (median of the round medians)",
        f"- Other processes' CPU during the run: {busy:.2f} CPUs on average",
        "",
        "| Call | Median latency | p99 (all rounds) | Median per round (ms) |",
        "|---|--:|--:|---|",
        *rows,
        "",
        "| Target | Measured | Result |",
        "|---|---|---|",
        f"| `home` tool per-call latency <= 2x `GET /api/v2/home` | {ratio:.2f}x "
        f"({medians['mcp']:.2f} ms / {medians['rest']:.2f} ms) | **{verdict}** |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The home MCP tool against GET /api/v2/home.")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    tmp = Path(tempfile.mkdtemp(prefix="callboard-bench-mcp-"))
    try:
        with base.database(args.database_url, tmp) as url:
            servers = base.start_servers(tmp, url)
            key = base.register_agent(servers["callboard"])
            with base.CpuMeter([servers["callboard"].proc.pid, servers["bare"].proc.pid]) as meter:
                data = asyncio.run(measure(servers["callboard"].base, key, args.calls, args.rounds))
            busy = meter.background_cores
            text = render(
                args,
                started,
                "SQLite (temporary file)" if args.database_url is None else base._redact(args.database_url),
                data,
                busy,
            )
    except base.BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    finally:
        base.stop_all()
    print(text)
    args.output.write_text(text)
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
