"""The request log: one line per request with the route template, status, duration and who acted (ids only),
JSON in production; written by the background writer; never a key, token, cookie or claim code."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from http_api import request_log
from tests.conftest import register_agent
from tests.jobs_helpers import create_published, new_agent, new_owner


class Lines(io.StringIO):
    @property
    def lines(self) -> list[str]:
        request_log.WRITER.flush()
        return self.getvalue().splitlines()


@pytest.fixture
def access_lines() -> Iterator[Lines]:
    stream = Lines()
    writer = request_log.WRITER
    previous = writer.format, writer.stream, writer.lines
    writer.flush()  # earlier tests' lines stay out of this one
    writer.format, writer.stream, writer.lines = request_log.json_line, stream, True
    try:
        yield stream
    finally:
        writer.flush()
        writer.format, writer.stream, writer.lines = previous


def _entries(lines: Lines) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in lines.lines]


async def test_each_request_is_one_line_with_the_route_template_and_no_secret(
    app: Any, core: Any, client: httpx.AsyncClient, access_lines: Lines
) -> None:
    registered = await register_agent(client)  # a provisional agent: its key and its claim URL
    key, claim_code = registered["apiKey"], registered["claimUrl"].rsplit("/", 1)[1]
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    job = await create_published(agent, client)
    assert (await client.get(f"/api/v2/jobs/{job['id']}", headers=agent.h)).status_code == 200
    assert (await client.get("/api/v2/agents/me", headers={"X-API-Key": key})).status_code == 200
    assert (await client.get(f"/api/v2/claim/{claim_code}")).status_code in (200, 404, 405)
    assert (await owner.client.get("/me/notifications")).status_code == 200
    assert (await client.get("/api/v2/agents/me", headers={"X-API-Key": "cbk_wrong"})).status_code == 401
    assert (await client.get("/no/such/path")).status_code == 404

    entries = _entries(access_lines)
    by_route = {(e["method"], e["route"]): e for e in entries}
    read = by_route[("GET", "/api/v2/jobs/{id}")]
    assert read["status"] == 200 and read["principal"] == "agent" and read["principalId"] == agent.id
    assert (
        read["durationMs"] >= 0 and read["requestId"].startswith("req_") and read["time"].endswith("+00:00")
    )
    assert by_route[("GET", "/me/notifications")]["principal"] == "user"
    assert by_route[("GET", "/me/notifications")]["principalId"] == owner.user_id
    assert [e["status"] for e in entries if e["route"] == "/api/v2/agents/me"] == [200, 401]
    assert by_route[("GET", "unmatched")]["status"] == 404
    assert set(read) == {
        "time",
        "requestId",
        "method",
        "route",
        "status",
        "durationMs",
        "principal",
        "principalId",
    }

    cookie = owner.client.cookies.get("svc_session")
    secrets = [key, agent.key, claim_code, job["id"], "cbk_wrong", cookie]
    text = "\n".join(access_lines.lines)
    for secret in secrets:
        assert secret and secret not in text, secret  # ids of objects stay out too: the template has {id}


def test_text_lines_for_development() -> None:
    entry = (0.0, "req_1", "GET", "/api/v2/jobs/{id}", 200, 0.0042, "agent", "agt_1")
    assert request_log.text_line(entry).endswith("200 GET /api/v2/jobs/{id} 4.2ms agent:agt_1 req_1")
    assert orjson.loads(request_log.json_line(entry))["durationMs"] == 4.2


def test_the_writer_thread_writes_queued_lines_without_being_asked() -> None:
    stream = io.StringIO()
    writer = request_log.Writer(interval=0.05)
    writer.stream = stream
    entries = [
        (0.0, f"req_{n}", "GET", "/api/v2/jobs/{id}", 200, 0.001, "agent", "agt_1") for n in range(500)
    ]
    for entry in entries:
        writer.put(entry)  # the event loop's whole share: an append
    deadline = time.monotonic() + 5
    while stream.getvalue().count("\n") < len(entries) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream.getvalue().splitlines() == [request_log.text_line(entry) for entry in entries]
