"""The double-entry ledger: postings, balances, idempotency, immutability, the statement, the invariant check
and concurrency, on SQLite and PostgreSQL. After every test the books must verify clean."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from prometheus_client import generate_latest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, metrics, worker
from callboard_core.bus import AfterCommit, InTransaction
from callboard_core.container import Core
from callboard_core.db.rows import insert_at_commit, naming_its_tables
from callboard_core.db.uow import PENDING_RIDERS
from callboard_core.errors import Conflict, ValidationFailed
from callboard_core.ids import new_id
from callboard_core.ledger import accounts
from callboard_core.ledger import service as ledger
from callboard_core.ledger.events import LedgerPosted
from callboard_core.ledger.models import (
    AccountKind,
    ImmutableLedgerRow,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    TransactionKind,
)
from callboard_core.mail.models import OutboxMessage
from tests.conftest import listening
from tests.test_state_moves import statements_sent

T = TypeVar("T")


pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


async def run(core: Core, fn: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """fn in its own unit of work (committed unless it raises)."""
    async with core.uow() as uow:
        return await fn(uow.session)


async def balance(core: Core, user_id: str) -> dict[str, int]:
    async with core.uow(write=False) as uow:
        b = await ledger.balances(uow.session, user_id)
    return {
        "available": b.available_cents,
        "reserved": b.reserved_cents,
        "payable": b.payable_cents,
        "in_transit": b.payout_in_transit_cents,
        "balance": b.balance_cents,
    }


async def platform_balance(core: Core, kind: AccountKind) -> int:
    async with core.uow() as uow:
        return (await accounts.platform(uow.session, kind)).balance_cents


async def funded(core: Core, amount: int) -> str:
    user = new_id("usr")
    await run(
        core,
        lambda s: ledger.top_up(s, user_id=user, amount_cents=amount, processor_ref=new_id("cs")),
    )
    return user


def money(available: int = 0, reserved: int = 0, payable: int = 0, in_transit: int = 0) -> dict[str, int]:
    return {
        "available": available,
        "reserved": reserved,
        "payable": payable,
        "in_transit": in_transit,
        "balance": available + reserved,
    }


async def test_the_money_flows_move_the_balances(core: Core) -> None:
    requester, worker_owner = new_id("usr"), new_id("usr")
    job = new_id("job")
    fees_before = await platform_balance(core, AccountKind.PLATFORM_FEES)
    clearing_before = await platform_balance(core, AccountKind.PROCESSOR_CLEARING)

    await run(
        core, lambda s: ledger.top_up(s, user_id=requester, amount_cents=10_000, processor_ref="cs_1" + job)
    )
    assert await balance(core, requester) == money(available=10_000)
    await run(core, lambda s: ledger.reserve(s, user_id=requester, amount_cents=3_000, job_id=job))
    assert await balance(core, requester) == money(available=7_000, reserved=3_000)
    await run(core, lambda s: ledger.release(s, user_id=requester, amount_cents=1_000, job_id=job))
    assert await balance(core, requester) == money(available=8_000, reserved=2_000)
    txn = await run(
        core,
        lambda s: ledger.capture(
            s,
            requester_user_id=requester,
            worker_owner_user_id=worker_owner,
            pay_cents=1_500,
            fee_cents=500,
            job_id=job,
        ),
    )
    assert txn.kind == TransactionKind.CAPTURE and txn.job_id == job and txn.user_id == requester
    assert await balance(core, requester) == money(available=8_000)
    assert await balance(core, worker_owner) == money(payable=1_500)
    assert await platform_balance(core, AccountKind.PLATFORM_FEES) == fees_before + 500

    payout = new_id("po")
    await run(
        core, lambda s: ledger.payout_started(s, user_id=worker_owner, amount_cents=1_000, payout_id=payout)
    )
    assert await balance(core, worker_owner) == money(payable=500, in_transit=1_000)
    await run(
        core, lambda s: ledger.payout_settled(s, user_id=worker_owner, amount_cents=1_000, payout_id=payout)
    )
    assert await balance(core, worker_owner) == money(payable=500)

    failing = new_id("po")
    await run(
        core, lambda s: ledger.payout_started(s, user_id=worker_owner, amount_cents=500, payout_id=failing)
    )
    await run(
        core, lambda s: ledger.payout_failed(s, user_id=worker_owner, amount_cents=500, payout_id=failing)
    )
    assert await balance(core, worker_owner) == money(payable=500)

    await run(
        core, lambda s: ledger.refund(s, user_id=requester, amount_cents=2_000, processor_ref="re_" + job)
    )
    await run(
        core,
        lambda s: ledger.adjust(
            s, user_id=requester, amount_cents=250, key="adjust:a" + job, reason="goodwill"
        ),
    )
    await run(
        core,
        lambda s: ledger.adjust(s, user_id=requester, amount_cents=-100, key="adjust:b" + job, reason="fix"),
    )
    assert await balance(core, requester) == money(available=6_150)
    # In from the processor 10 000; out again: the 1 000 payout and the 2 000 refund.
    assert await platform_balance(core, AccountKind.PROCESSOR_CLEARING) == clearing_before - 10_000 + 3_000


async def test_a_capture_without_fee_has_two_entries(core: Core) -> None:
    requester, worker_owner, job = await funded(core, 1_000), new_id("usr"), new_id("job")

    async def flow(s: AsyncSession) -> list[LedgerEntry]:
        await ledger.reserve(s, user_id=requester, amount_cents=1_000, job_id=job)
        txn = await ledger.capture(
            s,
            requester_user_id=requester,
            worker_owner_user_id=worker_owner,
            pay_cents=1_000,
            fee_cents=0,
            job_id=job,
        )
        return await ledger.entries_of(s, txn.id)

    entries = await run(core, flow)
    assert sorted(e.amount_cents for e in entries) == [-1_000, 1_000]


async def test_an_overdraft_is_refused_and_leaves_no_trace(core: Core) -> None:
    user, job = await funded(core, 500), new_id("job")
    async with core.uow() as uow:
        s = uow.session
        with pytest.raises(Conflict) as refused:
            await ledger.reserve(s, user_id=user, amount_cents=600, job_id=job)
        assert refused.value.code == "insufficient_funds"
        assert refused.value.details["shortfall_cents"] == 100
        assert refused.value.details["balance_cents"] == 500
        assert "short by 100" in refused.value.message
        # The savepoint took everything back; the rest of the unit of work goes on and commits.
        assert await s.scalar(select(LedgerTransaction).where(LedgerTransaction.job_id == job)) is None
        await ledger.reserve(s, user_id=user, amount_cents=200, job_id=job)
    assert await balance(core, user) == money(available=300, reserved=200)
    async with core.uow(write=False) as uow:
        txns = (
            await uow.session.scalars(select(LedgerTransaction).where(LedgerTransaction.user_id == user))
        ).all()
    assert sorted(t.kind for t in txns) == [TransactionKind.RESERVE, TransactionKind.TOPUP]


async def test_one_refused_leg_of_a_posting_moves_no_account_and_is_the_one_named(core: Core) -> None:
    """All legs move in one guarded statement: a leg that would overdraw is left out, named in the refusal
    (the first such in id order), and the savepoint takes back the legs that did move."""
    rich, poor = await funded(core, 500), await funded(core, 100)
    async with core.uow() as uow:
        s = uow.session
        legs = [
            (await accounts.owner(s, AccountKind.OWNER_AVAILABLE, rich), -300),
            (await accounts.owner(s, AccountKind.OWNER_AVAILABLE, poor), -200),
            (await accounts.platform(s, AccountKind.PLATFORM_ADJUSTMENTS), 500),
        ]
        with pytest.raises(Conflict) as refused:
            await ledger.post(s, key=new_id("k"), kind=TransactionKind.ADJUSTMENT, entries=legs)
        assert refused.value.code == "insufficient_funds"
        assert (
            refused.value.details["balance_cents"] == 100 and refused.value.details["shortfall_cents"] == 100
        )
        assert [a.balance_cents for a, _ in legs[:2]] == [500, 100]  # the session's copies untouched
    assert (await balance(core, rich))["available"] == 500
    assert (await balance(core, poor))["available"] == 100


async def test_a_repost_returns_the_transaction_and_another_posting_under_its_key_is_refused(
    core: Core,
) -> None:
    user, ref = new_id("usr"), new_id("cs")
    first = await run(core, lambda s: ledger.top_up(s, user_id=user, amount_cents=700, processor_ref=ref))
    again = await run(core, lambda s: ledger.top_up(s, user_id=user, amount_cents=700, processor_ref=ref))
    assert again.id == first.id
    assert await balance(core, user) == money(available=700)
    with pytest.raises(Conflict) as reused:
        await run(core, lambda s: ledger.top_up(s, user_id=user, amount_cents=800, processor_ref=ref))
    assert reused.value.code == "ledger_key_reused"
    assert reused.value.details["transaction_id"] == first.id
    with pytest.raises(Conflict) as other_kind:  # same entries, another kind of posting
        await run(
            core,
            lambda s: ledger.adjust(s, user_id=user, amount_cents=5, key=f"topup:{ref}", reason="x"),
        )
    assert other_kind.value.code == "ledger_key_reused"

    # A payout ends one way only: its failure after its settlement is another posting under the same key.
    worker_owner, payout = new_id("usr"), new_id("po")
    await run(
        core,
        lambda s: ledger.adjust(
            s, user_id=worker_owner, amount_cents=300, key="adjust:" + payout, reason="seed"
        ),
    )

    async def to_payable(s: AsyncSession) -> None:
        available = await accounts.owner(s, AccountKind.OWNER_AVAILABLE, worker_owner)
        payable = await accounts.owner(s, AccountKind.OWNER_PAYABLE, worker_owner)
        await ledger.post(
            s,
            key="move:" + payout,
            kind=TransactionKind.ADJUSTMENT,
            entries=[(available, -300), (payable, 300)],
        )

    await run(core, to_payable)
    await run(
        core, lambda s: ledger.payout_started(s, user_id=worker_owner, amount_cents=300, payout_id=payout)
    )
    await run(
        core, lambda s: ledger.payout_settled(s, user_id=worker_owner, amount_cents=300, payout_id=payout)
    )
    await run(
        core, lambda s: ledger.payout_settled(s, user_id=worker_owner, amount_cents=300, payout_id=payout)
    )
    with pytest.raises(Conflict) as twice:
        await run(
            core, lambda s: ledger.payout_failed(s, user_id=worker_owner, amount_cents=300, payout_id=payout)
        )
    assert twice.value.code == "ledger_key_reused"
    assert await balance(core, worker_owner) == money()


async def test_malformed_postings_are_refused(core: Core) -> None:
    user = new_id("usr")

    async def attempt(s: AsyncSession) -> list[str]:
        available = await accounts.owner(s, AccountKind.OWNER_AVAILABLE, user)
        reserved = await accounts.owner(s, AccountKind.OWNER_RESERVED, user)
        adjustments = await accounts.platform(s, AccountKind.PLATFORM_ADJUSTMENTS)
        bad: list[list[tuple[LedgerAccount, Any]]] = [
            [(adjustments, 0)],  # one entry
            [],
            [(available, 0), (adjustments, 0)],  # zero amounts
            [(available, 100), (adjustments, -99)],  # unbalanced
            [(available, 1.5), (adjustments, -1.5)],  # not integer cents
            [(available, True), (adjustments, -1)],
            [(available, 100), (available, -100)],  # one account twice
            [(available, 100), (reserved, 50), (adjustments, -100)],
            [(available, 10**15), (adjustments, -(10**15))],  # beyond any real amount
        ]
        codes = []
        for i, entries in enumerate(bad):
            with pytest.raises(ValidationFailed) as refused:
                await ledger.post(s, key=f"bad:{user}:{i}", kind=TransactionKind.ADJUSTMENT, entries=entries)
            codes.append(refused.value.errors[0]["code"])
        with pytest.raises(ValidationFailed):
            await ledger.post(
                s, key="", kind=TransactionKind.ADJUSTMENT, entries=[(available, 1), (adjustments, -1)]
            )
        with pytest.raises(ValidationFailed):
            await ledger.reserve(s, user_id=user, amount_cents=0, job_id=new_id("job"))
        with pytest.raises(ValidationFailed):
            await ledger.capture(
                s, requester_user_id=user, worker_owner_user_id=user, pay_cents=1, fee_cents=-1, job_id="j"
            )
        return codes

    assert set(await run(core, attempt)) == {"invalid_posting"}
    async with core.uow(write=False) as uow:
        assert (
            await uow.session.scalar(select(LedgerTransaction).where(LedgerTransaction.user_id == user))
            is None
        )


async def test_entries_and_transactions_cannot_be_changed(core: Core) -> None:
    user = await funded(core, 900)
    async with core.uow() as uow:
        entry = await uow.session.scalar(
            select(LedgerEntry)
            .join(LedgerAccount, LedgerAccount.id == LedgerEntry.account_id)
            .where(LedgerAccount.holder_id == user)
        )
        assert entry is not None
        entry_id, txn_id = entry.id, entry.transaction_id
        entry.amount_cents = 1
        with pytest.raises(ImmutableLedgerRow):
            await uow.session.flush()
        await uow.session.rollback()
    async with core.uow() as uow:
        txn = await uow.session.get(LedgerTransaction, txn_id)
        assert txn is not None
        txn.meta = {"changed": True}
        with pytest.raises(ImmutableLedgerRow):
            await uow.session.flush()
        await uow.session.rollback()
    async with core.uow() as uow:
        entry = await uow.session.get(LedgerEntry, entry_id)
        await uow.session.delete(entry)
        with pytest.raises(ImmutableLedgerRow):
            await uow.session.flush()
        await uow.session.rollback()

    statements = [
        ("UPDATE ledger_entries SET amount_cents = 1 WHERE id = :id", entry_id),
        ("UPDATE ledger_transactions SET kind = 'REFUND' WHERE id = :id", txn_id),
    ]
    if not core.db.is_sqlite:  # SQLite keeps DELETE for the test suite's wipe; PostgreSQL wipes by TRUNCATE
        statements += [
            ("DELETE FROM ledger_entries WHERE id = :id", entry_id),
            ("DELETE FROM ledger_transactions WHERE id = :id", txn_id),
        ]
    for sql, ident in statements:
        with pytest.raises(DBAPIError, match="immutable"):
            async with core.uow() as uow:
                await uow.session.execute(text(sql), {"id": ident})
    assert await balance(core, user) == money(available=900)


async def test_the_statement_pages_newest_first_and_stays_stable(core: Core) -> None:
    user = await funded(core, 10_000)
    for _ in range(5):
        job = new_id("job")
        await run(core, lambda s, job=job: ledger.reserve(s, user_id=user, amount_cents=100, job_id=job))
    # 1 top-up entry + 5 reserves × 2 entries (available and reserved)
    async with core.uow(write=False) as uow:
        everything = await ledger.statement(uow.session, user, limit=100)
    assert len(everything.entries) == 11 and everything.next_cursor is None
    keys = [(e.created_at, e.id) for e in everything.entries]
    assert keys == sorted(keys, reverse=True)
    top_up = everything.entries[-1]
    assert (top_up.kind, top_up.amount_cents, top_up.metadata) == ("TOPUP", 10_000, {"account": "AVAILABLE"})
    assert top_up.task_contract_id is None and top_up.processor_ref is not None and top_up.transaction_id
    reserve = everything.entries[0]
    assert reserve.kind == "RESERVE" and reserve.metadata["jobId"]
    assert {(e.metadata["account"], e.amount_cents) for e in everything.entries[:2]} == {
        ("AVAILABLE", -100),
        ("RESERVED", 100),
    }
    wire = top_up.model_dump(by_alias=True, mode="json")
    assert set(wire) == {
        "id",
        "kind",
        "amountCents",
        "taskContractId",
        "transactionId",
        "processorRef",
        "metadata",
        "createdAt",
    }

    seen: list[str] = []
    cursor: str | None = None
    while True:
        async with core.uow(write=False) as uow:
            page = await ledger.statement(uow.session, user, cursor=cursor, limit=3)
        seen += [e.id for e in page.entries]
        if cursor is None:  # newer postings after the first page do not shift the pages that follow
            await run(core, lambda s: ledger.reserve(s, user_id=user, amount_cents=100, job_id=new_id("job")))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [e.id for e in everything.entries]

    async with core.uow(write=False) as uow:
        with pytest.raises(ValidationFailed):
            await ledger.statement(uow.session, user, cursor="not-a-cursor")
        with pytest.raises(ValidationFailed):
            await ledger.statement(uow.session, user, limit=0)
        assert (await ledger.statement(uow.session, new_id("usr"))).entries == []


async def test_verify_finds_a_wrong_cache_and_an_unbalanced_transaction(core: Core) -> None:
    user = await funded(core, 400)
    async with core.uow() as uow:
        account = await accounts.owner(uow.session, AccountKind.OWNER_AVAILABLE, user)
        clearing = await accounts.platform(uow.session, AccountKind.PROCESSOR_CLEARING)
        account_id, clearing_id = account.id, clearing.id
    async with core.uow() as uow:
        await uow.session.execute(
            text("UPDATE ledger_accounts SET balance_cents = 401 WHERE id = :id"), {"id": account_id}
        )
    async with core.uow(write=False) as uow:
        problems = await ledger.verify(uow.session)
    assert any(account_id in p and "cached balance 401" in p and "sum to 400" in p for p in problems), (
        problems
    )
    async with core.uow() as uow:
        await uow.session.execute(
            text("UPDATE ledger_accounts SET balance_cents = 400 WHERE id = :id"), {"id": account_id}
        )

    # An unbalanced transaction written behind the service's back (one entry of 700 on the clearing
    # account): the database itself refuses it at commit (migration 0014), so nothing of it remains.
    txn_id = new_id("ltx")
    insert_txn = (
        "INSERT INTO ledger_transactions (id, kind, idempotency_key, metadata, created_at) "
        "VALUES (:id, 'ADJUSTMENT', :key, '{}', :at)"
    )
    insert_entry = (
        "INSERT INTO ledger_entries (id, transaction_id, account_id, amount_cents, account_version, "
        "balance_after_cents, created_at) VALUES (:id, :txn, :acc, :amount, :version, :after, :at)"
    )
    at = clock.now().replace(tzinfo=None)
    with pytest.raises(IntegrityError, match=r"FOREIGN KEY|does not balance"):
        async with core.uow() as uow:
            await uow.session.execute(text(insert_txn), {"id": txn_id, "key": "raw:" + txn_id, "at": at})
            await uow.session.execute(
                text(insert_entry),
                {
                    "id": new_id("led"),
                    "txn": txn_id,
                    "acc": clearing_id,
                    "amount": 700,
                    "version": 99,
                    "after": 0,
                    "at": at,
                },
            )
    # Nor does a transaction with no entries at all.
    with pytest.raises(IntegrityError, match=r"FOREIGN KEY|does not balance"):
        async with core.uow() as uow:
            await uow.session.execute(text(insert_txn), {"id": txn_id, "key": "raw:" + txn_id, "at": at})
    async with core.uow(write=False) as uow:
        assert await uow.session.get(LedgerTransaction, txn_id) is None
        assert await ledger.verify(uow.session) == []

    # A balanced pair written behind the service's back but not moving the balances or the versions: the
    # database takes it (it sums to zero), and verify, run inside that unit of work before it is rolled
    # back, names every entry and account it leaves wrong.
    problems: list[str] = []
    with pytest.raises(Undo):
        async with core.uow() as uow:
            await uow.session.execute(text(insert_txn), {"id": txn_id, "key": "raw:" + txn_id, "at": at})
            for acc, amount in ((clearing_id, 700), (account_id, -700)):
                await uow.session.execute(
                    text(insert_entry),
                    {
                        "id": new_id("led"),
                        "txn": txn_id,
                        "acc": acc,
                        "amount": amount,
                        "version": 99,
                        "after": 0,
                        "at": at,
                    },
                )
            problems = await ledger.verify(uow.session)
            raise Undo
    assert any(account_id in p and "cached balance 400" in p and "sum to -300" in p for p in problems), (
        problems
    )
    assert any(account_id in p and "version 1 but 2 entries" in p for p in problems), problems
    assert sum("version 99 records balance 0" in p for p in problems) == 2, problems


class Undo(Exception):
    """Raised to roll a unit of work back."""


async def test_concurrent_reserves_never_overdraw(core: Core) -> None:
    attempts, amount, funds = 30, 70, 1_000  # room for 14
    user = await funded(core, funds)

    async def reserve(i: int) -> str:
        try:
            await run(
                core, lambda s: ledger.reserve(s, user_id=user, amount_cents=amount, job_id=f"job_{user}_{i}")
            )
        except Conflict as exc:
            return exc.code
        return "ok"

    outcomes = await asyncio.gather(*(reserve(i) for i in range(attempts)))
    assert outcomes.count("ok") == funds // amount
    assert outcomes.count("insufficient_funds") == attempts - funds // amount
    assert await balance(core, user) == money(available=funds % amount, reserved=funds - funds % amount)


async def test_one_key_posted_concurrently_lands_once(core: Core) -> None:
    # The accounts exist first, so the racers meet at the key's unique index, not at an account's creation.
    user, ref = await funded(core, 1), new_id("cs")
    results = await asyncio.gather(
        *(
            run(core, lambda s: ledger.top_up(s, user_id=user, amount_cents=250, processor_ref=ref))
            for _ in range(12)
        )
    )
    assert len({t.id for t in results}) == 1
    assert await balance(core, user) == money(available=251)

    # Different postings under one key: one lands, every other one is told the key is taken.
    async def top_up(amount: int) -> str:
        try:
            await run(
                core, lambda s: ledger.top_up(s, user_id=user, amount_cents=amount, processor_ref=ref + "b")
            )
        except Conflict as exc:
            return exc.code
        return str(amount)

    outcomes = await asyncio.gather(*(top_up(100 + i) for i in range(8)))
    landed = [o for o in outcomes if o != "ledger_key_reused"]
    assert len(landed) == 1
    assert await balance(core, user) == money(available=251 + int(landed[0]))


async def test_accounts_are_created_once_under_concurrency(core: Core) -> None:
    user = new_id("usr")
    made = await asyncio.gather(
        *(run(core, lambda s: accounts.owner(s, AccountKind.OWNER_PAYABLE, user)) for _ in range(10))
    )
    assert len({a.id for a in made}) == 1
    assert made[0].allow_negative is False and made[0].currency == "usd"
    async with core.uow() as uow:
        clearing = await accounts.platform(uow.session, AccountKind.PROCESSOR_CLEARING)
        assert clearing.allow_negative is True and clearing.holder_id == "platform"
        with pytest.raises(ValidationFailed):
            await accounts.get_or_create(uow.session, AccountKind.OWNER_AVAILABLE, user, currency="eur")


async def test_posted_is_published_once_per_new_transaction_inside_its_unit_of_work(core: Core) -> None:
    heard: list[str] = []
    committed: list[str] = []

    async def on_posted(session: AsyncSession, event: LedgerPosted) -> None:
        if event.kind is not TransactionKind.RESERVE:
            return
        txn = event.transaction
        heard.append(txn.idempotency_key)
        # The entries come with the event: the pairs the posting wrote, summing to zero.
        assert sum(entry.amount_cents for _, entry in event.entries) == 0
        if txn.job_id == "job_fails":
            raise RuntimeError("the listener failed")

    async def after(event: LedgerPosted) -> None:
        committed.append(event.transaction.idempotency_key)

    user, job = await funded(core, 500), new_id("job")
    with listening(core, {LedgerPosted: [InTransaction(on_posted), AfterCommit(after)]}):
        await run(core, lambda s: ledger.reserve(s, user_id=user, amount_cents=100, job_id=job))
        await run(core, lambda s: ledger.reserve(s, user_id=user, amount_cents=100, job_id=job))  # replay
        assert heard == [f"reserve:{job}"] and committed == [f"reserve:{job}"]
        # A failing listener takes the posting down with it: nothing of it remains, and no after-commit
        # handler hears of it.
        with pytest.raises(RuntimeError):
            await run(core, lambda s: ledger.reserve(s, user_id=user, amount_cents=100, job_id="job_fails"))
    assert committed == [f"reserve:{job}"]
    assert await balance(core, user) == money(available=400, reserved=100)


async def test_a_posting_without_a_savepoint_moves_and_records_like_one_with(core: Core) -> None:
    """A publish's reserve and an award's capture post without a savepoint (on PostgreSQL in one statement):
    the same entries, versions and balances as the savepoint path, and the event carries them."""
    user, worker_owner = await funded(core, 1_000), new_id("usr")
    job = new_id("job")
    posted: list[LedgerPosted] = []

    async def hear(session: AsyncSession, event: LedgerPosted) -> None:
        posted.append(event)

    with listening(core, {LedgerPosted: [InTransaction(hear)]}):
        await run(
            core,
            lambda s: ledger.reserve(s, user_id=user, amount_cents=700, job_id=job, savepoint=False),
        )
        await run(
            core,
            lambda s: ledger.capture(
                s,
                requester_user_id=user,
                worker_owner_user_id=worker_owner,
                pay_cents=600,
                fee_cents=100,
                job_id=job,
                savepoint=False,
            ),
        )
    assert await balance(core, user) == money(available=300)
    assert (await balance(core, worker_owner))["payable"] == 600
    capture = posted[-1]
    assert sorted(e.amount_cents for _, e in capture.entries) == [-700, 100, 600]
    async with core.uow(write=False) as uow:
        stored = (
            await uow.session.scalars(
                select(LedgerEntry).where(LedgerEntry.transaction_id == capture.transaction.id)
            )
        ).all()
    assert {(e.id, e.account_version, e.balance_after_cents) for e in stored} == {
        (e.id, e.account_version, e.balance_after_cents) for _, e in capture.entries
    }
    reserved = next(e for _, e in capture.entries if e.amount_cents == -700)
    assert (reserved.account_version, reserved.balance_after_cents) == (2, 0)


async def test_a_refused_debit_without_a_savepoint_writes_no_entry_and_cannot_commit(core: Core) -> None:
    """Without a savepoint a refusal ends the caller's transaction: no entry is written, and were the caller
    to commit anyway, the zero-sum rule refuses the entry-less transaction: nothing of it remains."""
    user, job = await funded(core, 500), new_id("job")
    with pytest.raises((IntegrityError, DBAPIError)):
        async with core.uow() as uow:
            s = uow.session
            with pytest.raises(Conflict) as refused:
                await ledger.reserve(s, user_id=user, amount_cents=600, job_id=job, savepoint=False)
            assert refused.value.code == "insufficient_funds"
            assert refused.value.details["shortfall_cents"] == 100
            txn = await s.scalar(select(LedgerTransaction).where(LedgerTransaction.job_id == job))
            assert txn is not None
            assert await s.scalar(select(LedgerEntry).where(LedgerEntry.transaction_id == txn.id)) is None
    assert await balance(core, user) == money(available=500)
    async with core.uow(write=False) as uow:
        assert (
            await uow.session.scalar(select(LedgerTransaction).where(LedgerTransaction.job_id == job)) is None
        )


def _outbox_row(subject: str) -> OutboxMessage:
    """A row gathered for the commit beside a posting at commit (no foreign key: any test may write one)."""
    return OutboxMessage(kind="test", to_address="t@example.com", subject=subject, body_text="-")


async def _outbox_rows(core: Core, subject: str) -> int:
    async with core.uow(write=False) as uow:
        found = await uow.session.scalars(select(OutboxMessage.id).where(OutboxMessage.subject == subject))
        return len(found.all())


async def _reserve_at_commit(session: AsyncSession, user: str, amount: int) -> str:
    """A reserve posted `at_commit` (no listener of its kind reads the database, which would write it at
    once); its transaction's id."""
    available, reserved = await accounts.several(
        session, (AccountKind.OWNER_AVAILABLE, user), (AccountKind.OWNER_RESERVED, user)
    )
    txn = await ledger.post(
        session,
        key=f"reserve:{new_id('job')}",
        kind=TransactionKind.RESERVE,
        entries=[(available, -amount), (reserved, amount)],
        savepoint=False,
        at_commit=True,
    )
    return txn.id


