"""Helpers for the money tests that go through the payment processor: deliver the sandbox's webhook events
through the app (as the worker does), save a card and pay a checkout through the sandbox's hosted pages
the way a browser would (GET the page, POST its form from the page's origin); paid jobs' builders (a funded
buyer, a draft, a job brought to review) and what they read back (an owner's money, a job's postings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import select, update

from callboard_core import worker
from callboard_core.billing import cards
from callboard_core.container import Core
from callboard_core.documents.models import CommercialDocument, SourceType
from callboard_core.ids import new_id
from callboard_core.ledger import accounts
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import AccountKind, LedgerTransaction
from callboard_core.processor import webhooks
from callboard_core.processor.sandbox import CARD_OK, SandboxProcessor
from callboard_core.processor.sandbox.delivery import deliver_pending
from callboard_core.processor.sandbox.models import SandboxEvent
from tests.conftest import BASE_URL, ORIGIN, new_client
from tests.jobs_helpers import AgentHandle, Owner, job_body, new_agent, new_owner, to_review

RETURN_URL = f"{BASE_URL}/?paid=1"


def sandbox(core: Core) -> SandboxProcessor:
    assert isinstance(core.processor, SandboxProcessor)
    return core.processor


async def deliver(app: Any, core: Core) -> int:
    """Deliver the sandbox's pending webhook events to /webhooks/processor through the app."""
    async with new_client(app) as client:
        return await deliver_pending(core.processor, core.settings, client)


async def worker_pass(app: Any, core: Core) -> None:
    """One background pass as `callboard serve` runs it (sweeper, payouts due, the sandbox's webhook events),
    its deliveries reaching /webhooks/processor through the app."""
    async with new_client(app) as client:
        await worker.run_once(core, housekeeping=False, webhook_client=client)


async def redeliver_all(app: Any, core: Core) -> int:
    """Every event the sandbox ever sent, delivered again (as a processor retrying would)."""
    async with core.db.session(write=True) as session, session.begin():
        await session.execute(update(SandboxEvent).values(delivered_at=None))
    return await deliver(app, core)


async def post_event(client: httpx.AsyncClient, body: bytes, secret: str) -> httpx.Response:
    return await client.post(
        "/webhooks/processor",
        content=body,
        headers={"Content-Type": "application/json", webhooks.SIGNATURE_HEADER: webhooks.sign(body, secret)},
    )


def browser(app: Any) -> httpx.AsyncClient:
    """The owner's browser on the processor's hosted page: no session needed, the page's own origin."""
    client = new_client(app)
    client.headers.update(ORIGIN)
    return client


async def submit_page(app: Any, url: str, card: str | None = CARD_OK) -> httpx.Response:
    """GET a hosted page, then POST its form (with a card number, or the action page's button)."""
    path = url.removeprefix(BASE_URL)
    async with browser(app) as page:
        shown = await page.get(path)
        assert shown.status_code == 200, shown.text
        assert 'method="post"' in shown.text
        data = {"card_number": card} if card is not None else {}
        return await page.post(path, data=data)


async def add_card(owner: Owner, app: Any, core: Core, card: str = CARD_OK) -> dict[str, Any]:
    """Save a card through the hosted form and deliver the events; returns the owner's BuyerBalance."""
    started = await owner.client.post("/me/billing/payment-methods")
    assert started.status_code == 200, started.text
    done = await submit_page(app, started.json()["url"], card)
    assert done.status_code == 303, done.text
    await deliver(app, core)
    balance = await owner.client.get("/me/billing")
    assert balance.status_code == 200, balance.text
    return dict(balance.json())


# --- paid jobs -----------------------------------------------------------------------------------------


@dataclass
class Buyer:
    owner: Owner
    agent: AgentHandle


async def buyer(app: Any, core: Core, *, limit: int = 1_000_000, funds: int = 10_000) -> Buyer:
    """An owner with a requester agent allowed to publish up to `limit` cents alone, funded with `funds`."""
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    r = await owner.client.patch(
        f"/api/v2/agents/dashboard/{agent.id}/policy", json={"autoPublishLimitCents": limit}
    )
    assert r.status_code == 200, r.text
    if funds:
        await fund(core, owner.user_id, funds)
    return Buyer(owner, agent)


