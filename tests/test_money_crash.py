"""The crash test: a real `callboard serve` (the project's CLI, a child process over the test's database:
the suite's SQLite file and its fresh PostgreSQL database, the sandbox processor, the background loop on
with a short interval) is killed with SIGKILL in the middle of awards and payouts, then started again; its
loop must finish or roll back each one, with the money invariants intact:

- every job is either AWARDED with exactly one capture, its payment CAPTURED and exactly one payout PAID
  on its first attempt, or still IN_REVIEW with its reserve intact, no capture and no payout (and
  awarding it then works, once);
- per payout exactly one transfer object at the processor (the sandbox's transfers, by the payout id in
  their metadata), one `payout:<attempt>` and one settlement; no orphan transfer; nothing left SENDING;
- every event the sandbox emitted reached the webhook and was recorded once;
- the requester paid each awarded job once, the workers' owners were paid each pay once, and the books
  verify (`ledger.verify`; `books_balance` again after the test).

The jobs are prepared in-process through the app (the same database). Between a kill and the restart the
test moves the claimed sends' lease to now: what the two minutes of `payouts.SEND_LEASE` would do while
the server is down (the test does not wait them out).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from callboard_core import clock
from callboard_core.container import Core
from callboard_core.jobs.models import Job
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerTransaction, TransactionKind
from callboard_core.payments.models import JobPayment
from callboard_core.payouts.models import Payout, PayoutAttempt
from callboard_core.processor.models import ProcessorEventRecord
from callboard_core.processor.sandbox.models import SandboxEvent, SandboxObject
from tests.jobs_helpers import Owner, new_agent, new_owner, to_review
from tests.payments_helpers import Buyer, buyer, draft, money
from tests.payout_helpers import onboard_owner
from tests.server_process import ServerProcess, can_spawn, spawn, wait_ready

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("books_balance"),
    pytest.mark.skipif(can_spawn() is not None, reason=can_spawn() or ""),
]

N = 20  # paid jobs in review
ANSWERED_BEFORE_KILL = 8  # of the N awards (the kill leaves at least N - 8 - 6 in flight or unsent)
PAY, FEE = 1_000, 100
QUIET_WITHIN = 60.0  # seconds for a restarted server's loop to finish everything


@dataclass
class Market:
    buyer: Buyer
    worker_owners: list[Owner]
    submissions: dict[str, str]  # job id -> the submission to award
    funds: int
    earlier_events: set[str]  # the sandbox's events of the preparation (handed to the handlers directly)


async def market(app: Any, core: Core, client: httpx.AsyncClient) -> Market:
    """A funded requester with N paid jobs in review, by four workers of two owners whose own payout
    accounts are onboarded through the sandbox's hosted page."""
    funds = N * (PAY + FEE) + 3_000
    b = await buyer(app, core, funds=funds)
    owners = [await new_owner(app, core) for _ in range(2)]
    for owner in owners:
        await onboard_owner(owner, core)
    workers = [await new_agent(owner) for owner in owners for _ in range(2)]
    submissions: dict[str, str] = {}
    for i in range(N):
        job_id = await draft(client, b, PAY, participantCap=1)
        published = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
        assert published.status_code == 200, published.text
        submissions[job_id] = await to_review(client, job_id, b.agent, workers[i % len(workers)])
    async with core.db.session(write=False) as session:
        earlier = set(await session.scalars(select(SandboxEvent.id)))
    return Market(b, owners, submissions, funds, earlier)


# --- reading the books ------------------------------------------------------------------------------------


@dataclass
class Books:
    """Everything the invariants look at, read in one go."""

    jobs: dict[str, str]  # job id -> status
    payments: dict[str, str]  # job id -> payment status
    postings: dict[str, list[str]]  # job id -> its ledger transactions' kinds, sorted
    payouts: dict[str, Payout]  # job id -> payout
    attempts: dict[str, list[PayoutAttempt]]  # payout id -> attempts
    keys: set[str]  # every ledger idempotency key
    transfers: list[dict[str, Any]]  # the sandbox's transfer objects
    undelivered: int  # sandbox events not yet delivered
    unrecorded: int  # delivered sandbox events the webhook has no record of

    def awarded(self) -> list[str]:
        return [j for j, status in self.jobs.items() if status == "AWARDED"]

    def in_review(self) -> list[str]:
        return [j for j, status in self.jobs.items() if status == "IN_REVIEW"]


