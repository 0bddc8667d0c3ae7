"""One contract for the PaymentProcessor port, run against both adapters: the sandbox (on SQLite and
PostgreSQL, through the `core` fixture) and the Stripe adapter (the real SDK against `tests/fake_stripe.py`).

A harness gives each adapter the same levers: the customer's side of the hosted pages (card form,
checkout, onboarding), the webhook deliveries the processor would make (body and Stripe-Signature), and
how many objects of a kind the processor holds. Every event goes through `processor.parse_event`, the one
webhook code path of both adapters.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import stripe
from sqlalchemy import func, select

from callboard_core import metrics
from callboard_core.config import Settings
from callboard_core.container import Core
from callboard_core.errors import BadRequest, Conflict, NotFound
from callboard_core.processor import PaymentProcessor, ProcessorEvent, ProcessorUnavailable, build_processor
from callboard_core.processor import sandbox as sandbox_module
from callboard_core.processor.sandbox import (
    CARD_DECLINED,
    CARD_DECLINED_AFTER_ATTACH,
    CARD_OK,
    CARD_REQUIRES_ACTION,
    SandboxProcessor,
)
from callboard_core.processor.sandbox.models import SandboxEvent, SandboxObject
from callboard_core.processor.stripe_adapter import StripeProcessor
from callboard_core.processor.webhooks import sign
from tests import fake_stripe
from tests.conftest import make_settings
from tests.netutil import free_port

RETURN = "https://app.example/billing/return"


@pytest.fixture(scope="module")
def fake() -> Iterator[fake_stripe.FakeStripe]:
    yield from fake_stripe.serve()


@dataclass
class Harness:
    kind: str
    processor: PaymentProcessor
    complete_card_setup: Callable[[str, str], Awaitable[None]]
    complete_checkout: Callable[[str, str], Awaitable[None]]
    complete_onboarding: Callable[[str], Awaitable[None]]
    deliveries: Callable[[], Awaitable[list[tuple[bytes, str]]]]
    count: Callable[[str], Awaitable[int]]
    secret: str

    async def events(self) -> list[ProcessorEvent]:
        """Every event delivered since the last call, parsed by the adapter's own parse_event."""
        return [self.processor.parse_event(body, header) for body, header in await self.deliveries()]

    async def event(self, event_type: str) -> ProcessorEvent:
        found = [e for e in await self.events() if e.type == event_type]
        assert len(found) == 1, f"expected one {event_type}"
        return found[0]


def sandbox_harness(core: Core) -> Harness:
    processor = core.processor
    assert isinstance(processor, SandboxProcessor)

    async def deliveries() -> list[tuple[bytes, str]]:
        async with core.db.session(write=True) as session, session.begin():
            events = await sandbox_module.pending_events(session, 1000)
            for event in events:
                await sandbox_module.mark_delivered(session, event.id)
        return [processor.signed(event) for event in events]

    async def count(kind: str) -> int:
        async with core.db.session(write=False) as session:
            return int(
                await session.scalar(
                    select(func.count()).select_from(SandboxObject).where(SandboxObject.type == kind)
                )
                or 0
            )

    async def setup(setup_id: str, card: str) -> None:
        assert (await processor.complete_card_setup(setup_id, card)).status == "complete"

    async def checkout(checkout_id: str, card: str) -> None:
        assert (await processor.complete_checkout(checkout_id, card)).status == "complete"

    async def onboarding(account_id: str) -> None:
        await processor.complete_onboarding(account_id)

    return Harness(
        "sandbox", processor, setup, checkout, onboarding, deliveries, count, processor.webhook_secret
    )


def stripe_settings(fake: fake_stripe.FakeStripe, tmp_root: Path) -> Settings:
    return make_settings(
        f"sqlite+aiosqlite:///{tmp_root / 'unused.db'}",
        tmp_root,
        processor="stripe",
        stripe_secret_key=fake_stripe.SECRET_KEY,
        stripe_webhook_secret=fake_stripe.WEBHOOK_SECRET,
        stripe_api_base=fake.url,
    )


