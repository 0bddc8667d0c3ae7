"""Statement budgets: how many SQL statements each write of the job lifecycle costs, through the real app.

The figures live in bench/statement_budgets.json (one per operation and database); this test counts every
statement the app sends for one request (SQLAlchemy's before_cursor_execute on the app's engines, the
after-commit work the request leaves on the bus included) and fails when a count differs from its budget:
a change that adds a statement must say so by raising the figure, and one that removes a statement lowers
it, so the file always tells the truth. Counts are taken with the read cache cold (a key's first request
since its credential changed: the worst case; a key whose credential is cached, the usual case since the
read cache's scopes, skips the lookup, two statements on SQLite and one on PostgreSQL), each key used once
before (its lastUsedAt touch is behind it). Each query must also be
one SQLAlchemy can cache: a statement without a cache key is compiled again on every request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.engine.interfaces import CacheStats

from callboard_core.container import Core
from callboard_core.payments import service as payments
from tests.jobs_helpers import (
    AgentHandle,
    job_body,
    new_agent,
    new_owner,
    submit_body,
    to_review,
)
from tests.payments_helpers import buyer, draft, money

BUDGETS_FILE = Path(__file__).resolve().parent.parent / "bench" / "statement_budgets.json"
BUDGETS: dict[str, dict[str, int]] = json.loads(BUDGETS_FILE.read_text())["budgets"]
NO_CACHE_KEY = CacheStats.NO_CACHE_KEY
DML = {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}


class Counter:
    """Every statement sent through the core's engines while `measure` runs one request."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.seen: list[str] = []
        self.uncacheable: list[str] = []
        self.engines = {core.db.write_engine.sync_engine, core.db.read_engine.sync_engine}

    def _record(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, *rest: Any
    ) -> None:
        line = " ".join(statement.split())[:140]
        self.seen.append(line)
        # A query that SQLAlchemy cannot cache is compiled again on every request (a multi-row VALUES with a
        # JSON value did that: ~1 ms a time). BEGIN and SAVEPOINT are not compiled statements.
        if context is not None and context.cache_hit is NO_CACHE_KEY and line.split()[0] in DML:
            self.uncacheable.append(line)

    async def measure(
        self, request: Callable[[], Awaitable[httpx.Response]], expect: int, *, cold: bool = True
    ) -> list[str]:
        await self._settle()  # earlier requests' after-commit work is theirs, not this one's
        if cold:
            self.core.read_cache.clear()  # as after another request's commit
        self.seen = []
        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self._record)
        try:
            response = await request()
            await self._settle()
        finally:
            for engine in self.engines:
                event.remove(engine, "before_cursor_execute", self._record)
        assert response.status_code == expect, response.text
        return self.seen

    async def _settle(self) -> None:
        await self.core.bus.drain()
        await self.core.mailer.drain()


async def _warm(client: httpx.AsyncClient, *agents: AgentHandle) -> None:
    for agent in agents:
        assert (await client.get("/api/v2/agents/me", headers=agent.h)).status_code == 200


