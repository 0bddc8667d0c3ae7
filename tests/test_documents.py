"""Commercial documents on SQLite and PostgreSQL: each ledger flow issues its receipts, invoices and credit
notes (amounts, links, numbers), replays issue nothing, numbering is gapless under concurrency and rollbacks,
documents are immutable, the owner's list pages newest first with a stable cursor and a kind filter, other
owners see a 404, an agent's key (and MCP) lists its owner's documents, and the documents reconcile with the
ledger. After every test the books must verify clean."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from callboard_core import clock
from callboard_core.container import Core
from callboard_core.documents.models import (
    CommercialDocument,
    DocumentCounter,
    DocumentKind,
    ImmutableDocument,
)
from callboard_core.documents.numbering import next_numbers
from callboard_core.ids import new_id
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import AccountKind, LedgerAccount, LedgerEntry, LedgerTransaction
from callboard_core.users.models import User
from tests.conftest import key_headers, new_client, register_agent
from tests.jobs_helpers import AgentHandle, Owner, job_body, new_agent, new_owner
from tests.mcp_helpers import call, call_error, http_client, serving

SPEC_FIELDS = {
    "id",
    "number",
    "kind",
    "status",
    "currency",
    "subtotalCents",
    "taxCents",
    "totalCents",
    "taskContractId",
    "transactionId",
    "ledgerEntryId",
    "sourceType",
    "sourceId",
    "bountyId",
    "bountyPaymentId",
    "bountyPayoutId",
    "bountySettlementEntryId",
    "processorRef",
    "counterpartyName",
    "counterpartyEmail",
    "taxId",
    "vatId",
    "paymentStatus",
    "refundStatus",
    "lineItems",
    "metadata",
    "issuedAt",
    "createdAt",
}


pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


def number(prefix: str, n: int) -> str:
    return f"{prefix}-{clock.now().year}-{n:06d}"


async def docs(owner: Owner, **params: Any) -> list[dict[str, Any]]:
    """Every document of the owner's, walking the pages."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = await owner.client.get("/me/billing/documents", params=query)
        assert r.status_code == 200, r.text
        found.extend(r.json()["documents"])
        cursor = r.json()["nextCursor"]
        if cursor is None:
            return found


async def top_up(core: Core, user_id: str, cents: int, ref: str | None = None) -> LedgerTransaction:
    async with core.uow() as uow:
        return await ledger.top_up(
            uow.session, user_id=user_id, amount_cents=cents, processor_ref=ref or new_id("pi")
        )


async def draft_job(app: Any, agent: AgentHandle, title: str) -> str:
    async with new_client(app) as c:
        r = await c.post("/api/v2/jobs", json=job_body(title=title), headers=agent.h)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def owner_entry(core: Core, transaction_id: str, kind: AccountKind, user_id: str) -> tuple[str, int]:
    async with core.uow(write=False) as uow:
        row = (
            await uow.session.execute(
                select(LedgerEntry.id, LedgerEntry.amount_cents)
                .join(LedgerAccount, LedgerAccount.id == LedgerEntry.account_id)
                .where(
                    LedgerEntry.transaction_id == transaction_id,
                    LedgerAccount.kind == kind,
                    LedgerAccount.holder_id == user_id,
                )
            )
        ).one()
    return str(row.id), int(row.amount_cents)


async def email_of(core: Core, user_id: str) -> str:
    async with core.uow(write=False) as uow:
        user = await uow.session.get(User, user_id)
        assert user is not None
        return user.email


async def paid_job(
    app: Any,
    core: Core,
    requester: Owner,
    *,
    pay: int = 1000,
    fee: int = 150,
    title: str = "Translate the FAQ",
) -> tuple[str, Owner, AgentHandle]:
    """A funded, reserved job of the requester's (a real job row, for its title): (job id, worker owner,
    worker agent)."""
    agent = await new_agent(requester)
    job_id = await draft_job(app, agent, title)
    worker_owner = await new_owner(app, core)
    worker = await new_agent(worker_owner)
    await top_up(core, requester.user_id, pay + fee)
    async with core.uow() as uow:
        await ledger.reserve(uow.session, user_id=requester.user_id, amount_cents=pay + fee, job_id=job_id)
    return job_id, worker_owner, worker