def stripe_harness(fake: fake_stripe.FakeStripe, processor: PaymentProcessor) -> Harness:
    fake.reset()  # a clean slate: the server lives for the module, each test starts empty

    async def setup(setup_id: str, card: str) -> None:
        fake.complete_card_setup(setup_id, card)

    async def checkout(checkout_id: str, card: str) -> None:
        fake.complete_checkout(checkout_id, card)

    async def onboarding(account_id: str) -> None:
        fake.complete_onboarding(account_id)

    async def deliveries() -> list[tuple[bytes, str]]:
        return fake.take_events()

    async def count(kind: str) -> int:
        return fake.count(kind)

    return Harness(
        "stripe", processor, setup, checkout, onboarding, deliveries, count, fake_stripe.WEBHOOK_SECRET
    )


@pytest.fixture
async def stripe_processor(fake: fake_stripe.FakeStripe, tmp_root: Path) -> AsyncIterator[StripeProcessor]:
    processor = build_processor(stripe_settings(fake, tmp_root), db=None)  # type: ignore[arg-type]
    assert isinstance(processor, StripeProcessor)
    try:
        yield processor
    finally:
        await processor.aclose()


@pytest.fixture(params=["sandbox", "stripe"])
def h(request: pytest.FixtureRequest, database_url: str) -> Harness:
    """The adapter under contract (sync, so it may pull the async fixtures it needs by name)."""
    if request.param == "sandbox":
        return sandbox_harness(request.getfixturevalue("core"))
    if not database_url.startswith("sqlite"):
        pytest.skip("the Stripe adapter keeps nothing in our database: one run is enough")
    return stripe_harness(request.getfixturevalue("fake"), request.getfixturevalue("stripe_processor"))


async def customer(h: Harness, n: str = "1") -> str:
    return await h.processor.create_customer(
        f"usr_{n}", f"owner{n}@example.com", idempotency_key=f"customer:usr_{n}"
    )


async def saved_card(h: Harness, customer_id: str, card: str = CARD_OK, key: str = "setup:1") -> str:
    setup = await h.processor.create_card_setup(customer_id, RETURN, idempotency_key=key)
    await h.complete_card_setup(setup.id, card)
    attached = [e for e in await h.events() if e.type == "payment_method.attached"]
    assert len(attached) == 1
    return str(attached[0].data["id"])


async def onboarded_account(h: Harness, ref: str = "usr_w") -> str:
    account_id = await h.processor.create_connect_account(
        ref, f"{ref}@example.com", idempotency_key=f"acct:{ref}"
    )
    await h.complete_onboarding(account_id)
    await h.events()
    return account_id


# Customers and cards -----------------------------------------------------------------------------------


async def test_customer_is_created_once_per_key(h: Harness) -> None:
    first = await customer(h)
    again = await customer(h)
    assert first == again and first.startswith("cus_")
    assert await h.count("customer") == 1
    other = await customer(h, "2")
    assert other != first and await h.count("customer") == 2


async def test_card_setup_completion_attaches_a_card_that_reads_back(h: Harness) -> None:
    customer_id = await customer(h)
    setup = await h.processor.create_card_setup(customer_id, RETURN, idempotency_key="setup:1")
    assert setup.url.startswith("http") and setup.id.startswith("cs_")
    assert await h.processor.create_card_setup(customer_id, RETURN, idempotency_key="setup:1") == setup
    await h.complete_card_setup(setup.id, CARD_OK)
    events = {e.type: e for e in await h.events()}
    assert {"payment_method.attached", "setup_intent.succeeded"} <= set(events)
    attached = events["payment_method.attached"]
    assert attached.data["customer"] == customer_id
    assert events["setup_intent.succeeded"].data["payment_method"] == attached.data["id"]
    info = await h.processor.payment_method(attached.data["id"])
    assert (info.id, info.type, info.brand, info.last4) == (attached.data["id"], "card", "visa", "4242")
    assert isinstance(info.exp_month, int) and isinstance(info.exp_year, int)
    assert info.customer_id == customer_id

    await h.processor.detach_payment_method(info.id)
    assert (await h.event("payment_method.detached")).data["customer"] is None
    assert (await h.processor.payment_method(info.id)).customer_id is None