async def read_books(core: Core, m: Market) -> Books:
    ids = list(m.submissions)
    async with core.uow(write=False) as uow:
        s = uow.session
        jobs = {j.id: str(j.status) for j in await s.scalars(select(Job).where(Job.id.in_(ids)))}
        payments = {
            p.job_id: str(p.status)
            for p in await s.scalars(select(JobPayment).where(JobPayment.job_id.in_(ids)))
        }
        postings: dict[str, list[str]] = {j: [] for j in ids}
        for txn in await s.scalars(select(LedgerTransaction).where(LedgerTransaction.job_id.in_(ids))):
            postings[str(txn.job_id)].append(str(txn.kind))
        payouts: dict[str, Payout] = {}
        for payout in await s.scalars(select(Payout)):
            assert payout.job_id not in payouts, f"a second payout for job {payout.job_id}"
            payouts[str(payout.job_id)] = payout
        attempts: dict[str, list[PayoutAttempt]] = {}
        for attempt in await s.scalars(select(PayoutAttempt).order_by(PayoutAttempt.number)):
            attempts.setdefault(attempt.payout_id, []).append(attempt)
        keys = set(await s.scalars(select(LedgerTransaction.idempotency_key)))
        transfers = [
            dict(d)
            for d in await s.scalars(select(SandboxObject.data).where(SandboxObject.type == "transfer"))
        ]
        events = [
            (event_id, delivered)
            for event_id, delivered in await s.execute(select(SandboxEvent.id, SandboxEvent.delivered_at))
            if event_id not in m.earlier_events
        ]
        recorded = set(await s.scalars(select(ProcessorEventRecord.event_id)))
    return Books(
        jobs=jobs,
        payments=payments,
        postings={j: sorted(kinds) for j, kinds in postings.items()},
        payouts=payouts,
        attempts=attempts,
        keys=keys,
        transfers=transfers,
        undelivered=sum(1 for _, delivered in events if delivered is None),
        unrecorded=sum(
            1 for event_id, delivered in events if delivered is not None and event_id not in recorded
        ),
    )


def assert_consistent(books: Books, *, settled: bool) -> None:
    """The invariants that hold at any moment (a kill included); `settled`: also those of a loop gone quiet
    (every payout PAID, every event delivered and recorded)."""
    assert set(books.jobs.values()) <= {"AWARDED", "IN_REVIEW"}, books.jobs
    transfers: dict[str, list[dict[str, Any]]] = {}
    for transfer in books.transfers:
        transfers.setdefault(str(transfer["metadata"]["payoutId"]), []).append(transfer)
    assert set(transfers) <= {p.id for p in books.payouts.values()}, "a transfer no payout made"
    for job_id in books.in_review():
        assert books.payments[job_id] == "RESERVED", (job_id, books.payments[job_id])
        assert books.postings[job_id] == [TransactionKind.RESERVE], (job_id, books.postings[job_id])
        assert job_id not in books.payouts
    for job_id in books.awarded():
        assert books.payments[job_id] == "CAPTURED", (job_id, books.payments[job_id])
        assert books.postings[job_id] == sorted([TransactionKind.CAPTURE, TransactionKind.RESERVE])
        payout = books.payouts[job_id]  # queued in the award's own transaction
        assert payout.amount_cents == PAY
        attempts = books.attempts.get(payout.id, [])
        assert len(attempts) <= 1 and payout.attempts == len(attempts), "a crash made a second attempt"
        sent = transfers.get(payout.id, [])
        assert len(sent) <= 1, f"payout {payout.id} was transferred {len(sent)} times"
        for attempt in attempts:
            assert f"payout:{attempt.id}" in books.keys  # payout_started came with the attempt
            assert all(t["metadata"]["attemptId"] == attempt.id and t["amount"] == PAY for t in sent)
            settled_key = f"payout_outcome:{attempt.id}" in books.keys
            assert settled_key == (attempt.status == "PAID") == (payout.status == "PAID")
            if payout.status == "PAID":
                assert [t["id"] for t in sent] == [payout.processor_transfer_id]
        if settled:
            assert payout.status == "PAID" and len(attempts) == 1 and len(sent) == 1, (
                payout.id,
                payout.status,
            )
    if settled:
        assert books.undelivered == 0 and books.unrecorded == 0