async def test_a_posting_at_commit_rides_with_the_commits_statement(core: Core) -> None:
    """A posting `at_commit` (an award's capture): on PostgreSQL nothing of it is sent while the request
    runs; the commit's one statement writes it with the rows gathered for the commit, and its entries hold
    their accounts' versions and balances as a posting sent at once would. SQLite posts at once, as before.
    (A reserve here: no listener of its kind reads the database, which would write it first.)"""
    user, subject = await funded(core, 1_000), new_id("sub")
    with statements_sent(core) as sent:
        async with core.uow() as uow:
            txn_id = await _reserve_at_commit(uow.session, user, 700)
            await insert_at_commit(uow.session, [_outbox_row(subject)])
            during = [statement for statement in sent if "ledger_transactions" in statement]
    posting = [statement for statement in sent if "ledger_transactions" in statement]
    if core.db.is_sqlite:
        assert len(during) == 1 and len(posting) == 1  # its INSERT, sent at once
    else:
        assert during == []
        assert len(posting) == 1 and "mail_outbox" in posting[0] and "posting_moved" in posting[0]
    assert await balance(core, user) == money(available=300, reserved=700)
    assert await _outbox_rows(core, subject) == 1
    async with core.uow(write=False) as uow:
        stored = (
            await uow.session.execute(
                select(LedgerEntry.amount_cents, LedgerEntry.account_version, LedgerEntry.balance_after_cents)
                .where(LedgerEntry.transaction_id == txn_id)
                .order_by(LedgerEntry.amount_cents)
            )
        ).all()
    # The available account's second move (after the top-up), the reserved account's first.
    assert [tuple(row) for row in stored] == [(-700, 2, 300), (700, 1, 700)]