# Payments ------------------------------------------------------------------------------------------------


async def test_checkout_completion_reports_amount_and_metadata(h: Harness) -> None:
    customer_id = await customer(h)
    metadata = {"topup_id": "top_1", "user_id": "usr_1"}
    checkout = await h.processor.create_checkout(
        customer_id, 2_500, "usd", RETURN, metadata, idempotency_key="checkout:top_1"
    )
    assert checkout.id.startswith("cs_") and checkout.url.startswith("http")
    again = await h.processor.create_checkout(
        customer_id, 2_500, "usd", RETURN, metadata, idempotency_key="checkout:top_1"
    )
    assert again == checkout
    await h.complete_checkout(checkout.id, CARD_OK)
    events = {e.type: e for e in await h.events()}
    completed = events["checkout.session.completed"]
    assert completed.data["id"] == checkout.id
    assert completed.data["amount_total"] == 2_500 and completed.data["currency"] == "usd"
    assert completed.data["metadata"] == metadata
    assert completed.data["payment_status"] == "paid" and completed.data["mode"] == "payment"
    succeeded = events["payment_intent.succeeded"]
    assert (
        succeeded.data["id"] == completed.data["payment_intent"]
        and succeeded.data["amount_received"] == 2_500
    )

    # The top-up's payment can be refunded, partly, never beyond what was paid.
    refund = await h.processor.refund(succeeded.data["id"], 1_000, idempotency_key="refund:1")
    assert refund.id.startswith("re_") and refund.status == "succeeded"
    assert await h.processor.refund(succeeded.data["id"], 1_000, idempotency_key="refund:1") == refund
    with pytest.raises(Conflict) as refused:
        await h.processor.refund(succeeded.data["id"], 1_501, idempotency_key="refund:2")
    assert refused.value.code == "processor_request_refused"
    assert await h.count("refund") == 1


async def test_off_session_charges_succeed_fail_or_need_action(h: Harness) -> None:
    customer_id = await customer(h)
    good = await saved_card(h, customer_id, CARD_OK, "setup:ok")
    meta = {"purpose": "auto_topup"}
    charge = await h.processor.charge_off_session(customer_id, good, 1_500, meta, idempotency_key="auto:1")
    assert charge.status == "succeeded" and charge.failure_code is None and charge.id.startswith("pi_")
    succeeded = await h.event("payment_intent.succeeded")
    assert succeeded.data["id"] == charge.id and succeeded.data["metadata"] == meta
    assert succeeded.data["amount"] == 1_500

    declined_card = await saved_card(h, customer_id, CARD_DECLINED_AFTER_ATTACH, "setup:declined")
    declined = await h.processor.charge_off_session(
        customer_id, declined_card, 1_500, meta, idempotency_key="auto:2"
    )
    assert declined.status == "failed" and declined.failure_code == "card_declined"
    assert (await h.event("payment_intent.payment_failed")).data["id"] == declined.id
    # A replay of the declined attempt is the same answer, not a second attempt.
    assert (
        await h.processor.charge_off_session(
            customer_id, declined_card, 1_500, meta, idempotency_key="auto:2"
        )
        == declined
    )

    action_card = await saved_card(h, customer_id, CARD_REQUIRES_ACTION, "setup:3ds")
    pending = await h.processor.charge_off_session(
        customer_id, action_card, 1_500, meta, idempotency_key="auto:3"
    )
    assert pending.status == "requires_action" and pending.failure_code == "authentication_required"
    assert await h.count("payment_intent") == 3

    refund = await h.processor.refund(charge.id, 1_500, idempotency_key="refund:auto:1")
    assert refund.status == "succeeded"


async def test_charge_with_a_card_of_another_customer_is_refused(h: Harness) -> None:
    first, second = await customer(h), await customer(h, "2")
    card = await saved_card(h, first)
    with pytest.raises(Conflict) as refused:
        await h.processor.charge_off_session(second, card, 100, {}, idempotency_key="auto:x")
    assert refused.value.code == "processor_request_refused"


# Connect -------------------------------------------------------------------------------------------------