async def assert_money(core: Core, m: Market, awarded: int) -> None:
    """The requester paid each awarded job once (the rest still in escrow); the workers' owners got each
    pay once, and nothing of theirs is left payable or in transit once settled."""
    reserved = (N - awarded) * (PAY + FEE)
    assert await money(core, m.buyer.owner.user_id) == (m.funds - N * (PAY + FEE), reserved, 0)
    async with core.uow(write=False) as uow:
        for owner in m.worker_owners:
            b = await ledger.balances(uow.session, owner.user_id)
            assert (b.available_cents, b.payable_cents, b.payout_in_transit_cents) == (0, 0, 0)
        assert await ledger.verify(uow.session) == []


# --- the server ---------------------------------------------------------------------------------------------


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """The servers a test starts: whatever it leaves running is killed before the database is wiped."""
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.kill()


def start(
    core: Core, servers: list[ServerProcess], tmp_path: Path, *, interval: float = 0.02
) -> ServerProcess:
    server = spawn(core.settings, tmp_path / f"server-{len(servers)}.log", loop=True, interval=interval)
    servers.append(server)
    return server


async def payout_statuses(core: Core) -> dict[str, str]:
    async with core.uow(write=False) as uow:
        rows = await uow.session.execute(select(Payout.id, Payout.status))
        return {pid: str(status) for pid, status in rows}


async def leases_run_out(core: Core) -> int:
    """While the server is down, time passes: claimed sends (SENDING) are due again at once."""
    async with core.uow() as uow:
        moved = await uow.session.execute(
            update(Payout)
            .where(Payout.status == "SENDING")
            .values(next_attempt_at=clock.now())
            .execution_options(synchronize_session=False)
        )
    return int(getattr(moved, "rowcount", 0) or 0)


async def until_quiet(core: Core, m: Market, server: ServerProcess) -> Books:
    """Poll until the loop has paid every awarded job and delivered every event."""
    deadline = time.monotonic() + QUIET_WITHIN
    while True:
        books = await read_books(core, m)
        paid = [j for j in books.awarded() if j in books.payouts and books.payouts[j].status == "PAID"]
        if len(paid) == len(books.awarded()) and books.undelivered == 0 and books.unrecorded == 0:
            return books
        assert server.proc.poll() is None, f"the server died:\n{server.log_tail()}"
        if time.monotonic() > deadline:
            statuses = {j: books.payouts[j].status for j in books.awarded() if j in books.payouts}
            raise AssertionError(f"not quiet after {QUIET_WITHIN}s: {statuses}\n{server.log_tail()}")
        await asyncio.sleep(0.1)


def award_path(job_id: str) -> str:
    return f"/api/v2/jobs/{job_id}/award"