async def test_a_read_of_the_ledger_writes_a_posting_waiting_for_the_commit_first(core: Core) -> None:
    """A statement that names a ledger table sees the posting: it is written first, once."""
    user = await funded(core, 1_000)
    with statements_sent(core) as sent:
        async with core.uow() as uow:
            session = uow.session
            await _reserve_at_commit(session, user, 700)
            # A statement that says it names other tables only: the posting still waits.
            await session.execute(naming_its_tables(select(OutboxMessage.id).limit(1)))
            assert core.db.is_sqlite or session.sync_session.info[PENDING_RIDERS]
            # One that names the accounts reads them as moved; so does one that does not say what it names.
            reserved = naming_its_tables(
                select(LedgerAccount.balance_cents).where(
                    LedgerAccount.holder_id == user, LedgerAccount.kind == AccountKind.OWNER_RESERVED
                )
            )
            assert await session.scalar(reserved) == 700
            assert PENDING_RIDERS not in session.sync_session.info
            seen = await ledger.balances(session, user)
            assert (seen.available_cents, seen.reserved_cents) == (300, 700)
    assert len([statement for statement in sent if "INSERT INTO ledger_transactions" in statement]) == 1
    assert await balance(core, user) == money(available=300, reserved=700)


async def test_a_posting_refused_at_commit_stores_nothing_of_its_transaction(core: Core) -> None:
    """A debit the guard refuses when the commit's statement runs (PostgreSQL; SQLite refuses at once):
    409 `insufficient_funds`, and neither the posting nor any row gathered with it is stored."""
    user, subject = await funded(core, 500), new_id("sub")
    with pytest.raises(Conflict) as refused:
        async with core.uow() as uow:
            await insert_at_commit(uow.session, [_outbox_row(subject)])
            await _reserve_at_commit(uow.session, user, 600)
    assert refused.value.code == "insufficient_funds"
    assert await balance(core, user) == money(available=500)
    assert await _outbox_rows(core, subject) == 0
    async with core.uow(write=False) as uow:
        kinds = (
            await uow.session.scalars(select(LedgerTransaction.kind).where(LedgerTransaction.user_id == user))
        ).all()
    assert list(kinds) == [TransactionKind.TOPUP]


