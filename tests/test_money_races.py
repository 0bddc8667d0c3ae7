"""Money races not covered next to their features (test_jobpay: concurrent paid publishes on one balance,
award against no-award, a retried publish; test_cards: one event delivered concurrently), on SQLite and
PostgreSQL: the payment webhook delivered again and again while the publish's synchronous auto top-up
charges the same payment; concurrent awards of one job under different Idempotency-Keys and retries under
the same one; two worker loops (two processes) sending the same payouts. Each ends with the money moved once
and the books verifying clean (`books_balance`)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from callboard_core import clock
from callboard_core.container import Core
from callboard_core.documents.models import CommercialDocument, DocumentKind, SourceType
from callboard_core.ledger.models import LedgerTransaction, TransactionKind
from callboard_core.payouts import service as payouts
from callboard_core.payouts.models import Payout
from callboard_core.processor.sandbox.models import SandboxObject
from callboard_core.worker import run_once
from tests.jobs_helpers import all_submit, new_agent, new_owner, to_review
from tests.payments_helpers import (
    Buyer,
    buyer,
    deliver,
    draft,
    kinds_for,
    money,
    redeliver_all,
    save_card,
)
from tests.payout_helpers import award, count_kind, onboard_owner, payout_rows, sandbox_count

pytestmark = pytest.mark.usefixtures("books_balance")


async def topups_of(core: Core, user_id: str) -> list[LedgerTransaction]:
    async with core.uow(write=False) as uow:
        return list(
            await uow.session.scalars(
                select(LedgerTransaction).where(
                    LedgerTransaction.user_id == user_id, LedgerTransaction.kind == TransactionKind.TOPUP
                )
            )
        )


async def transfers_by_payout(core: Core) -> dict[str, int]:
    """How many transfer objects the sandbox holds per payout (from the transfer's metadata)."""
    async with core.db.session(write=False) as session:
        rows = await session.scalars(select(SandboxObject.data).where(SandboxObject.type == "transfer"))
        counts: dict[str, int] = {}
        for data in rows:
            payout_id = str(data["metadata"]["payoutId"])
            counts[payout_id] = counts.get(payout_id, 0) + 1
        return counts


# --- the payment webhook and the synchronous path -------------------------------------------------------


async def publishes_against_the_webhook(
    app: Any, core: Core, client: httpx.AsyncClient, b: Buyer, job_id: str, spacing: float
) -> list[httpx.Response]:
    """Six publishes of the job (five by the agent, the last by the owner), started `spacing` seconds
    apart, while the sandbox's webhook events are delivered and redelivered until they are all answered."""
    done = asyncio.Event()

    async def hammer() -> None:
        while not done.is_set():
            await deliver(app, core)
            await redeliver_all(app, core)
            await asyncio.sleep(0)

    async def publish(i: int) -> httpx.Response:
        await asyncio.sleep(i * spacing)
        if i == 5:
            return await b.owner.client.post(f"/api/v2/owner/jobs/{job_id}/publish")
        return await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)

    async def publish_all() -> list[httpx.Response]:
        try:
            return list(await asyncio.gather(*(publish(i) for i in range(6))))
        finally:
            done.set()

    answers, _ = await asyncio.gather(publish_all(), hammer())
    await redeliver_all(app, core)  # and once more after everything
    return answers