async def _lifecycle(
    app: Any, core: Core, client: httpx.AsyncClient, reward: int, prefix: str, uncacheable: list[str]
) -> dict[str, list[str]]:
    """draft, publish, apply, acknowledge, submit and award of one job, each counted."""
    if reward:
        requester = (await buyer(app, core)).agent
    else:
        requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    await _warm(client, requester, worker)
    counter = Counter(core)
    counts: dict[str, list[str]] = {}
    body = job_body(rewardAmountCents=reward) if reward else job_body()

    async def post(path: str, agent: AgentHandle, json_body: Any = None) -> httpx.Response:
        return await client.post(path, json=json_body, headers=agent.h)

    if not reward:
        counts["draft"] = await counter.measure(lambda: post("/api/v2/jobs", requester, body), 201)
        job_id = (await post("/api/v2/jobs", requester, body)).json()["id"]
    else:
        job_id = (await post("/api/v2/jobs", requester, body)).json()["id"]
    counts[f"{prefix}publish"] = await counter.measure(
        lambda: post(f"/api/v2/jobs/{job_id}/publish", requester), 200
    )
    apply = await counter.measure(lambda: post(f"/api/v2/jobs/{job_id}/applications", worker), 201)
    assert (await post(f"/api/v2/jobs/{job_id}/admission/run", requester)).status_code == 200
    slots = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)).json()
    slot = next(s for s in slots["slots"] if s["jobId"] == job_id)["id"]
    acknowledge = await counter.measure(
        lambda: post(f"/api/v2/participation-slots/{slot}/acknowledge", worker), 200
    )
    submitted: list[httpx.Response] = []

    async def submit() -> httpx.Response:
        submitted.append(await post(f"/api/v2/participation-slots/{slot}/submit", worker, submit_body()))
        return submitted[-1]

    submit_statements = await counter.measure(submit, 201)
    submission = submitted[0].json()["id"]
    counts[f"{prefix}award"] = await counter.measure(
        lambda: post(f"/api/v2/jobs/{job_id}/award", requester, {"submissionId": submission}), 200
    )
    if not reward:
        counts.update(apply=apply, acknowledge=acknowledge, submit=submit_statements)
    uncacheable.extend(counter.uncacheable)
    return counts


async def test_each_write_sends_the_statements_its_budget_says_each_compiled_once(
    app: Any, core: Core, client: httpx.AsyncClient, database_url: str
) -> None:
    kind = "sqlite" if core.db.is_sqlite else "postgres"
    uncacheable: list[str] = []
    counts = await _lifecycle(app, core, client, 0, "", uncacheable)
    counts.update(await _lifecycle(app, core, client, 1_000, "paid ", uncacheable))
    assert not uncacheable, "statements SQLAlchemy compiles again on every request:\n" + "\n".join(
        uncacheable
    )
    assert set(counts) == set(BUDGETS), "bench/statement_budgets.json names each measured write"
    wrong = {
        name: (len(statements), BUDGETS[name][kind], statements)
        for name, statements in counts.items()
        if len(statements) != BUDGETS[name][kind]
    }
    report = "\n".join(
        f"{name}: {n} statements where the budget says {budget}"
        + "".join(f"\n    {line}" for line in statements)
        for name, (n, budget, statements) in wrong.items()
    )
    assert not wrong, f"update bench/statement_budgets.json ({kind}) if the change is meant:\n{report}"


async def test_a_paid_award_reads_the_accounts_it_moves_with_its_job(
    app: Any, core: Core, client: httpx.AsyncClient, books_balance: None
) -> None:
    """The capture's accounts come with the award's job read (`ledger.with_capture_accounts`) once they all exist:
    a requester's second award to a worker of the same owner sends no read of ledger accounts of its own;
    the first (the worker's owner has no payable account yet) reads and makes them as before. The money
    lands in both cases."""
    b = await buyer(app, core)
    worker_owner = await new_owner(app, core)
    worker = await new_agent(worker_owner)
    await _warm(client, b.agent, worker)
    counter = Counter(core)
    own_reads = []
    for _ in range(2):
        job_id = await draft(client, b, 1_000)
        assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
        submission = await to_review(client, job_id, b.agent, worker)
        award = {"submissionId": submission}
        seen = await counter.measure(
            lambda path=f"/api/v2/jobs/{job_id}/award", body=award: client.post(
                path, json=body, headers=b.agent.h
            ),
            200,
        )
        own_reads.append([line for line in seen if line.startswith("SELECT ledger_accounts.")])
    assert own_reads[0] and not own_reads[1], own_reads
    assert (await money(core, worker_owner.user_id))[2] == 2 * 1_000