async def test_connect_onboarding_enables_payouts_and_transfers(h: Harness) -> None:
    account_id = await h.processor.create_connect_account(
        "usr_w", "w@example.com", idempotency_key="acct:usr_w"
    )
    assert account_id.startswith("acct_")
    assert (
        await h.processor.create_connect_account("usr_w", "w@example.com", idempotency_key="acct:usr_w")
        == account_id
    )
    status = await h.processor.account_status(account_id)
    assert not (status.details_submitted or status.payouts_enabled)
    link = await h.processor.create_account_link(account_id, RETURN, RETURN + "?refresh=1")
    assert link.url.startswith("http") and link.expires_at.tzinfo is not None

    with pytest.raises(Conflict) as early:
        await h.processor.transfer(
            account_id, 1_000, "usd", {"payout_id": "po_0"}, idempotency_key="payout:po_0"
        )
    assert early.value.code == "processor_request_refused"

    await h.complete_onboarding(account_id)
    updated = await h.event("account.updated")
    assert updated.data["id"] == account_id and updated.data["payouts_enabled"] is True
    assert updated.account == account_id
    status = await h.processor.account_status(account_id)
    assert status.details_submitted and status.charges_enabled and status.payouts_enabled

    transfer = await h.processor.transfer(
        account_id, 1_000, "usd", {"payout_id": "po_1"}, idempotency_key="payout:po_1"
    )
    assert transfer.id.startswith("tr_") and transfer.status == "paid"
    created = await h.event("transfer.created")
    assert created.data["id"] == transfer.id and created.data["amount"] == 1_000
    assert created.data["destination"] == account_id and created.data["metadata"] == {"payout_id": "po_1"}


# Idempotency -----------------------------------------------------------------------------------------------


