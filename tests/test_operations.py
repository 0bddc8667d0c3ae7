"""Operations (issue 13): /metrics scraped after real requests, `callboard serve --workers 2` on each
database with its metrics summed across processes (a dead worker replaced, a broken start or a taken port
stopping the server), and graceful shutdown (a request in flight at SIGTERM
is answered; the background pass under way finishes; `callboard worker` stops on SIGTERM)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from callboard_core import clock, worker
from callboard_core.agents.models import Agent
from callboard_core.container import Core
from callboard_core.errors import RateLimited
from callboard_core.ledger import service as ledger
from callboard_core.ratelimit import PUBLIC, RateLimiter
from http_api import request_log, supervisor
from http_api.app import create_app
from tests.conftest import BASE_URL, make_user, register_agent
from tests.jobs_helpers import create_published, new_agent, new_owner
from tests.mcp_helpers import CALLBOARD
from tests.server_process import ServerProcess, can_spawn, serve_argv, server_env, spawn, wait_ready

pytestmark = pytest.mark.slow  # real `callboard serve` processes

TOKEN = "metrics-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
GRACEFUL_EXIT = (0, -signal.SIGTERM)
spawning = pytest.mark.skipif(can_spawn() is not None, reason=can_spawn() or "")


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
async def metered(core: Core) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(core.settings.model_copy(update={"metrics_token": TOKEN}), core=core)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as client:
        yield client


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    request_log.WRITER.flush()  # requests are counted by the writer thread, off the event loop
    response = await client.get("/metrics", headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


async def test_metrics_answer_only_the_token(core: Core, metered: httpx.AsyncClient) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        response = await metered.get("/metrics", headers=headers)
        assert response.status_code == 401
        assert response.json()["code"] == "invalid_metrics_token"
        assert response.headers["www-authenticate"].startswith("Bearer")
    closed = create_app(core.settings, core=core)  # no token set: there is no such route
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=closed), base_url=BASE_URL) as client:
        assert (await client.get("/metrics", headers=AUTH)).status_code == 404


async def test_requests_are_counted_by_route_template_and_status_without_ids(
    metered: httpx.AsyncClient,
) -> None:
    before = await scrape(metered)
    registered = await register_agent(metered)
    key = registered["apiKey"]
    for _ in range(3):
        assert (await metered.get("/api/v2/agents/me", headers={"X-API-Key": key})).status_code == 200
    assert (await metered.get("/api/v2/jobs/zz_nothing", headers={"X-API-Key": key})).status_code == 404
    after = await scrape(metered)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    me = {"route": "/api/v2/agents/me", "method": "GET"}
    assert delta("callboard_http_requests_total", status="200", **me) == 3
    assert delta("callboard_http_request_duration_seconds_count", **me) == 3
    assert delta("callboard_http_requests_total", route="/api/v2/jobs/{id}", method="GET", status="404") == 1
    register = {"route": "/api/v2/agents/register", "method": "POST", "status": "201"}
    assert delta("callboard_http_requests_total", **register) == 1
    labels = {v for (_, pairs) in after for _, v in pairs}
    agent_id = registered["agent"]["id"]
    assert not [v for v in labels if agent_id in v or key[:8] in v or "zz_nothing" in v]
    assert ("callboard_db_pool_connections", frozenset({("state", "checked_out")})) in after
    assert ("callboard_money_operations_total", frozenset({("kind", "CAPTURE")})) in after
    assert ("callboard_write_retries_total", frozenset({("reason", "deadlock")})) in after


async def test_money_operations_count_committed_postings_only(core: Core, metered: httpx.AsyncClient) -> None:
    user_id, _ = await make_user(core)
    before = value(await scrape(metered), "callboard_money_operations_total", kind="TOPUP")
    async with core.uow() as uow:
        await ledger.top_up(
            uow.session, user_id=user_id, amount_cents=500, processor_ref=f"pi_{uuid.uuid4().hex}"
        )
    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            await ledger.top_up(
                uow.session, user_id=user_id, amount_cents=700, processor_ref=f"pi_{uuid.uuid4().hex}"
            )
            raise RuntimeError("the request fails after the posting: it rolls back")
    after = value(await scrape(metered), "callboard_money_operations_total", kind="TOPUP")
    assert after - before == 1


async def test_sweeper_lag_is_how_late_the_oldest_due_deadline_is(
    core: Core, app: Any, metered: httpx.AsyncClient, frozen_clock: clock.FrozenClock
) -> None:
    owner = await new_owner(app, core)
    requester = await new_agent(owner)
    assert value(await scrape(metered), "callboard_sweeper_lag_seconds") == 0
    job = await create_published(requester, owner.client)
    closes = datetime.fromisoformat(job["admissionClosesAt"])
    frozen_clock.advance(days=3)  # every deadline of the job has passed; nothing has swept
    lag = value(await scrape(metered), "callboard_sweeper_lag_seconds")
    assert lag == pytest.approx((clock.now() - closes).total_seconds(), abs=1)
    for _ in range(6):  # each pass moves the job one state on
        await worker.run_once(core)
    assert value(await scrape(metered), "callboard_sweeper_lag_seconds") == 0


async def test_rate_limit_refusals_are_counted(core: Core, metered: httpx.AsyncClient) -> None:
    limiter = RateLimiter(
        core.settings.model_copy(
            update={"rate_limit_enabled": True, "rate_limit_public": "1/minute", "redis_url": None}
        )
    )
    before = value(await scrape(metered), "callboard_rate_limit_refusals_total", budget=PUBLIC)
    client_ip = f"203.0.113.{uuid.uuid4().int % 250}"
    await limiter.hit(PUBLIC, client_ip)
    with pytest.raises(RateLimited):
        await limiter.hit(PUBLIC, client_ip)
    after = value(await scrape(metered), "callboard_rate_limit_refusals_total", budget=PUBLIC)
    assert after - before == 1


# --- processes ------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _workers(supervisor: int, count: int = 2, within: float = 30.0) -> list[int]:
    """The worker processes of `serve --workers N` (not multiprocessing's resource tracker), once there are
    `count` of them or `within` passed."""
    deadline = time.monotonic() + within
    while True:
        found = []
        for pid in _children(supervisor):
            try:
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _spawn_worker(core: Core, log_path: Path) -> ServerProcess:
    env = server_env(core.settings, 1, loop=False, interval=0.2)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [CALLBOARD, "worker"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return ServerProcess(proc, "", log_path)


@spawning
async def test_two_workers_serve_one_database_and_report_one_set_of_metrics(
    core: Core, app: Any, tmp_path: Path
) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    server = spawn(
        core.settings,
        tmp_path / "server.log",
        loop=True,
        interval=0.2,
        env={"CALLBOARD_METRICS_TOKEN": TOKEN},
        args=("--workers", "2"),
    )
    try:
        await wait_ready(server)
        assert len(_workers(server.proc.pid)) == 2, server.log_tail()

        async def one(client: httpx.AsyncClient) -> int:
            return (await client.get("/api/v2/agents/me", headers={"X-API-Key": agent.key})).status_code

        clients = [httpx.AsyncClient(base_url=server.url, timeout=10) for _ in range(8)]
        try:
            codes = await asyncio.gather(*(one(clients[i % 8]) for i in range(40)))
        finally:
            for client in clients:
                await client.aclose()
        assert codes == [200] * 40
        route = {"route": "/api/v2/agents/me", "method": "GET", "status": "200"}
        # Each worker's writer thread counts its requests within about 100 ms; a busy machine may take longer.
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            for _ in range(100):
                await asyncio.sleep(0.1)
                text = (await client.get("/metrics", headers=AUTH)).text
                if value(samples(text), "callboard_http_requests_total", **route) >= 40:
                    break
        assert value(samples(text), "callboard_http_requests_total", **route) == 40, text[:2000]
    finally:
        server.stop()
    assert server.proc.returncode in GRACEFUL_EXIT, server.log_tail()


@spawning
async def test_sigterm_answers_the_request_in_flight_then_exits(core: Core, tmp_path: Path) -> None:
    server = spawn(core.settings, tmp_path / "server.log", loop=True, interval=0.2)
    try:
        await wait_ready(server)
        name = f"Inflight {uuid.uuid4().hex[:6]}"
        body = orjson.dumps(
            {"name": name, "endpointUrl": "https://agent.example.com/hook", "capabilities": ["python"]}
        )
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /api/v2/agents/register HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body[:10]
            )
            await asyncio.sleep(0.3)  # the request is in flight: headers read, body still coming
            os.killpg(server.proc.pid, signal.SIGTERM)
            await asyncio.sleep(0.5)
            assert server.proc.poll() is None, "the server must wait for the request in flight"
            sock.sendall(body[10:])
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
        # Done: uvicorn ends by re-raising the signal it caught, after the graceful shutdown.
        assert server.proc.wait(20) in GRACEFUL_EXIT, server.log_tail()
    finally:
        server.stop()
    async with core.uow(write=False) as uow:
        assert await uow.session.scalar(select(Agent.id).where(Agent.name == name)) is not None
    # The request log's last batch is written on the way out, the in-flight request's line included.
    assert " 201 POST /api/v2/agents/register " in server.log_path.read_text()


async def test_shutdown_lets_the_background_pass_under_way_finish(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, finished = asyncio.Event(), []

    async def slow_pass(_: Core, **__: Any) -> dict[str, int]:
        started.set()
        await asyncio.sleep(0.5)
        finished.append(True)
        return {}

    monkeypatch.setattr(worker, "run_once", slow_pass)
    async with worker.in_background(core, interval=60):
        await started.wait()
    assert finished == [True]  # finished, not cancelled; and no second pass began


@spawning
async def test_the_worker_command_stops_on_sigterm_after_its_pass(core: Core, tmp_path: Path) -> None:
    log_path = tmp_path / "worker.log"
    server = _spawn_worker(core, log_path)
    proc = server.proc
    try:
        # Wait for the line said once its handlers are in place (start-up takes seconds on a busy CI machine),
        # then for a few passes.
        for _ in range(600):
            if "worker started" in log_path.read_text() or proc.poll() is not None:
                break
            await asyncio.sleep(0.1)
        assert "worker started" in log_path.read_text(), server.log_tail()
        await asyncio.sleep(1)
        assert proc.poll() is None, server.log_tail()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 0, server.log_tail()
        assert "worker stopped" in log_path.read_text()
    finally:
        server.kill()


@spawning
async def test_a_worker_that_dies_is_replaced_and_connections_meanwhile_are_served(
    core: Core, app: Any, tmp_path: Path
) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    server = spawn(core.settings, tmp_path / "server.log", loop=False, args=("--workers", "2"))
    try:
        await wait_ready(server)
        first = _workers(server.proc.pid)
        assert len(first) == 2, server.log_tail()
        os.kill(first[0], signal.SIGKILL)

        async def fresh_connection() -> int:
            # A new client each time: a new source port, so the kernel hashes some onto the dead one's socket.
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                reply = await client.get("/api/v2/agents/me", headers={"X-API-Key": agent.key})
                return reply.status_code

        codes = await asyncio.gather(*(fresh_connection() for _ in range(24)))
        assert codes == [200] * 24, server.log_tail()  # queued on the dead worker's socket, then served
        now = _workers(server.proc.pid)
        assert len(now) == 2 and first[0] not in now and first[1] in now
    finally:
        server.stop()
    assert server.proc.returncode in GRACEFUL_EXIT, server.log_tail()
    assert "died" in server.log_path.read_text()


@spawning
def test_serve_with_workers_refuses_a_port_in_use_in_one_line(core: Core) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            serve_argv(port, "--workers", "2"),
            env=server_env(core.settings, port, loop=False, interval=1),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 3
    assert (
        done.stderr.strip() == f"callboard serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_a_worker_that_cannot_start_stops_the_supervisor() -> None:
    config = uvicorn.Config("tests.no_such_module:app", host="127.0.0.1", port=0, log_level="critical")
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    workers = supervisor.Supervisor(config, 2)
    # Were the broken workers restarted over and over, this stops the run, which then returns 0, not 3.
    give_up = threading.Timer(60, workers.stopping.set)
    give_up.start()
    try:
        assert workers.run() == supervisor.STARTUP_FAILURE
    finally:
        give_up.cancel()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