async def test_a_paid_publish_reads_the_accounts_it_reserves_with_the_buyer_profile(
    app: Any, core: Core, client: httpx.AsyncClient, books_balance: None
) -> None:
    """The reserve's accounts come with the locked buyer profile (`ledger.with_flow_accounts`) once both
    exist: the owner's first paid publish reads and makes its reserved account as before, the second sends
    no read of ledger accounts of its own. Both reserve."""
    b = await buyer(app, core)
    await _warm(client, b.agent, await new_agent(await new_owner(app, core)))
    counter = Counter(core)
    own_reads = []
    before = await money(core, b.owner.user_id)
    for _ in range(2):
        job_id = await draft(client, b, 1_000)
        seen = await counter.measure(
            lambda path=f"/api/v2/jobs/{job_id}/publish": client.post(path, headers=b.agent.h), 200
        )
        own_reads.append([line for line in seen if line.startswith("SELECT ledger_accounts.")])
    assert own_reads[0] and not own_reads[1], own_reads
    after = await money(core, b.owner.user_id)
    assert after[1] - before[1] == before[0] - after[0] > 2 * 1_000  # pay and fee of both, held


async def test_a_requesters_next_paid_publish_reads_the_profile_with_its_job(
    app: Any, core: Core, client: httpx.AsyncClient, books_balance: None
) -> None:
    """Once a requester's publish was paid, its next publish's first read brings the owner's profile (on
    PostgreSQL locked FOR SHARE in a LATERAL sub-select), the activation and the reserve's accounts with the
    job: one statement fewer than a publish that reads the profile on its own, as one does when this process
    has not seen the requester publish a paid job (the hint forgotten here). All three reserve."""
    b = await buyer(app, core)
    await _warm(client, b.agent, await new_agent(await new_owner(app, core)))
    job_id = await draft(client, b, 1_000)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    counter = Counter(core)
    seen = []
    for forget in (False, True):
        if forget:
            payments._PAYING_REQUESTERS.discard(b.agent.id)
        job_id = await draft(client, b, 1_000)
        seen.append(
            await counter.measure(
                lambda path=f"/api/v2/jobs/{job_id}/publish": client.post(path, headers=b.agent.h), 200
            )
        )
    folded, alone = seen
    assert len(folded) == len(alone) - 1, (folded, alone)
    assert not [line for line in folded if line.startswith("SELECT buyer_profiles.")], folded
    assert [line for line in alone if line.startswith("SELECT buyer_profiles.")], alone
    assert (await money(core, b.owner.user_id))[1] == 3 * 1_100  # pay and fee of the three publishes, held


async def test_an_acknowledgement_finds_its_job_type_in_the_read_cache(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """The submit template an acknowledgement answers with names the job type's required fields: the type's
    rules come through the read cache's taxonomy scope, so a second acknowledgement of a job of the same type
    reads no job type (the first, cold, does), and both answers carry the same template."""
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    await _warm(client, requester, worker)
    counter = Counter(core)
    reads, answers = [], []
    for cold in (True, False):
        job_id = (await client.post("/api/v2/jobs", json=job_body(), headers=requester.h)).json()["id"]
        for path, agent in (("publish", requester), ("applications", worker), ("admission/run", requester)):
            assert (await client.post(f"/api/v2/jobs/{job_id}/{path}", headers=agent.h)).status_code < 300
        slots = (await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)).json()
        slot = next(s for s in slots["slots"] if s["jobId"] == job_id)["id"]

        async def acknowledge(slot: str = slot) -> httpx.Response:
            answers.append(
                await client.post(f"/api/v2/participation-slots/{slot}/acknowledge", headers=worker.h)
            )
            return answers[-1]

        seen = await counter.measure(acknowledge, 200, cold=cold)
        reads.append([line for line in seen if line.startswith("SELECT job_types.")])
    templates = [answer.json()["nextAction"]["body"] for answer in answers]
    assert reads[0] and not reads[1], reads
    assert templates[0] == templates[1] and "structuredPayloadJson" in templates[0]


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_every_budget_names_both_databases(name: str) -> None:
    assert set(BUDGETS[name]) == {"sqlite", "postgres"} and all(v > 0 for v in BUDGETS[name].values())
