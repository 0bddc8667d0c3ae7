"""Builders for the payout and setup-link tests: the sandbox's webhook events handed to the real handlers,
an award's capture posted through the ledger, onboarding through the sandbox's hosted page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import func, select

from callboard_core import bus
from callboard_core.container import Core
from callboard_core.ids import new_id
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerTransaction, TransactionKind
from callboard_core.payouts.models import Payout
from callboard_core.processor import ProcessorEvent
from callboard_core.processor.sandbox import SandboxProcessor, mark_delivered, pending_events
from callboard_core.processor.sandbox.models import SandboxObject
from callboard_core.processor.translate import fact_of
from tests.conftest import BASE_URL
from tests.jobs_helpers import Owner

RETURN = BASE_URL + "/done"  # a page on this site: hosted pages return nowhere else


def sandbox(core: Core) -> SandboxProcessor:
    assert isinstance(core.processor, SandboxProcessor)
    return core.processor


async def deliver(core: Core) -> list[ProcessorEvent]:
    """Every pending sandbox event, signed and verified as a webhook would be, then published as our own
    fact on the core's bus in a unit of work of its own (what `POST /webhooks/processor` does)."""
    processor = sandbox(core)
    async with core.db.session(write=False) as session:
        events = await pending_events(session)
    parsed: list[ProcessorEvent] = []
    for event in events:
        body, header = processor.signed(event)
        verified = processor.parse_event(body, header)
        await handle(core, verified)
        async with core.uow() as uow:
            await mark_delivered(uow.session, event.id)
        parsed.append(verified)
    return parsed


async def handle(core: Core, event: ProcessorEvent) -> None:
    fact = fact_of(event)
    if fact is not None:
        async with core.uow() as uow:
            await bus.publish(uow.session, fact)


async def award(
    core: Core,
    requester_id: str,
    worker_owner_id: str,
    worker_agent_id: str | None,
    *,
    pay: int = 1_000,
    fee: int = 100,
) -> str:
    """A paid job's money from top-up to capture (the award), through the ledger. Returns the job id."""
    job_id = new_id("job")
    async with core.uow() as uow:
        await ledger.top_up(
            uow.session, user_id=requester_id, amount_cents=pay + fee, processor_ref=new_id("pi")
        )
        await ledger.reserve(uow.session, user_id=requester_id, amount_cents=pay + fee, job_id=job_id)
        await ledger.capture(
            uow.session,
            requester_user_id=requester_id,
            worker_owner_user_id=worker_owner_id,
            pay_cents=pay,
            fee_cents=fee,
            job_id=job_id,
            metadata={"workerAgentId": worker_agent_id, "jobPaymentId": "jpy_test"},
        )
    return job_id


async def onboard_through_setup_link(owner: httpx.AsyncClient, url: str) -> httpx.Response:
    """The signed-in owner opens an agent's setup link, starts it and completes the processor's page."""
    path = urlsplit(url).path
    assert (await owner.get(path)).status_code == 200
    started = await owner.post(path)
    assert started.status_code == 303, started.text
    return await onboard_through_page(owner, started.headers["location"])


async def onboard_through_page(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """The owner opens the sandbox's hosted onboarding page and submits it; the redirect is returned."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    page = await client.get(target)
    assert page.status_code == 200, page.text
    assert "<form" in page.text
    submitted = await client.post(target)
    assert submitted.status_code == 303, submitted.text
    return submitted


async def sandbox_count(core: Core, kind: str) -> int:
    async with core.db.session(write=False) as session:
        return int(
            await session.scalar(
                select(func.count()).select_from(SandboxObject).where(SandboxObject.type == kind)
            )
            or 0
        )


async def balances(core: Core, user_id: str) -> dict[str, Any]:
    async with core.uow(write=False) as uow:
        return (await ledger.balances(uow.session, user_id)).model_dump()


async def onboard_owner(owner: Owner, core: Core) -> str:
    """The owner's own payout account, onboarded through the sandbox page; its account id."""
    link = await owner.client.post("/me/processor/onboarding-link", json={"returnUrl": RETURN})
    assert link.status_code == 200, link.text
    back = await onboard_through_page(owner.client, link.json()["url"])
    assert back.headers["location"] == RETURN
    await deliver(core)
    return str(link.json()["processorAccountId"])


async def payout_rows(core: Core, user_id: str) -> list[Payout]:
    async with core.uow(write=False) as uow:
        rows = await uow.session.scalars(
            select(Payout).where(Payout.user_id == user_id).order_by(Payout.created_at)
        )
        return list(rows)


async def count_kind(core: Core, kind: TransactionKind) -> int:
    async with core.uow(write=False) as uow:
        return int(
            await uow.session.scalar(
                select(func.count()).select_from(LedgerTransaction).where(LedgerTransaction.kind == kind)
            )
            or 0
        )
