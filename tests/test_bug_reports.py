"""The bug-report bridge through the real app on SQLite and PostgreSQL: intake with secrets masked before
storage (checked in the database row), the 64 KB cap (413), the rate limit (429 with Retry-After), the
staff feed and audited triage and delete, and the runner's enqueue, claim (one report per runner even under
concurrent claims) and status moves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import select

from callboard_core.audit.models import AuditEvent
from callboard_core.bug_reports.models import BugReport
from callboard_core.bug_reports.redaction import CARD_MASK, MASK, redact
from callboard_core.security.permissions import Role
from callboard_core.security.tokens import new_api_key
from tests.factories import MACHINE_TOKEN, World, open_world

MACHINE = {"Authorization": f"Bearer {MACHINE_TOKEN}"}


@pytest.fixture
async def world(database_url: str, tmp_root: Path) -> AsyncIterator[World]:
    async with open_world(database_url, tmp_root) as w:
        yield w


async def _file(w: World, **body: Any) -> dict[str, Any]:
    async with w.client() as c:
        r = await c.post("/api/bridge/report_bug", json={"summary": "It broke", **body})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def _row(w: World, report_id: str) -> BugReport:
    async with w.core.uow(write=False) as uow:
        row = await uow.session.get(BugReport, report_id)
        assert row is not None
        return row


async def test_secrets_never_reach_the_database(world: World) -> None:
    key = new_api_key()
    pairs = [
        {
            "request": {
                "method": "POST",
                "headers": {"Authorization": f"Bearer {key}", "X-API-Key": key, "Accept": "json"},
                "body": {"password": "hunter2hunter2", "cardNumber": "4242 4242 4242 4242", "name": "Ada"},
            },
            "response": {"status": 500, "body": "see https://x.test/cb?token=abcdef123456&page=2"},
        }
    ]
    got = await _file(
        world,
        summary=f"Publishing failed with key {key}",
        context="paid with 4000-0000-0000-0002 then sk_test_4eC39HqLyjWDarjtT1zdp7dc, order 1234567890123",
        requestId="req_1",
        requestIds=["req_1", "req_2"],
        rawRequestResponsePairs=pairs,
        evidence={"log": "Cookie: svc_session=abcdefabcdef; theme=dark"},
    )
    assert got["status"] == "received" and got["redactedSecrets"] is True
    row = await _row(world, got["id"])
    stored = orjson.dumps([row.summary, row.context, row.request_ids, row.evidence, row.raw_pairs]).decode()
    for secret in (
        key,
        "hunter2hunter2",
        "4242 4242 4242 4242",
        "4000-0000-0000-0002",
        "sk_test_4eC39",
        "abcdef123456",
        "abcdefabcdef",
    ):
        assert secret not in stored, secret
    assert MASK in row.summary and CARD_MASK in (row.context or "")
    assert "1234567890123" in (row.context or "")  # not a card (Luhn): kept
    headers = row.raw_pairs[0]["request"]["headers"]
    assert headers["Authorization"] == MASK and headers["X-API-Key"] == MASK and headers["Accept"] == "json"
    assert row.raw_pairs[0]["request"]["body"]["name"] == "Ada"
    assert row.request_ids == ["req_1", "req_2"] and row.status == "PENDING"
    plain = await _file(world, summary="The directory page shows no agents")
    assert plain["redactedSecrets"] is False


def test_redaction_leaves_ordinary_text() -> None:
    text = "Job job_abc123 at 2026-11-26T08:00:00Z took 1500 ms; 42 bids"
    assert redact(text) == (text, False)
    assert redact({"tokenCount": 3, "secret": ""}) == ({"tokenCount": 3, "secret": ""}, False)


async def test_intake_caps_the_body_and_the_rate(world: World, tmp_root: Path) -> None:
    async with world.client() as c:
        big = await c.post("/api/bridge/report_bug", json={"summary": "x", "context": "y" * 70_000})
        assert big.status_code == 413 and big.json()["code"] == "payload_too_large"
        empty = await c.post("/api/bridge/report_bug", json={"summary": ""})
        assert empty.status_code == 422
    async with (
        open_world(
            world.core.settings.database_url, tmp_root, wipe=False, rate_limit_bug_report="2/hour"
        ) as limited,
        limited.client() as c,
    ):
        for _ in range(2):
            assert (await c.post("/api/bridge/report_bug", json={"summary": "again"})).status_code == 201
        refused = await c.post("/api/bridge/report_bug", json={"summary": "again"})
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
        assert refused.json()["code"] == "rate_limited"


async def test_the_runner_takes_the_queue_one_report_at_a_time(world: World) -> None:
    first = await _file(world, summary="first")
    second = await _file(world, summary="second")
    async with world.client() as c:
        nothing = await c.post("/api/bridge/bug_reports/claim", json={}, headers=MACHINE)
        assert nothing.status_code == 200 and nothing.json() == {"report": None}  # received, not queued
        queued = await c.post("/api/bridge/bug_reports/enqueue", headers=MACHINE)
        assert queued.json() == {"enqueued": 2}
        assert (await c.post("/api/bridge/bug_reports/enqueue", headers=MACHINE)).json() == {"enqueued": 0}
        run = {"agentName": "fixer", "agentRunId": "run-1"}
        claimed = (await c.post("/api/bridge/bug_reports/claim", json=run, headers=MACHINE)).json()["report"]
        assert claimed["id"] == first["id"] and claimed["status"] == "IN_PROGRESS"
        assert claimed["agentRunId"] == "run-1" and claimed["claimedAt"]
        # Another run may not speak for this report.
        other = await c.post(
            f"/api/bridge/bug_reports/{first['id']}/status",
            json={"status": "CLOSED", "agentRunId": "run-2"},
            headers=MACHINE,
        )
        assert other.status_code == 409 and other.json()["code"] == "claimed_by_another_run"
        pr = await c.post(
            f"/api/bridge/bug_reports/{first['id']}/status",
            json={
                "status": "PR_SUBMITTED",
                "agentRunId": "run-1",
                "pullRequestUrl": "https://git.example.com/callboard/pull/7",
                "pullRequestNumber": 7,
            },
            headers=MACHINE,
        )
        assert pr.status_code == 200 and pr.json()["pullRequestNumber"] == 7
        closed = await c.post(
            f"/api/bridge/bug_reports/{first['id']}/status",
            json={"status": "CLOSED", "agentRunId": "run-1", "resolutionNotes": "merged"},
            headers=MACHINE,
        )
        assert closed.json()["status"] == "CLOSED" and closed.json()["closedAt"]
        # A closed report cannot be given back; an unclaimed one cannot be closed by the runner.
        back = await c.post(
            f"/api/bridge/bug_reports/{first['id']}/status", json={"status": "UNADDRESSED"}, headers=MACHINE
        )
        assert back.status_code == 409 and back.json()["code"] == "invalid_state"
        assert back.json()["currentState"] == "CLOSED"
        # The second, claimed and given back, is claimable again.
        taken = (await c.post("/api/bridge/bug_reports/claim", json=run, headers=MACHINE)).json()["report"]
        assert taken["id"] == second["id"]
        given = await c.post(
            f"/api/bridge/bug_reports/{second['id']}/status", json={"status": "UNADDRESSED"}, headers=MACHINE
        )
        assert given.json()["status"] == "UNADDRESSED" and given.json()["agentRunId"] is None
        again = (await c.post("/api/bridge/bug_reports/claim", json={}, headers=MACHINE)).json()["report"]
        assert again["id"] == second["id"]
        # No machine token, or a wrong one: 401.
        assert (await c.post("/api/bridge/bug_reports/claim", json={})).status_code == 401
        wrong = await c.post("/api/bridge/bug_reports/enqueue", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401


async def test_concurrent_claims_never_share_a_report(world: World) -> None:
    ids = {(await _file(world, summary=f"report {n}"))["id"] for n in range(4)}
    async with world.client() as c:
        await c.post("/api/bridge/bug_reports/enqueue", headers=MACHINE)
        answers = await asyncio.gather(
            *(
                c.post("/api/bridge/bug_reports/claim", json={"agentRunId": f"run-{n}"}, headers=MACHINE)
                for n in range(6)
            )
        )
    assert {r.status_code for r in answers} == {200}
    claimed = [r.json()["report"]["id"] for r in answers if r.json()["report"] is not None]
    assert sorted(claimed) == sorted(ids)  # each report to exactly one runner; the other two got null
    for report_id in ids:
        assert (await _row(world, report_id)).status == "IN_PROGRESS"


async def test_staff_triage_and_delete_are_audited(world: World) -> None:
    support = await world.actor(Role.SUPPORT)
    admin = await world.actor(Role.ADMIN)
    got = await _file(world, summary="Awarding shows a spinner forever")
    async with world.client() as c:
        feed = await c.get("/api/bridge/bug_reports", headers=support.session())
        assert feed.status_code == 200 and got["id"] in [r["id"] for r in feed.json()["reports"]]
        only = await c.get("/api/bridge/bug_reports", params={"status": "CLOSED"}, headers=support.session())
        assert got["id"] not in [r["id"] for r in only.json()["reports"]]
        # Triage is ADMIN's: SUPPORT is refused.
        refused = await c.patch(
            f"/api/bridge/bug_reports/{got['id']}", json={"status": "CLOSED"}, headers=support.session()
        )
        assert refused.status_code == 403
        triaged = await c.patch(
            f"/api/bridge/bug_reports/{got['id']}",
            json={"status": "CLOSED", "triageNotes": "duplicate of an earlier report"},
            headers=admin.session(),
        )
        assert triaged.status_code == 200, triaged.text
        assert triaged.json()["status"] == "CLOSED" and triaged.json()["closedAt"]
        reopened = await c.patch(
            f"/api/bridge/bug_reports/{got['id']}", json={"status": "UNADDRESSED"}, headers=admin.session()
        )
        assert reopened.json()["status"] == "UNADDRESSED" and reopened.json()["closedAt"] is None
        assert reopened.json()["triageNotes"] == "duplicate of an earlier report"  # kept when not sent
        gone = await c.delete(f"/api/bridge/bug_reports/{got['id']}", headers=admin.session())
        assert gone.status_code == 200
        missing = await c.delete(f"/api/bridge/bug_reports/{got['id']}", headers=admin.session())
        assert missing.status_code == 404 and missing.json()["code"] == "bug_report_not_found"
    async with world.core.uow(write=False) as uow:
        assert await uow.session.get(BugReport, got["id"]) is None
        actions = (
            await uow.session.scalars(
                select(AuditEvent.action)
                .where(AuditEvent.target_id == got["id"])
                .order_by(AuditEvent.created_at)
            )
        ).all()
    assert actions == ["bug_report.triage", "bug_report.triage", "bug_report.delete"]