async def test_a_posting_waiting_for_the_commit_goes_with_a_rollback(core: Core) -> None:
    user = await funded(core, 1_000)
    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            await _reserve_at_commit(uow.session, user, 700)
            info = uow.session.sync_session.info
            assert core.db.is_sqlite or info[PENDING_RIDERS]
            raise RuntimeError("the request failed after its posting")
    assert PENDING_RIDERS not in info
    assert await balance(core, user) == money(available=1_000)


async def test_each_entry_records_its_accounts_version_and_resulting_balance(core: Core) -> None:
    user = await funded(core, 1_000)
    for amount in (100, 250, 50):
        await run(
            core, lambda s, a=amount: ledger.reserve(s, user_id=user, amount_cents=a, job_id=new_id("job"))
        )
    async with core.uow(write=False) as uow:
        account = await accounts.owner(uow.session, AccountKind.OWNER_AVAILABLE, user)
        entries = (
            await uow.session.scalars(
                select(LedgerEntry)
                .where(LedgerEntry.account_id == account.id)
                .order_by(LedgerEntry.account_version)
            )
        ).all()
    assert [e.account_version for e in entries] == [1, 2, 3, 4]
    assert [e.balance_after_cents for e in entries] == [1_000, 900, 650, 600]
    assert account.version == 4 and account.balance_cents == entries[-1].balance_after_cents


