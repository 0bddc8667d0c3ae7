"""Helpers for the money tests that go through the payment processor: deliver the sandbox's webhook events
through the app (as the worker does), save a card and pay a checkout through the sandbox's hosted pages
the way a browser would (GET the page, POST its form from the page's origin)."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import update

from callboard_core import worker
from callboard_core.container import Core
from callboard_core.processor import webhooks
from callboard_core.processor.delivery import deliver_pending
from callboard_core.processor.models import SandboxEvent
from callboard_core.processor.sandbox import CARD_OK, SandboxProcessor
from tests.conftest import BASE_URL, ORIGIN, new_client
from tests.jobs_helpers import Owner

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