async def award_each_once(core: Core, m: Market, server: ServerProcess, jobs: list[str]) -> None:
    """The jobs a crash left in review are awarded now (a fresh Idempotency-Key), exactly once."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        for job_id in jobs:
            body = {"submissionId": m.submissions[job_id]}
            for expected in (200, 409):  # the second award of the same job is refused
                key = {**m.buyer.agent.h, "Idempotency-Key": uuid.uuid4().hex}
                r = await http.post(award_path(job_id), json=body, headers=key)
                assert r.status_code == expected, r.text


# --- the tests ----------------------------------------------------------------------------------------------


async def test_killed_in_the_middle_of_awards_the_restarted_server_finishes_or_rolls_back_each(
    app: Any, core: Core, client: httpx.AsyncClient, servers: list[ServerProcess], tmp_path: Path
) -> None:
    m = await market(app, core, client)
    keys = {job_id: uuid.uuid4().hex for job_id in m.submissions}
    server = start(core, servers, tmp_path)
    await wait_ready(server)

    # The N awards fired concurrently (six at a time); SIGKILL once the first eight have answered: some
    # awards are committed (and their payouts being sent by the loop), some in flight, the rest unsent.
    answered: dict[str, httpx.Response] = {}
    gate = asyncio.Semaphore(6)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:

        async def award(job_id: str) -> None:
            async with gate:
                headers = {**m.buyer.agent.h, "Idempotency-Key": keys[job_id]}
                body = {"submissionId": m.submissions[job_id]}
                answered[job_id] = await http.post(award_path(job_id), json=body, headers=headers)

        tasks = [asyncio.create_task(award(job_id)) for job_id in m.submissions]
        while len(answered) < ANSWERED_BEFORE_KILL:
            await asyncio.wait([t for t in tasks if not t.done()], return_when=asyncio.FIRST_COMPLETED)
            assert all(t.exception() is None for t in tasks if t.done()), server.log_tail()
        server.kill()
        await asyncio.gather(*tasks, return_exceptions=True)  # the rest lose their connection
    assert all(r.status_code == 200 for r in answered.values()), [r.text for r in answered.values()]

    # What the kill left: every committed award whole (capture and its payout in one transaction), every
    # other job still in review with its escrow, no payout sent twice.
    books = await read_books(core, m)
    assert_consistent(books, settled=False)
    awarded, in_review = books.awarded(), books.in_review()
    assert set(answered) <= set(awarded) and len(awarded) <= ANSWERED_BEFORE_KILL + 6 and in_review
    assert await money(core, m.buyer.owner.user_id) == (
        m.funds - N * (PAY + FEE),
        len(in_review) * (PAY + FEE),
        0,
    )

    await leases_run_out(core)
    server = start(core, servers, tmp_path)
    await wait_ready(server)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        # A committed award retried under its key answers what it answered (or would have).
        for job_id in awarded:
            headers = {**m.buyer.agent.h, "Idempotency-Key": keys[job_id]}
            again = await http.post(
                award_path(job_id), json={"submissionId": m.submissions[job_id]}, headers=headers
            )
            assert again.status_code == 200, again.text
            if job_id in answered:
                assert again.content == answered[job_id].content
    await award_each_once(core, m, server, in_review)
    books = await until_quiet(core, m, server)
    server.stop()

    assert_consistent(books, settled=True)
    assert len(books.awarded()) == N and len(books.transfers) == N
    await assert_money(core, m, awarded=N)


async def test_killed_again_and_again_while_sending_payouts_each_is_paid_once(
    app: Any, core: Core, client: httpx.AsyncClient, servers: list[ServerProcess], tmp_path: Path
) -> None:
    """The awards are made with no loop running (in-process); then a server with its loop on is started and
    killed, four times, each a few milliseconds after its loop has visibly moved a payout (claimed it,
    sent it or settled it), so the kills land inside the three steps of a send or a webhook delivery."""
    m = await market(app, core, client)
    answers = await asyncio.gather(
        *(
            client.post(award_path(job_id), json={"submissionId": sub}, headers=m.buyer.agent.h)
            for job_id, sub in m.submissions.items()
        )
    )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
    books = await read_books(core, m)
    assert {p.status for p in books.payouts.values()} == {"PENDING"} and len(books.payouts) == N

    rng = random.Random(11)
    for _ in range(4):
        before = {p.id: p.status for p in books.payouts.values()}
        if set(before.values()) == {"PAID"}:
            break
        server = start(core, servers, tmp_path, interval=0.01)
        deadline = time.monotonic() + QUIET_WITHIN
        while True:  # no wait for /healthz: the loop starts with the server, before it answers
            # One small query a poll (not the whole books): the booting server gets the CPU, and the kill
            # follows the move sooner.
            if any(before[pid] != status for pid, status in (await payout_statuses(core)).items()):
                break
            assert server.proc.poll() is None and time.monotonic() < deadline, server.log_tail()
            await asyncio.sleep(0.002)
        await asyncio.sleep(rng.uniform(0, 0.02))
        server.kill()
        books = await read_books(core, m)
        assert_consistent(books, settled=False)
        await leases_run_out(core)

    server = start(core, servers, tmp_path)
    await wait_ready(server)
    books = await until_quiet(core, m, server)
    server.stop()
    assert_consistent(books, settled=True)
    assert len(books.transfers) == N
    await assert_money(core, m, awarded=N)