async def test_the_background_loop_checks_the_books_and_reports_on_metrics(core: Core) -> None:
    user = await funded(core, 500)
    async with core.uow() as uow:
        account_id = (await accounts.owner(uow.session, AccountKind.OWNER_AVAILABLE, user)).id
    assert await worker.verify_books(core) == []
    assert metrics.LEDGER_VERIFY_FAILURES._value.get() == 0

    async def set_cache(cents: int) -> None:
        async with core.uow() as uow:
            await uow.session.execute(
                text("UPDATE ledger_accounts SET balance_cents = :c WHERE id = :id"),
                {"c": cents, "id": account_id},
            )

    await set_cache(501)  # a cache that no longer matches its entries
    previous = core.settings.ledger_verify_interval_seconds
    core.settings.ledger_verify_interval_seconds = 0.05
    stop = asyncio.Event()
    try:
        running = asyncio.create_task(worker.loop(core, 0.02, stop))
        for _ in range(200):
            if metrics.LEDGER_VERIFY_FAILURES._value.get():
                break
            await asyncio.sleep(0.02)
        stop.set()
        await running
    finally:
        core.settings.ledger_verify_interval_seconds = previous
        await set_cache(500)
    assert metrics.LEDGER_VERIFY_FAILURES._value.get() == 1
    assert "callboard_ledger_verify_failures 1.0" in generate_latest(metrics.REGISTRY).decode()
    assert await worker.verify_books(core) == [] and metrics.LEDGER_VERIFY_FAILURES._value.get() == 0