async def capture(
    core: Core,
    requester: Owner,
    worker_owner: Owner,
    worker: AgentHandle,
    job_id: str,
    pay: int,
    fee: int,
    payment_id: str,
) -> LedgerTransaction:
    async with core.uow() as uow:
        return await ledger.capture(
            uow.session,
            requester_user_id=requester.user_id,
            worker_owner_user_id=worker_owner.user_id,
            pay_cents=pay,
            fee_cents=fee,
            job_id=job_id,
            metadata={"jobPaymentId": payment_id, "workerAgentId": worker.id},
        )


# --- each flow issues its documents ---------------------------------------------------------------------


async def test_a_top_up_issues_a_numbered_paid_receipt_with_every_spec_field(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    txn = await top_up(core, owner.user_id, 2500, ref="pi_receipt_1")
    (doc,) = await docs(owner)
    assert set(doc) == SPEC_FIELDS
    entry_id, amount = await owner_entry(core, txn.id, AccountKind.OWNER_AVAILABLE, owner.user_id)
    assert amount == 2500
    assert doc["id"].startswith("doc_") and doc["number"] == number("RCT", 1)
    assert (doc["kind"], doc["status"], doc["currency"]) == ("RECEIPT", "ISSUED", "usd")
    assert (doc["subtotalCents"], doc["taxCents"], doc["totalCents"]) == (2500, 0, 2500)
    assert (doc["transactionId"], doc["ledgerEntryId"]) == (txn.id, entry_id)
    assert (doc["sourceType"], doc["sourceId"], doc["processorRef"]) == (
        "TOPUP",
        "pi_receipt_1",
        "pi_receipt_1",
    )
    assert (doc["paymentStatus"], doc["refundStatus"]) == ("PAID", None)
    assert doc["counterpartyEmail"] == await email_of(core, owner.user_id)
    assert doc["taxId"] is None and doc["vatId"] is None and doc["bountyId"] is None
    assert [(li["description"], li["amountCents"]) for li in doc["lineItems"]] == [("Balance top-up", 2500)]
    # A second top-up is the next number.
    await top_up(core, owner.user_id, 100)
    assert [d["number"] for d in await docs(owner)] == [number("RCT", 2), number("RCT", 1)]


async def test_an_award_issues_a_fee_invoice_and_a_job_payment_receipt_to_the_requester(
    app: Any, core: Core
) -> None:
    requester = await new_owner(app, core)
    job_id, worker_owner, worker = await paid_job(app, core, requester, pay=1000, fee=150)
    txn = await capture(core, requester, worker_owner, worker, job_id, 1000, 150, "jpy_1")
    entry_id, amount = await owner_entry(core, txn.id, AccountKind.OWNER_RESERVED, requester.user_id)
    assert amount == -1150

    by_kind = {d["kind"]: d for d in await docs(requester) if d["sourceType"] == "JOB_PAYMENT"}
    invoice, receipt = by_kind["INVOICE"], by_kind["RECEIPT"]
    assert invoice["number"] == number("INV", 1)
    assert (invoice["subtotalCents"], invoice["taxCents"], invoice["totalCents"]) == (150, 0, 150)
    assert [(li["kind"], li["amountCents"]) for li in invoice["lineItems"]] == [("PLATFORM_FEE", 150)]
    assert "Translate the FAQ" in invoice["lineItems"][0]["description"]
    # The job payment's receipt: the second receipt of the requester (the first is the top-up's).
    assert receipt["number"] == number("RCT", 2) and receipt["totalCents"] == 1150
    assert [(li["kind"], li["amountCents"]) for li in receipt["lineItems"]] == [
        ("JOB_PAY", 1000),
        ("PLATFORM_FEE", 150),
    ]
    assert receipt["metadata"]["invoiceNumber"] == invoice["number"]
    for doc in (invoice, receipt):
        assert (doc["transactionId"], doc["ledgerEntryId"]) == (txn.id, entry_id)
        assert (doc["bountyId"], doc["bountyPaymentId"], doc["sourceId"]) == (job_id, "jpy_1", "jpy_1")
        assert doc["paymentStatus"] == "PAID" and doc["metadata"]["workerAgentId"] == worker.id
        assert "workerOwnerId" not in doc["metadata"]  # the other party's owner stays inside
    # The worker's owner is not billed: no document of theirs.
    assert await docs(worker_owner) == []


async def test_an_award_without_a_fee_issues_the_receipt_only(app: Any, core: Core) -> None:
    requester = await new_owner(app, core)
    job_id, worker_owner, worker = await paid_job(app, core, requester, pay=800, fee=0)
    await capture(core, requester, worker_owner, worker, job_id, 800, 0, "jpy_2")
    kinds = [(d["kind"], d["totalCents"]) for d in await docs(requester)]
    assert sorted(kinds) == [("RECEIPT", 800), ("RECEIPT", 800)]  # the top-up's and the job payment's


async def test_released_escrow_issues_a_credit_note(app: Any, core: Core) -> None:
    requester = await new_owner(app, core)
    job_id, _, _ = await paid_job(app, core, requester, pay=1000, fee=150, title="Label 50 images")
    async with core.uow() as uow:
        txn = await ledger.release(
            uow.session,
            user_id=requester.user_id,
            amount_cents=1150,
            job_id=job_id,
            metadata={"payCents": 1000, "feeCents": 150, "jobPaymentId": "jpy_3"},
        )
    (note,) = await docs(requester, kind="CREDIT_NOTE")
    entry_id, amount = await owner_entry(core, txn.id, AccountKind.OWNER_AVAILABLE, requester.user_id)
    assert amount == 1150 and (note["ledgerEntryId"], note["transactionId"]) == (entry_id, txn.id)
    assert note["number"] == number("CRN", 1) and note["totalCents"] == 1150
    assert (note["paymentStatus"], note["refundStatus"]) == ("CREDITED", "REFUNDED")
    assert (note["bountyId"], note["bountyPaymentId"], note["sourceType"]) == (job_id, "jpy_3", "JOB_RELEASE")
    assert [(li["kind"], li["amountCents"]) for li in note["lineItems"]] == [
        ("JOB_PAY", 1000),
        ("PLATFORM_FEE", 150),
    ]
    assert "Label 50 images" in note["lineItems"][0]["description"]

    # A release that does not split the amount is one line for the whole escrow.
    other, _, _ = await paid_job(app, core, requester, pay=300, fee=0)
    async with core.uow() as uow:
        await ledger.release(uow.session, user_id=requester.user_id, amount_cents=300, job_id=other)
    newest = (await docs(requester, kind="CREDIT_NOTE"))[0]
    assert newest["number"] == number("CRN", 2)
    assert [(li["kind"], li["amountCents"]) for li in newest["lineItems"]] == [("ESCROW", 300)]


async def test_a_refund_and_staff_adjustments_issue_credit_notes_and_invoices(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await top_up(core, owner.user_id, 5000)
    async with core.uow() as uow:
        refund = await ledger.refund(
            uow.session, user_id=owner.user_id, amount_cents=1200, processor_ref="re_1"
        )
        credit = await ledger.adjust(
            uow.session, user_id=owner.user_id, amount_cents=300, key="adjust:a1", reason="Goodwill credit"
        )
        debit = await ledger.adjust(
            uow.session, user_id=owner.user_id, amount_cents=-200, key="adjust:a2", reason="Chargeback fee"
        )
    by_txn = {d["transactionId"]: d for d in await docs(owner)}
    r = by_txn[refund.id]
    assert (r["kind"], r["totalCents"], r["processorRef"], r["sourceId"]) == (
        "CREDIT_NOTE",
        1200,
        "re_1",
        "re_1",
    )
    assert (r["refundStatus"], r["metadata"]["creditedTo"]) == ("REFUNDED", "CARD")
    c, d = by_txn[credit.id], by_txn[debit.id]
    assert (c["kind"], c["totalCents"], c["paymentStatus"], c["number"]) == (
        "CREDIT_NOTE",
        300,
        "CREDITED",
        number("CRN", 2),
    )
    assert (d["kind"], d["totalCents"], d["paymentStatus"], d["number"]) == (
        "INVOICE",
        200,
        "PAID",
        number("INV", 1),
    )
    assert d["metadata"]["reason"] == "Chargeback fee" and "staffUserId" not in d["metadata"]
    assert (await owner_entry(core, debit.id, AccountKind.OWNER_AVAILABLE, owner.user_id))[0] == d[
        "ledgerEntryId"
    ]


async def test_a_replayed_posting_issues_nothing_new(app: Any, core: Core) -> None:
    requester = await new_owner(app, core)
    first = await top_up(core, requester.user_id, 700, ref="pi_same")
    again = await top_up(core, requester.user_id, 700, ref="pi_same")
    assert again.id == first.id
    job_id, worker_owner, worker = await paid_job(app, core, requester, pay=500, fee=50)
    await capture(core, requester, worker_owner, worker, job_id, 500, 50, "jpy_r")
    await capture(core, requester, worker_owner, worker, job_id, 500, 50, "jpy_r")
    numbers = sorted(d["number"] for d in await docs(requester))
    assert numbers == [number("INV", 1), number("RCT", 1), number("RCT", 2), number("RCT", 3)]


async def test_a_posting_that_rolls_back_takes_its_document_and_number_with_it(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            await ledger.top_up(uow.session, user_id=owner.user_id, amount_cents=900, processor_ref="pi_gone")
            raise RuntimeError("the caller failed after posting")
    assert await docs(owner) == []
    await top_up(core, owner.user_id, 100)
    assert [d["number"] for d in await docs(owner)] == [number("RCT", 1)]


async def test_numbering_is_gapless_and_unique_under_20_concurrent_postings(app: Any, core: Core) -> None:
    users = [new_id("usr") for _ in range(20)]  # ledger-only users: documents without a counterparty

    async def one(i: int) -> bool:
        try:
            async with core.uow() as uow:
                await ledger.top_up(
                    uow.session, user_id=users[i], amount_cents=100 + i, processor_ref=f"pi_c{i}"
                )
                if i % 5 == 0:
                    raise RuntimeError("rolled back after posting")
        except RuntimeError:
            return False
        return True

    outcomes = await asyncio.gather(*(one(i) for i in range(20)))
    committed = outcomes.count(True)
    assert committed == 16
    async with core.uow(write=False) as uow:
        rows = (await uow.session.scalars(select(CommercialDocument))).all()
        counter = await uow.session.get(DocumentCounter, ("RECEIPT", clock.now().year))
    assert sorted(r.number for r in rows) == [number("RCT", n) for n in range(1, committed + 1)]
    assert {r.owner_user_id for r in rows} == {u for u, ok in zip(users, outcomes, strict=True) if ok}
    assert all(r.counterparty_email is None for r in rows)
    assert counter is not None and counter.last_number == committed


async def test_one_statement_numbers_several_documents_in_order_and_gapless_under_concurrency(
    app: Any, core: Core
) -> None:
    invoice, receipt = DocumentKind.INVOICE, DocumentKind.RECEIPT
    async with core.uow() as uow:
        first = await next_numbers(uow.session, [receipt, invoice, receipt], clock.now())
    assert first == [number("RCT", 1), number("INV", 1), number("RCT", 2)]

    async def one(i: int) -> list[str] | None:  # an award's pair; every third transaction rolls back
        try:
            async with core.uow() as uow:
                got = await next_numbers(uow.session, [invoice, receipt], clock.now())
                if i % 3 == 0:
                    raise RuntimeError("rolled back after numbering")
        except RuntimeError:
            return None
        return got

    kept = [pair for pair in await asyncio.gather(*(one(i) for i in range(12))) if pair]
    assert len(kept) == 8
    assert sorted(pair[0] for pair in kept) == [number("INV", n) for n in range(2, 10)]
    assert sorted(pair[1] for pair in kept) == [number("RCT", n) for n in range(3, 11)]


async def test_issued_documents_are_immutable(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await top_up(core, owner.user_id, 400)
    with pytest.raises(ImmutableDocument):
        async with core.uow() as uow:
            row = (await uow.session.scalars(select(CommercialDocument))).one()
            row.total_cents = 1
            await uow.session.flush()
    with pytest.raises(DBAPIError, match="immutable"):
        async with core.uow() as uow:
            await uow.session.execute(text("UPDATE commercial_documents SET total_cents = 1"))
    (doc,) = await docs(owner)
    assert doc["totalCents"] == 400


# --- reading: list, get, isolation, keys, MCP ------------------------------------------------------------


async def test_the_list_pages_newest_first_with_a_stable_cursor_and_a_kind_filter(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    for i in range(5):
        await top_up(core, owner.user_id, 1000 + i)
    async with core.uow() as uow:
        for i in range(3):
            await ledger.adjust(
                uow.session, user_id=owner.user_id, amount_cents=-(10 + i), key=f"adjust:l{i}", reason="fee"
            )
    everything = await docs(owner, limit=100)
    assert len(everything) == 8
    order = [(d["issuedAt"], d["id"]) for d in everything]
    assert order == sorted(order, reverse=True)

    first = await owner.client.get("/me/billing/documents", params={"limit": 3})
    assert first.status_code == 200 and len(first.json()["documents"]) == 3
    cursor = first.json()["nextCursor"]
    assert cursor
    # A document issued after the first page never shifts the next pages.
    await top_up(core, owner.user_id, 99)
    rest = []
    while cursor:
        page = (await owner.client.get("/me/billing/documents", params={"limit": 3, "cursor": cursor})).json()
        rest.extend(page["documents"])
        cursor = page["nextCursor"]
    assert [d["id"] for d in first.json()["documents"] + rest] == [d["id"] for d in everything]
    # Default page size is 20; the newest document leads.
    fresh = (await owner.client.get("/me/billing/documents")).json()
    assert len(fresh["documents"]) == 9 and fresh["nextCursor"] is None
    assert fresh["documents"][0]["totalCents"] == 99

    invoices = await docs(owner, kind="INVOICE", limit=2)
    assert len(invoices) == 3 and {d["kind"] for d in invoices} == {"INVOICE"}
    receipts = await docs(owner, kind="RECEIPT")
    assert sorted(d["totalCents"] for d in receipts) == [99, 1000, 1001, 1002, 1003, 1004]

    for bad in ({"kind": "BILL"}, {"limit": 0}, {"limit": 101}, {"cursor": "not-a-cursor"}):
        r = await owner.client.get("/me/billing/documents", params=bad)
        assert r.status_code == 422, (bad, r.text)


async def test_an_owner_gets_their_document_and_another_owners_is_a_404(app: Any, core: Core) -> None:
    a, b = await new_owner(app, core), await new_owner(app, core)
    await top_up(core, a.user_id, 1234)
    await top_up(core, b.user_id, 55)
    (mine,) = await docs(a)
    r = await a.client.get(f"/me/billing/documents/{mine['id']}")
    assert r.status_code == 200, r.text
    assert r.json() == mine
    theirs = await b.client.get(f"/me/billing/documents/{mine['id']}")
    assert theirs.status_code == 404 and theirs.json()["code"] == "document_not_found"
    missing = await a.client.get("/me/billing/documents/doc_doesnotexist")
    assert missing.status_code == 404 and missing.json()["code"] == "document_not_found"
    assert [d["totalCents"] for d in await docs(b)] == [55]


async def test_a_document_renders_as_a_printable_page_for_a_browser(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await top_up(core, owner.user_id, 1234)
    (doc,) = await docs(owner)
    r = await owner.client.get(
        f"/me/billing/documents/{doc['id']}", headers={"Accept": "text/html,*/*;q=0.8"}
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert doc["number"] in r.text and "12.34 USD" in r.text and "Balance top-up" in r.text
    assert r.headers["cache-control"] == "no-store"


async def test_an_agents_key_and_mcp_list_the_owners_documents(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    await top_up(core, owner.user_id, 700)
    async with core.uow() as uow:
        await ledger.adjust(uow.session, user_id=owner.user_id, amount_cents=-5, key="adjust:k", reason="fee")
    by_session = (await owner.client.get("/me/billing/documents")).json()
    async with new_client(app) as c:
        by_key = await c.get("/me/billing/documents/api-key", headers=agent.h)
        assert by_key.status_code == 200, by_key.text
        assert by_key.json() == by_session
        invoices = await c.get("/me/billing/documents/api-key", params={"kind": "INVOICE"}, headers=agent.h)
        assert [d["totalCents"] for d in invoices.json()["documents"]] == [5]
    async with serving(core) as url, http_client(url, agent.key) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert "billing_documents" in tools and tools["billing_documents"].output_schema is not None
        assert await call(mcp, "billing_documents") == by_session
        page = await call(mcp, "billing_documents", kind="RECEIPT", limit=1)
        assert [d["totalCents"] for d in page["documents"]] == [700]


async def test_an_unclaimed_agents_key_is_refused_with_agent_not_claimed(app: Any, core: Core) -> None:
    async with new_client(app) as c:
        key = (await register_agent(c))["apiKey"]
        r = await c.get("/me/billing/documents/api-key", headers=key_headers(key))
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "agent_not_claimed"
    async with serving(core) as url, http_client(url, key) as mcp:
        assert (await call_error(mcp, "billing_documents"))["code"] == "agent_not_claimed"


# --- reconciliation ---------------------------------------------------------------------------------------


async def test_a_users_documents_reconcile_with_their_ledger_entries(app: Any, core: Core) -> None:
    requester = await new_owner(app, core)
    await top_up(core, requester.user_id, 10_000)
    job_a, worker_owner, worker = await paid_job(app, core, requester, pay=1000, fee=100)
    await capture(core, requester, worker_owner, worker, job_a, 1000, 100, "jpy_a")
    job_b, _, _ = await paid_job(app, core, requester, pay=2000, fee=0)
    await capture(core, requester, worker_owner, worker, job_b, 2000, 0, "jpy_b")
    job_c, _, _ = await paid_job(app, core, requester, pay=400, fee=40)
    async with core.uow() as uow:
        await ledger.release(uow.session, user_id=requester.user_id, amount_cents=440, job_id=job_c)
        await ledger.refund(uow.session, user_id=requester.user_id, amount_cents=500, processor_ref="re_x")
        await ledger.adjust(
            uow.session, user_id=requester.user_id, amount_cents=70, key="adjust:r1", reason="x"
        )
        await ledger.adjust(
            uow.session, user_id=requester.user_id, amount_cents=-30, key="adjust:r2", reason="y"
        )

    async with core.uow(write=False) as uow:
        rows = (
            await uow.session.execute(
                select(
                    LedgerTransaction.kind,
                    LedgerAccount.kind.label("account"),
                    LedgerEntry.amount_cents,
                    LedgerTransaction.meta,
                )
                .join(LedgerEntry, LedgerEntry.transaction_id == LedgerTransaction.id)
                .join(LedgerAccount, LedgerAccount.id == LedgerEntry.account_id)
                .where(LedgerAccount.holder_id == requester.user_id)
            )
        ).all()

    def ledger_sum(kind: str, account: AccountKind, sign: int = 1) -> int:
        return sum(sign * int(r.amount_cents) for r in rows if r.kind == kind and r.account == account)

    documents = await docs(requester, limit=100)

    def doc_sum(kind: str, source: str, only: str | None = None) -> int:
        return sum(
            d["totalCents"]
            for d in documents
            if d["kind"] == kind
            and d["sourceType"] == source
            and (only is None or d["metadata"].get("reason") == only)
        )

    available = AccountKind.OWNER_AVAILABLE
    assert doc_sum("RECEIPT", "TOPUP") == ledger_sum("TOPUP", available) == 10_000 + 1100 + 2000 + 440
    assert doc_sum("RECEIPT", "JOB_PAYMENT") == ledger_sum("CAPTURE", AccountKind.OWNER_RESERVED, -1) == 3100
    fees = sum(
        int(r.meta["feeCents"])
        for r in rows
        if r.kind == "CAPTURE" and r.account == AccountKind.OWNER_RESERVED
    )
    assert doc_sum("INVOICE", "JOB_PAYMENT") == fees == 100
    assert doc_sum("CREDIT_NOTE", "JOB_RELEASE") == ledger_sum("RELEASE", available) == 440
    assert doc_sum("CREDIT_NOTE", "REFUND") == ledger_sum("REFUND", available, -1) == 500
    credits = sum(int(r.amount_cents) for r in rows if r.kind == "ADJUSTMENT" and r.amount_cents > 0)
    debits = -sum(int(r.amount_cents) for r in rows if r.kind == "ADJUSTMENT" and r.amount_cents < 0)
    assert (
        (doc_sum("CREDIT_NOTE", "ADJUSTMENT"), doc_sum("INVOICE", "ADJUSTMENT"))
        == (credits, debits)
        == (70, 30)
    )
    # Every document's total is its ledger entry's amount, but the fee invoice (a part of the capture).
    entries = {}
    async with core.uow(write=False) as uow:
        for d in documents:
            entries[d["id"]] = abs(
                int(
                    await uow.session.scalar(
                        select(LedgerEntry.amount_cents).where(LedgerEntry.id == d["ledgerEntryId"])
                    )
                    or 0
                )
            )
    for d in documents:
        if not (d["kind"] == "INVOICE" and d["sourceType"] == "JOB_PAYMENT"):
            assert d["totalCents"] == entries[d["id"]], d