async def fund(core: Core, user_id: str, cents: int) -> None:
    async with core.uow() as uow:
        await ledger.top_up(uow.session, user_id=user_id, amount_cents=cents, processor_ref=new_id("pi"))


async def draft(client: httpx.AsyncClient, b: Buyer, reward: int, **overrides: Any) -> str:
    r = await client.post(
        "/api/v2/jobs", json=job_body(rewardAmountCents=reward, **overrides), headers=b.agent.h
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def publish_and_award(client: httpx.AsyncClient, b: Buyer, job_id: str, worker: AgentHandle) -> None:
    """The buyer's draft published (its escrow held), the worker's submission brought to review and awarded."""
    published = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
    assert published.status_code == 200, published.text
    submission = await to_review(client, job_id, b.agent, worker)
    won = await client.post(
        f"/api/v2/jobs/{job_id}/award", json={"submissionId": submission}, headers=b.agent.h
    )
    assert won.status_code == 200, won.text


async def money(core: Core, user_id: str) -> tuple[int, int, int]:
    """(available, reserved, payable) of an owner."""
    async with core.uow(write=False) as uow:
        b = await ledger.balances(uow.session, user_id)
    return b.available_cents, b.reserved_cents, b.payable_cents


async def platform_fees(core: Core) -> int:
    async with core.uow() as uow:
        return (await accounts.platform(uow.session, AccountKind.PLATFORM_FEES)).balance_cents


async def kinds_for(core: Core, job_id: str) -> list[str]:
    async with core.uow(write=False) as uow:
        rows = await uow.session.scalars(
            select(LedgerTransaction.kind)
            .where(LedgerTransaction.job_id == job_id)
            .order_by(LedgerTransaction.id)
        )
        return sorted(str(k) for k in rows)


async def save_card(core: Core, owner: Owner, card: str = "4242424242424242", *, amount: int = 2000) -> None:
    """The owner's default card, saved through the product's own path (the owner's processor customer, a
    card setup completed with `card`, the confirm route), and auto top-up on (threshold 0, `amount`)."""
    p = core.processor
    assert isinstance(p, SandboxProcessor)
    setup = await cards.begin_card_setup(p, core, core.settings, owner.user_id)
    outcome = await p.complete_card_setup(setup.id, card)
    assert outcome.status == "complete" and outcome.payment_method
    r = await owner.client.post(
        "/me/billing/payment-methods/confirm", json={"paymentMethodId": outcome.payment_method}
    )
    assert r.status_code == 200, r.text
    r = await owner.client.patch(
        "/me/billing/autotopup", json={"enabled": True, "thresholdCents": 0, "amountCents": amount}
    )
    assert r.status_code == 200, r.text


async def start_topup(owner: Owner, amount: int = 2500, key: str | None = None) -> dict[str, Any]:
    """`POST /me/billing/topup`: the hosted checkout to pay (`url`, `sessionId`, `topupId`)."""
    headers = {"Idempotency-Key": key} if key else {}
    r = await owner.client.post(
        "/me/billing/topup", json={"amountCents": amount, "returnUrl": RETURN_URL}, headers=headers
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


async def walk(
    client: httpx.AsyncClient, path: str, field: str, limit: int, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Every item of a cursor-paged list (`field` and `nextCursor`), `limit` per page."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        r = await client.get(path, params=params, headers=headers)
        assert r.status_code == 200, r.text
        found.extend(r.json()[field])
        cursor = r.json()["nextCursor"]
        if cursor is None:
            return found


async def award_documents(core: Core, job_id: str) -> dict[str, tuple[str, int, str | None]]:
    """The job's award documents (its capture's invoice and receipt), by kind: (number, total cents, the
    invoice number a receipt names)."""
    async with core.uow(write=False) as uow:
        documents = await uow.session.scalars(
            select(CommercialDocument).where(
                CommercialDocument.job_id == job_id, CommercialDocument.source_type == SourceType.JOB_PAYMENT
            )
        )
        return {d.kind: (d.number, d.total_cents, d.meta.get("invoiceNumber")) for d in documents}