async def test_same_key_same_call_is_one_object_other_params_are_refused(h: Harness) -> None:
    customer_id = await customer(h)
    card = await saved_card(h, customer_id)
    account_id = await onboarded_account(h)

    calls: list[tuple[str, Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = [
        (
            "checkout.session",
            lambda: h.processor.create_checkout(
                customer_id, 900, "usd", RETURN, {"t": "1"}, idempotency_key="k:checkout"
            ),
            lambda: h.processor.create_checkout(
                customer_id, 901, "usd", RETURN, {"t": "1"}, idempotency_key="k:checkout"
            ),
        ),
        (
            "payment_intent",
            lambda: h.processor.charge_off_session(
                customer_id, card, 700, {"t": "1"}, idempotency_key="k:charge"
            ),
            lambda: h.processor.charge_off_session(
                customer_id, card, 701, {"t": "1"}, idempotency_key="k:charge"
            ),
        ),
        (
            "transfer",
            lambda: h.processor.transfer(account_id, 500, "usd", {"t": "1"}, idempotency_key="k:transfer"),
            lambda: h.processor.transfer(account_id, 501, "usd", {"t": "1"}, idempotency_key="k:transfer"),
        ),
        (
            "customer",
            lambda: h.processor.create_customer("usr_9", "nine@example.com", idempotency_key="k:customer"),
            lambda: h.processor.create_customer("usr_9", "other@example.com", idempotency_key="k:customer"),
        ),
    ]
    for kind, call, other in calls:
        before = await h.count(kind)
        first, second = await call(), await call()
        assert first == second, kind
        assert await h.count(kind) == before + 1, kind
        with pytest.raises(Conflict) as reused:
            await other()
        assert reused.value.code == "processor_idempotency_key_reused", kind
        assert await h.count(kind) == before + 1, kind


async def test_unknown_objects_are_not_found(h: Harness) -> None:
    with pytest.raises(NotFound) as missing:
        await h.processor.payment_method("pm_doesnotexist")
    assert missing.value.code == "processor_object_not_found"
    with pytest.raises(NotFound):
        await h.processor.account_status("acct_doesnotexist")
    with pytest.raises(NotFound):
        await h.processor.create_checkout("cus_nobody", 100, "usd", RETURN, {}, idempotency_key="k:nobody")


# Webhooks ----------------------------------------------------------------------------------------------------


def an_event(**over: Any) -> bytes:
    event = {
        "id": "evt_contract",
        "object": "event",
        "api_version": stripe.api_version,
        "created": int(time.time()),
        "data": {"object": {"id": "cs_x", "object": "checkout.session", "amount_total": 100}},
        "livemode": False,
        "type": "checkout.session.completed",
        **over,
    }
    return json.dumps(event).encode()


async def test_parse_event_verifies_the_signature(h: Harness) -> None:
    body = an_event()
    event = h.processor.parse_event(body, sign(body, h.secret))
    assert (event.id, event.type, event.data["amount_total"]) == (
        "evt_contract",
        "checkout.session.completed",
        100,
    )
    assert event.created.tzinfo is not None

    bad = [
        sign(body, h.secret + "x"),  # another secret
        sign(an_event(type="other"), h.secret),  # another body
        sign(body, h.secret, int(time.time()) - 301),  # older than 300 s
        sign(body, h.secret, int(time.time()) + 400),  # dated in the future beyond the tolerance
        "",
        "t=abc,v1=zz",
        "garbage",
    ]
    for header in bad:
        with pytest.raises(BadRequest) as refused:
            h.processor.parse_event(body, header)
        assert refused.value.code == "invalid_signature", header
    # Within the tolerance it passes.
    h.processor.parse_event(body, sign(body, h.secret, int(time.time()) - 250))
    h.processor.parse_event(body, sign(body, h.secret, int(time.time()) + 250))
    # A signed body that is not an event is refused too.
    with pytest.raises(BadRequest):
        h.processor.parse_event(b'{"object": "event"}', sign(b'{"object": "event"}', h.secret))


# Sandbox only ------------------------------------------------------------------------------------------------


async def test_sandbox_events_are_signed_as_stripe_signs_them(core: Core) -> None:
    processor = core.processor
    assert isinstance(processor, SandboxProcessor)
    cus = await processor.create_customer("usr_s", "s@example.com", idempotency_key="customer:usr_s")
    async with core.db.session(write=False) as session:
        [event] = await sandbox_module.pending_events(session, 10)
    body, header = processor.signed(event)
    # The SDK itself accepts the sandbox's signature: one webhook code path serves both adapters.
    sdk_event = stripe.Webhook.construct_event(body, header, processor.webhook_secret, tolerance=300)
    assert sdk_event.type == "customer.created" and sdk_event.data.object.id == cus
    assert stripe.WebhookSignature.verify_header(body.decode(), header, processor.webhook_secret, 300)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(body, header, "whsec_other", tolerance=300)
    old_body, old_header = processor.signed(event, timestamp=int(time.time()) - 400)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(old_body, old_header, processor.webhook_secret, tolerance=300)


async def test_sandbox_delivery_marks_events_and_retries_failures(core: Core) -> None:
    processor = core.processor
    assert isinstance(processor, SandboxProcessor)
    await processor.create_customer("usr_d", "d@example.com", idempotency_key="customer:usr_d")
    received: list[ProcessorEvent] = []
    fail = True

    def handler(request: httpx.Request) -> httpx.Response:
        if fail:
            return httpx.Response(500, text="down")
        received.append(processor.parse_event(request.content, request.headers["Stripe-Signature"]))
        return httpx.Response(200)

    def failures() -> float:
        sample = metrics.REGISTRY.get_sample_value(
            "callboard_delivery_failures_total", {"channel": "webhook"}
        )
        return sample or 0.0

    url = "http://testserver/webhooks/processor"
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        before = failures()
        assert await processor.deliver(client, url) == 0
        assert failures() - before == 1  # /metrics counts the refused delivery
        async with core.db.session(write=False) as session:
            [event] = await sandbox_module.pending_events(session, 10)
            assert event.attempts == 1 and event.last_error and "500" in event.last_error
        fail = False
        assert await processor.deliver(client, url) == 1
        assert await processor.deliver(client, url) == 0
        assert failures() - before == 1
    assert [e.type for e in received] == ["customer.created"]
    async with core.db.session(write=False) as session:
        row = await session.get(SandboxEvent, received[0].id)
        assert row is not None and row.delivered_at is not None and row.attempts == 2


async def test_sandbox_pages_decline_and_authenticate(core: Core) -> None:
    processor = core.processor
    assert isinstance(processor, SandboxProcessor)
    h = sandbox_harness(core)
    cus = await customer(h)
    setup = await processor.create_card_setup(cus, RETURN, idempotency_key="setup:decl")
    assert (await processor.complete_card_setup(setup.id, CARD_DECLINED)).failure_code == "card_declined"
    assert (await processor.complete_card_setup(setup.id, CARD_OK)).status == "complete"

    checkout = await processor.create_checkout(cus, 1_200, "usd", RETURN, {"t": "1"}, idempotency_key="co:1")
    declined = await processor.complete_checkout(checkout.id, CARD_DECLINED)
    assert (declined.status, declined.failure_code) == ("failed", "card_declined")
    outcome = await processor.complete_checkout(checkout.id, CARD_REQUIRES_ACTION)
    assert outcome.status == "requires_action" and outcome.payment_intent
    await h.events()
    assert (await processor.complete_action(outcome.payment_intent)).status == "complete"
    types = [e.type for e in await h.events()]
    assert types.count("checkout.session.completed") == 1 and "payment_intent.succeeded" in types
    with pytest.raises(Conflict):
        await processor.complete_checkout(checkout.id, CARD_OK)

    account_id = await onboarded_account(h)
    transfer = await processor.transfer(account_id, 300, "usd", {}, idempotency_key="payout:r")
    assert (await processor.reverse_transfer(transfer.id)).status == "reversed"
    assert (await h.event("transfer.reversed")).data["amount_reversed"] == 300


def test_settings_choose_the_adapter_and_name_missing_keys(tmp_root: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_root / 'unused.db'}"
    assert make_settings(url, tmp_root).processor == "sandbox"
    for missing, given in (
        ("CALLBOARD_STRIPE_SECRET_KEY", {"stripe_webhook_secret": "whsec_x"}),
        ("CALLBOARD_STRIPE_WEBHOOK_SECRET", {"stripe_secret_key": "sk_test_x"}),
    ):
        with pytest.raises(ValueError, match=missing):
            make_settings(url, tmp_root, processor="stripe", **given)
    with pytest.raises(ValueError, match="CALLBOARD_PROCESSOR"):
        make_settings(url, tmp_root, processor="paypal")


# Stripe adapter only -----------------------------------------------------------------------------------------


async def test_stripe_adapter_passes_our_idempotency_keys(
    fake: fake_stripe.FakeStripe, stripe_processor: StripeProcessor
) -> None:
    fake.reset()
    await stripe_processor.create_customer("usr_k", "k@example.com", idempotency_key="customer:usr_k")
    await stripe_processor.create_connect_account("usr_k", "k@example.com", idempotency_key="acct:usr_k")
    assert ("POST", "/v1/customers", "customer:usr_k") in fake.requests
    assert ("POST", "/v1/accounts", "acct:usr_k") in fake.requests


async def test_stripe_adapter_unreachable_is_processor_unavailable(tmp_root: Path) -> None:
    settings = make_settings(
        f"sqlite+aiosqlite:///{tmp_root / 'unused.db'}",
        tmp_root,
        processor="stripe",
        stripe_secret_key=fake_stripe.SECRET_KEY,
        stripe_webhook_secret=fake_stripe.WEBHOOK_SECRET,
        stripe_api_base=f"http://127.0.0.1:{free_port()}",
    )
    processor = StripeProcessor.from_settings(settings)
    processor.client._requestor._options.max_network_retries = 0  # fail fast
    try:
        with pytest.raises(ProcessorUnavailable):
            await processor.create_customer("usr_u", "u@example.com", idempotency_key="customer:usr_u")
    finally:
        await processor.aclose()


def test_processor_unavailable_is_a_503_that_says_to_retry() -> None:
    """A processor outage changes nothing on our side: the caller is told to retry later (503), not that
    its request was wrong."""
    import json

    from http_api.errors import render_error

    response = render_error(ProcessorUnavailable(), "req_test")
    body = json.loads(bytes(response.body))
    assert response.status_code == 503
    assert body["code"] == "processor_unavailable" and "retry" in body["message"]