async def test_a_capture_moves_only_the_accounts_it_names_whatever_the_caller_read(core: Core) -> None:
    """`capture(accounts_read=...)` saves the capture's own read only when what the caller read is exactly
    the payer's reserved, the worker owner's payable and the platform's fee account: a stranger's accounts
    (a read joined on the wrong column) are not moved; the capture reads the right ones instead."""
    payer, worker_owner = await funded(core, 1_000), new_id("usr")
    stranger = await funded(core, 1_000)
    await run(core, lambda s: ledger.reserve(s, user_id=payer, amount_cents=700, job_id=new_id("job")))
    await run(core, lambda s: ledger.reserve(s, user_id=stranger, amount_cents=700, job_id=new_id("job")))

    async def stranger_accounts(session: AsyncSession) -> list[LedgerAccount | None]:
        return [
            await accounts.owner(session, AccountKind.OWNER_RESERVED, stranger),
            await accounts.owner(session, AccountKind.OWNER_PAYABLE, stranger),
            await accounts.platform(session, AccountKind.PLATFORM_FEES),
        ]

    async def capture(session: AsyncSession) -> Any:
        return await ledger.capture(
            session,
            requester_user_id=payer,
            worker_owner_user_id=worker_owner,
            pay_cents=600,
            fee_cents=100,
            job_id=new_id("job"),
            accounts_read=await stranger_accounts(session),
        )

    await run(core, capture)
    assert await balance(core, stranger) == money(available=300, reserved=700)
    assert await balance(core, payer) == money(available=300)
    assert await balance(core, worker_owner) == money(payable=600)