async def test_an_auto_topup_charges_once_while_publishes_race_and_its_webhook_arrives_again_and_again(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """Publishes of one paid job, each able to charge the card off-session in its prepare step and to credit
    `topup:<payment intent>`, started a few milliseconds apart (so that one's charge lands between another's
    balance read and its charge), race the webhook (payment_intent.succeeded delivered again and again, as
    a processor retrying would). Per job: one charge, one credit, one reserve. Rounds of several spacings."""
    b = await buyer(app, core, funds=0)
    await save_card(core, b.owner, amount=1_100)  # each round's top-up is exactly its job's pay + fee
    for n, spacing in enumerate((0.0, 0.002, 0.004, 0.006, 0.01, 0.015), start=1):
        job_id = await draft(client, b, 1_000)
        answers = await publishes_against_the_webhook(app, core, client, b, job_id, spacing)
        texts = [a.text for a in answers]
        assert [a.status_code for a in answers].count(200) == 1, texts
        assert all(a.status_code == 409 for a in answers if a.status_code != 200), texts
        assert await sandbox_count(core, "payment_intent") == n, f"round {n}: the card was charged twice"
        assert len(await topups_of(core, b.owner.user_id)) == n
        assert await money(core, b.owner.user_id) == (0, n * 1_100, 0)
        assert await kinds_for(core, job_id) == [TransactionKind.RESERVE]
    assert all(
        t.idempotency_key == f"topup:{t.processor_ref}" for t in await topups_of(core, b.owner.user_id)
    )


# --- awards ---------------------------------------------------------------------------------------------


async def test_concurrent_awards_under_different_keys_and_a_retried_key_capture_once_and_pay_once(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    worker_owner = await new_owner(app, core)
    await onboard_owner(worker_owner, core)
    first, second = await new_agent(worker_owner), await new_agent(worker_owner)
    job_id = await draft(client, b, 1_000, participantCap=2)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    submissions = await all_submit(client, job_id, b.agent, [first, second])
    retried = {"Idempotency-Key": uuid.uuid4().hex}

    def by_agent(i: int, key: dict[str, str]) -> Any:
        return client.post(
            f"/api/v2/jobs/{job_id}/award",
            json={"submissionId": submissions[i % 2]},
            headers={**b.agent.h, **key},
        )

    answers = await asyncio.gather(
        *(by_agent(0, retried) for _ in range(4)),  # one request retried under its key
        *(by_agent(i, {"Idempotency-Key": uuid.uuid4().hex}) for i in range(6)),
        *(
            b.owner.client.post(
                f"/api/v2/owner/jobs/{job_id}/award", json={"submissionId": submissions[i % 2]}
            )
            for i in range(2)
        ),
    )
    won = [a for a in answers if a.status_code == 200]
    assert won and {a.json()["award"]["id"] for a in won} == {won[0].json()["award"]["id"]}, [
        a.text for a in answers
    ]
    assert all(a.status_code == 409 for a in answers if a.status_code != 200), [a.text for a in answers]
    # Several 200s only as replays of the one retried request's stored answer.
    assert len(won) == 1 or all(a in answers[:4] and a.json() == won[0].json() for a in won)
    later = await by_agent(0, retried)
    if any(a in answers[:4] for a in won):
        assert later.status_code == 200 and later.json() == won[0].json()
    else:  # its award was refused (409), which is not stored: the retry is refused again
        assert later.status_code == 409, later.text

    assert await kinds_for(core, job_id) == sorted([TransactionKind.RESERVE, TransactionKind.CAPTURE])
    assert await money(core, worker_owner.user_id) == (0, 0, 1_000)
    await asyncio.gather(run_once(core, housekeeping=False), run_once(core, housekeeping=False))
    (payout,) = await payout_rows(core, worker_owner.user_id)
    assert payout.status == "PAID" and payout.job_id == job_id and payout.amount_cents == 1_000
    assert await transfers_by_payout(core) == {payout.id: 1}
    assert await money(core, worker_owner.user_id) == (0, 0, 0)


async def test_a_retried_award_gets_the_same_answer_and_captures_once(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 700, participantCap=1)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    submission = await to_review(client, job_id, b.agent, worker)
    key = {**b.agent.h, "Idempotency-Key": uuid.uuid4().hex}
    path, body = f"/api/v2/jobs/{job_id}/award", {"submissionId": submission}
    answers = await asyncio.gather(*(client.post(path, json=body, headers=key) for _ in range(5)))
    ok = [a for a in answers if a.status_code == 200]
    assert ok and all(a.content == ok[0].content for a in ok), [a.text for a in answers]
    # The others met the same key still in flight; none ran a second award.
    assert all(a.json()["code"] == "idempotency_request_in_progress" for a in answers if a.status_code != 200)
    for _ in range(2):  # later retries replay the stored answer, byte for byte
        again = await client.post(path, json=body, headers=key)
        assert again.status_code == 200 and again.content == ok[0].content
    assert await kinds_for(core, job_id) == sorted([TransactionKind.RESERVE, TransactionKind.CAPTURE])
    assert await money(core, b.owner.user_id) == (10_000 - 770, 0, 0)
    assert await count_kind(core, TransactionKind.CAPTURE) == 1


# --- payouts --------------------------------------------------------------------------------------------


async def test_two_worker_loops_at_once_send_each_payout_once(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """A second Core over the same database is a second process (its own connections); both loops pass over
    the same due payouts at once, including one whose send crashed after step (a) and whose lease ran out."""
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    worker = await new_agent(worker_owner)
    await onboard_owner(worker_owner, core)
    for pay in range(100, 900, 100):
        await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=pay, fee=10)
    crashed = (await payout_rows(core, worker_owner.user_id))[0]
    async with core.uow() as uow:
        attempt = await payouts.start_attempt(uow.session, crashed.id)
    assert not isinstance(attempt, str)
    async with core.uow() as uow:  # the lease ran out (what two minutes would do)
        await uow.session.execute(
            update(Payout).where(Payout.id == crashed.id).values(next_attempt_at=clock.now())
        )

    other = Core.build(core.settings)
    try:
        for _ in range(2):
            await asyncio.gather(
                run_once(core, housekeeping=False),
                run_once(other, housekeeping=False),
                payouts.send_due(other),
            )
    finally:
        await other.close()

    rows = await payout_rows(core, worker_owner.user_id)
    assert len(rows) == 8 and {p.status for p in rows} == {"PAID"}
    assert all(p.attempts == 1 for p in rows)
    assert next(p for p in rows if p.id == crashed.id).current_attempt_id == attempt.id
    assert await transfers_by_payout(core) == {p.id: 1 for p in rows}
    assert await count_kind(core, TransactionKind.PAYOUT) == 8
    assert await count_kind(core, TransactionKind.PAYOUT_SETTLED) == 8
    assert await money(core, worker_owner.user_id) == (0, 0, 0)


async def test_concurrent_paid_awards_sharing_their_workers_number_their_documents_without_a_gap(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """Rounds of six paid jobs of one payer, each with submissions of the same two workers (of two owners,
    paid for the first time in the round), awarded at once. Every award lands, none undone by a deadlock
    (the suite fails a test whose write was run again): on PostgreSQL each closing statement takes the
    year's document counters before the submitters' agent rows, and each capture takes the accounts only
    with the commit's statement, even the first awards, which create the workers' owners' accounts. The
    invoices and receipts are numbered without a gap, each receipt naming its own award's invoice."""
    b = await buyer(app, core, funds=3 * 6 * 1_100)
    for _round in range(3):
        workers = [await new_agent(await new_owner(app, core)) for _ in range(2)]
        jobs = [await draft(client, b, 1_000, participantCap=2) for _ in range(6)]
        for job_id in jobs:
            assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
        submissions = [await all_submit(client, job_id, b.agent, workers) for job_id in jobs]
        answers = await asyncio.gather(
            *(
                client.post(
                    f"/api/v2/jobs/{job_id}/award", json={"submissionId": subs[i % 2]}, headers=b.agent.h
                )
                for i, (job_id, subs) in enumerate(zip(jobs, submissions, strict=True))
            )
        )
        assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
        await _numbered_without_a_gap(core, jobs)
    assert await money(core, b.owner.user_id) == (0, 0, 0)


async def _numbered_without_a_gap(core: Core, jobs: list[str]) -> None:
    """The jobs' award documents: each kind's numbers consecutive, each receipt naming its job's invoice."""
    async with core.uow(write=False) as uow:
        documents = (
            await uow.session.scalars(
                select(CommercialDocument).where(
                    CommercialDocument.job_id.in_(jobs),
                    CommercialDocument.source_type == SourceType.JOB_PAYMENT,
                )
            )
        ).all()
    by_kind: dict[str, list[CommercialDocument]] = {}
    for document in documents:
        by_kind.setdefault(document.kind, []).append(document)
    for kind in (DocumentKind.INVOICE, DocumentKind.RECEIPT):
        serials = sorted(int(d.number.rsplit("-", 1)[1]) for d in by_kind[kind])
        assert serials == list(range(serials[0], serials[0] + len(jobs))), (kind, serials)
    invoices = {d.job_id: d.number for d in by_kind[DocumentKind.INVOICE]}
    assert {d.job_id: d.meta["invoiceNumber"] for d in by_kind[DocumentKind.RECEIPT]} == invoices
