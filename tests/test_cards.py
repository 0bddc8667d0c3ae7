"""Saved cards, top-ups and the processor webhook, over HTTP on SQLite and PostgreSQL: the owner saves a card
and pays through the sandbox's hosted pages like a browser, the sandbox's events reach /webhooks/processor
as the worker delivers them, and every event changes money exactly once. One test runs the Stripe adapter
against the fake Stripe server, with a webhook signed by the SDK's own signer. The books verify after each."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select

from callboard_core import worker
from callboard_core.billing.models import TopUp, TopUpStatus
from callboard_core.bus import InTransaction
from callboard_core.container import Core
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerTransaction, TransactionKind
from callboard_core.processor.events import PaymentSucceeded
from callboard_core.processor.models import ProcessorEventRecord
from callboard_core.processor.sandbox import (
    CARD_DECLINED,
    CARD_DECLINED_AFTER_ATTACH,
    CARD_OK,
    CARD_REQUIRES_ACTION,
)
from callboard_core.processor.sandbox.models import SandboxEvent
from http_api.app import create_app
from tests import fake_stripe
from tests.conftest import BASE_URL, listening, make_settings, new_client
from tests.jobs_helpers import new_owner
from tests.payments_helpers import (
    RETURN_URL,
    add_card,
    deliver,
    post_event,
    redeliver_all,
    sandbox,
    start_topup,
    submit_page,
)

pytestmark = pytest.mark.usefixtures("books_balance")  # the ledger verifies clean after each test


async def topup_transactions(core: Core, user_id: str) -> int:
    async with core.uow(write=False) as uow:
        count = await uow.session.scalar(
            select(func.count())
            .select_from(LedgerTransaction)
            .where(LedgerTransaction.user_id == user_id, LedgerTransaction.kind == TransactionKind.TOPUP)
        )
    return int(count or 0)


async def topup_row(core: Core, topup_id: str) -> TopUp:
    async with core.uow(write=False) as uow:
        row = await uow.session.get(TopUp, topup_id)
    assert row is not None
    return row


async def sandbox_event(core: Core, event_type: str) -> SandboxEvent:
    async with core.db.session(write=False) as session:
        rows = list(await session.scalars(select(SandboxEvent).where(SandboxEvent.type == event_type)))
    assert len(rows) == 1, [r.type for r in rows]
    return rows[0]


async def available(owner: Any) -> int:
    return int((await owner.client.get("/me/billing")).json()["availableCents"])


# --- saved cards ---------------------------------------------------------------------------------------------


async def test_owner_adds_a_card_through_the_hosted_page_and_sees_it_mirrored_and_default(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    started = await owner.client.post("/me/billing/payment-methods")
    assert started.status_code == 200, started.text
    body = started.json()
    assert body["customerId"].startswith("cus_") and body["clientSecret"].startswith("seti_")
    assert body["url"] == f"{BASE_URL}/sandbox/processor/setup/{body['setupId']}"

    done = await submit_page(app, body["url"], "4242 4242 4242 4242")
    assert done.status_code == 303 and done.headers["location"] == f"{BASE_URL}/"
    # Nothing is mirrored until the processor reports it.
    assert (await owner.client.get("/me/billing")).json()["paymentMethods"] == []

    assert await deliver(app, core) == 4  # customer.created, payment_method.attached, setup_intent, checkout
    profile = (await owner.client.get("/me/billing")).json()
    [card] = profile["paymentMethods"]
    assert (card["brand"], card["last4"], card["type"], card["isDefault"]) == ("visa", "4242", "card", True)
    assert card["id"].startswith("bpm_") and card["expMonth"] == 12
    assert profile["processorDefaultPaymentMethodId"] == card["processorPaymentMethodId"]
    assert profile["processorCustomerId"] == body["customerId"]
    # The form is used: it says so instead of offering to save another card.
    async with new_client(app) as page:
        again = await page.get(body["url"].removeprefix(BASE_URL))
    assert "already completed" in again.text and 'method="post"' not in again.text


async def test_a_declined_card_is_shown_as_declined_and_not_saved(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    url = (await owner.client.post("/me/billing/payment-methods")).json()["url"]
    refused = await submit_page(app, url, CARD_DECLINED)
    assert refused.status_code == 402
    assert "Your card was declined" in refused.text and 'name="card_number"' in refused.text
    not_a_test_card = await submit_page(app, url, "1234")
    assert not_a_test_card.status_code == 422 and "Use a test card" in not_a_test_card.text
    await deliver(app, core)
    assert (await owner.client.get("/me/billing")).json()["paymentMethods"] == []
    # The form stays open: a good card still saves.
    assert (await submit_page(app, url, CARD_OK)).status_code == 303


async def test_a_form_post_from_another_origin_is_refused(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    url = (await owner.client.post("/me/billing/payment-methods")).json()["url"]
    async with new_client(app) as page:
        r = await page.post(
            url.removeprefix(BASE_URL),
            data={"card_number": CARD_OK},
            headers={"Origin": "https://evil.example"},
        )
    assert r.status_code == 403 and "trusted origin" in r.text
    await deliver(app, core)
    assert (await owner.client.get("/me/billing")).json()["paymentMethods"] == []


async def test_confirm_mirrors_at_once_is_idempotent_and_the_webhook_then_changes_nothing(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    setup_id = (await owner.client.post("/me/billing/payment-methods")).json()["setupId"]
    outcome = await sandbox(core).complete_card_setup(setup_id, CARD_OK)
    pm_id = outcome.payment_method
    assert pm_id

    first = await owner.client.post("/me/billing/payment-methods/confirm", json={"paymentMethodId": pm_id})
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "confirmed"
    assert first.json()["paymentMethod"]["isDefault"] is True
    again = await owner.client.post("/me/billing/payment-methods/confirm", json={"paymentMethodId": pm_id})
    assert again.json() == first.json()
    before = (await owner.client.get("/me/billing")).json()
    assert len(before["paymentMethods"]) == 1

    assert await deliver(app, core) >= 3
    assert (await owner.client.get("/me/billing")).json() == before

    # Another owner cannot confirm (or learn about) this card; an unknown card is 404 too.
    other = await new_owner(app, core)
    await other.client.post("/me/billing/payment-methods")
    for target in (pm_id, "pm_unknown"):
        r = await other.client.post("/me/billing/payment-methods/confirm", json={"paymentMethodId": target})
        assert r.status_code == 404 and r.json()["code"] == "payment_method_not_found"


async def test_set_default_then_delete_the_default_disables_auto_topup_with_the_reason(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    await add_card(owner, app, core, CARD_OK)
    profile = await add_card(owner, app, core, "5555555555554444")
    first, second = profile["paymentMethods"]
    assert (first["isDefault"], second["isDefault"]) == (True, False)

    made = await owner.client.patch(f"/me/billing/payment-methods/{second['id']}/default")
    assert made.status_code == 200, made.text
    assert made.json()["status"] == "updated"
    cards = made.json()["profile"]["paymentMethods"]
    assert [c["isDefault"] for c in cards] == [False, True]
    enabled = await owner.client.patch(
        "/me/billing/autotopup", json={"enabled": True, "thresholdCents": 500, "amountCents": 2000}
    )
    assert enabled.status_code == 200 and enabled.json()["autoTopupEnabled"] is True

    # Another owner's card is a 404 on every route that names one.
    other = await new_owner(app, core)
    for method, path in (
        ("PATCH", f"/me/billing/payment-methods/{second['id']}/default"),
        ("DELETE", f"/me/billing/payment-methods/{second['processorPaymentMethodId']}"),
    ):
        r = await other.client.request(method, path)
        assert r.status_code == 404 and r.json()["code"] == "payment_method_not_found", path

    gone = await owner.client.delete(f"/me/billing/payment-methods/{second['processorPaymentMethodId']}")
    assert gone.status_code == 200 and gone.json() == {"status": "deleted"}
    after = (await owner.client.get("/me/billing")).json()
    assert [c["id"] for c in after["paymentMethods"]] == [first["id"]]
    assert after["processorDefaultPaymentMethodId"] is None and after["autoTopupEnabled"] is False
    assert "removed" in after["autoTopupDisabledReason"] and "4444" in after["autoTopupDisabledReason"]
    # Detached at the processor; its payment_method.detached event changes nothing more.
    assert (await sandbox(core).payment_method(second["processorPaymentMethodId"])).customer_id is None
    await deliver(app, core)
    assert (await owner.client.get("/me/billing")).json() == after
    again = await owner.client.delete(f"/me/billing/payment-methods/{second['id']}")
    assert again.status_code == 404


async def test_the_requester_agent_routes_show_readiness_and_start_a_setup(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    before = await owner.client.get("/api/v2/requester-agents/me/payment-method")
    assert before.status_code == 200, before.text
    assert before.json()["ready"] is False and before.json()["paymentMethod"] is None
    started = await owner.client.post("/api/v2/requester-agents/me/payment-method/setup")
    assert started.status_code == 200, started.text
    assert (await submit_page(app, started.json()["url"])).status_code == 303
    await deliver(app, core)
    after = (await owner.client.get("/api/v2/requester-agents/me/payment-method")).json()
    assert after["ready"] is True and after["paymentMethod"]["last4"] == "4242"
    assert after["processorCustomerId"] == started.json()["customerId"]


# --- top-ups -------------------------------------------------------------------------------------------------


async def test_a_topup_through_the_hosted_checkout_credits_the_balance_exactly_once(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    started = await start_topup(owner, 2500, key="topup-1")
    assert started["url"] == f"{BASE_URL}/sandbox/processor/checkout/{started['sessionId']}"
    replay = await owner.client.post(
        "/me/billing/topup",
        json={"amountCents": 2500, "returnUrl": RETURN_URL},
        headers={"Idempotency-Key": "topup-1"},
    )
    assert replay.json() == started and replay.headers.get("Idempotent-Replayed") == "true"

    async with new_client(app) as page:
        assert "25.00 USD" in (await page.get(started["url"].removeprefix(BASE_URL))).text
    paid = await submit_page(app, started["url"])
    assert paid.status_code == 303 and paid.headers["location"] == RETURN_URL
    assert await available(owner) == 0  # money enters with the processor's report

    await deliver(app, core)  # payment_intent.succeeded and checkout.session.completed both credit
    assert await available(owner) == 2500
    await redeliver_all(app, core)
    assert await available(owner) == 2500
    assert await topup_transactions(core, owner.user_id) == 1
    row = await topup_row(core, started["topupId"])
    assert row.status == TopUpStatus.SUCCEEDED and row.checkout_id == started["sessionId"]
    assert row.payment_intent_id and row.ledger_transaction_id
    statement = (await owner.client.get("/me/billing/statement")).json()
    assert [e["amountCents"] for e in statement["entries"]] == [2500]


async def test_a_requires_action_card_completes_after_the_action_page(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    started = await start_topup(owner, 1200)
    sent = await submit_page(app, started["url"], CARD_REQUIRES_ACTION)
    assert sent.status_code == 303 and "/sandbox/processor/action/pi_" in sent.headers["location"]
    await deliver(app, core)
    assert await available(owner) == 0

    done = await submit_page(app, sent.headers["location"], card=None)
    assert done.status_code == 303 and done.headers["location"] == RETURN_URL
    await deliver(app, core)
    assert await available(owner) == 1200
    assert (await topup_row(core, started["topupId"])).status == TopUpStatus.SUCCEEDED


async def test_a_failed_payment_marks_the_topup_failed_and_another_card_still_pays(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    started = await start_topup(owner, 900)
    declined = await submit_page(app, started["url"], CARD_DECLINED)
    assert declined.status_code == 402 and "declined" in declined.text
    await deliver(app, core)
    row = await topup_row(core, started["topupId"])
    assert (row.status, row.failure_code) == (TopUpStatus.FAILED, "card_declined")
    assert await available(owner) == 0

    assert (await submit_page(app, started["url"], CARD_OK)).status_code == 303
    await deliver(app, core)
    assert (await topup_row(core, started["topupId"])).status == TopUpStatus.SUCCEEDED
    assert await available(owner) == 900


async def test_topup_amounts_and_return_urls_are_checked(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    for amount in (99, 1_000_001, "500", 150.5):
        r = await owner.client.post("/me/billing/topup", json={"amountCents": amount})
        assert r.status_code == 422, (amount, r.text)
    r = await owner.client.post(
        "/me/billing/topup", json={"amountCents": 500, "returnUrl": "https://evil.example/x"}
    )
    assert r.status_code == 422 and r.json()["errors"][0]["code"] == "untrusted_return_url"
    async with core.uow(write=False) as uow:
        assert await uow.session.scalar(select(func.count()).select_from(TopUp)) == 0


async def test_auto_topup_payments_credit_and_a_declined_one_turns_auto_topup_off(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    profile = await add_card(owner, app, core, CARD_DECLINED_AFTER_ATTACH)
    customer, pm = profile["processorCustomerId"], profile["processorDefaultPaymentMethodId"]
    await add_card(owner, app, core, CARD_OK)
    good_pm = (await owner.client.get("/me/billing")).json()["paymentMethods"][1]["processorPaymentMethodId"]
    metadata = {"purpose": "autotopup", "userId": owner.user_id}

    charge = await sandbox(core).charge_off_session(
        customer, good_pm, 3000, metadata, idempotency_key="auto:1"
    )
    assert charge.status == "succeeded"
    # The charging side credits synchronously under the same key; the webhook converges on it.
    async with core.uow() as uow:
        await ledger.top_up(
            uow.session,
            user_id=owner.user_id,
            amount_cents=3000,
            processor_ref=charge.id,
            key=f"topup:{charge.id}",
        )
    await deliver(app, core)
    assert await available(owner) == 3000 and await topup_transactions(core, owner.user_id) == 1

    enabled = await owner.client.patch(
        "/me/billing/autotopup", json={"enabled": True, "thresholdCents": 100, "amountCents": 1000}
    )
    assert enabled.json()["autoTopupEnabled"] is True
    failed = await sandbox(core).charge_off_session(customer, pm, 1000, metadata, idempotency_key="auto:2")
    assert failed.status == "failed"
    await deliver(app, core)
    after = (await owner.client.get("/me/billing")).json()
    assert after["autoTopupEnabled"] is False and "card_declined" in after["autoTopupDisabledReason"]
    assert after["availableCents"] == 3000


# --- the webhook ---------------------------------------------------------------------------------------------


async def paid_topup_event(app: Any, core: Core) -> tuple[Any, bytes]:
    """An owner whose top-up of 700 was paid, and the payment_intent.succeeded event's body (undelivered)."""
    owner = await new_owner(app, core)
    started = await start_topup(owner, 700)
    assert (await submit_page(app, started["url"])).status_code == 303
    event = await sandbox_event(core, "payment_intent.succeeded")
    return owner, event.payload.encode()


async def test_duplicate_and_concurrent_deliveries_of_one_event_run_handlers_once(
    app: Any, core: Core
) -> None:
    owner, body = await paid_topup_event(app, core)
    secret = sandbox(core).webhook_secret
    async with new_client(app) as client:
        answers = await asyncio.gather(*(post_event(client, body, secret) for _ in range(6)))
        assert [r.status_code for r in answers] == [200] * 6, [r.text for r in answers]
        assert sorted(r.json()["duplicate"] for r in answers) == [False] + [True] * 5
        later = await post_event(client, body, secret)
    assert later.status_code == 200 and later.json()["duplicate"] is True and later.json()["handled"] is False
    assert await available(owner) == 700 and await topup_transactions(core, owner.user_id) == 1
    event_id = orjson.loads(body)["id"]
    async with core.uow(write=False) as uow:
        rows = list(
            await uow.session.scalars(
                select(ProcessorEventRecord).where(ProcessorEventRecord.event_id == event_id)
            )
        )
    assert len(rows) == 1 and rows[0].handled_at is not None and rows[0].type == "payment_intent.succeeded"


async def test_a_bad_signature_is_400_and_records_nothing(app: Any, core: Core) -> None:
    _, body = await paid_topup_event(app, core)
    async with new_client(app) as client:
        wrong = await post_event(client, body, "whsec_not_ours")
        missing = await client.post("/webhooks/processor", content=body)
        tampered = await post_event(client, body.replace(b"700", b"900"), "whsec_not_ours")
    for r in (wrong, missing, tampered):
        assert r.status_code == 400 and r.json()["code"] == "invalid_signature", r.text
    async with core.uow(write=False) as uow:
        assert await uow.session.scalar(select(func.count()).select_from(ProcessorEventRecord)) == 0


async def test_an_unknown_event_type_is_recorded_and_ignored(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await owner.client.post("/me/billing/payment-methods")  # the customer is created: customer.created
    event = await sandbox_event(core, "customer.created")
    async with new_client(app) as client:
        r = await post_event(client, event.payload.encode(), sandbox(core).webhook_secret)
    assert r.status_code == 200 and r.json()["handled"] is False and r.json()["duplicate"] is False
    async with core.uow(write=False) as uow:
        row = await uow.session.scalar(
            select(ProcessorEventRecord).where(ProcessorEventRecord.event_id == event.id)
        )
    assert row is not None and row.handled_at is None


async def test_a_failing_handler_keeps_nothing_and_the_retry_handles_the_event(app: Any, core: Core) -> None:
    owner, body = await paid_topup_event(app, core)
    calls = 0

    async def flaky(session: Any, event: PaymentSucceeded) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the first attempt fails after the top-up handler posted")

    with listening(core, {PaymentSucceeded: [InTransaction(flaky)]}):
        secret = sandbox(core).webhook_secret
        async with new_client(app) as client:
            failed = await post_event(client, body, secret)
            assert failed.status_code == 503, failed.text
            assert failed.json()["code"] == "webhook_handler_failed"
            assert failed.json()["reason"] == "RuntimeError"
            assert await available(owner) == 0  # the credit rolled back with the event's record
            retried = await post_event(client, body, secret)
        assert retried.status_code == 200 and retried.json()["handled"] is True
        assert await available(owner) == 700


async def test_the_worker_pass_delivers_the_sandbox_events(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    started = await start_topup(owner, 400)
    assert (await submit_page(app, started["url"])).status_code == 303
    async with new_client(app) as client:
        await worker.run_once(core, housekeeping=False, webhook_client=client)
    assert await available(owner) == 400
    async with core.db.session(write=False) as session:
        assert (
            await session.scalar(
                select(func.count()).select_from(SandboxEvent).where(SandboxEvent.delivered_at.is_(None))
            )
            == 0
        )


# --- the Stripe adapter ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[fake_stripe.FakeStripe]:
    yield from fake_stripe.serve()


async def test_with_stripe_a_webhook_signed_by_the_sdk_credits_a_topup(
    core: Core, database_url: str, tmp_root: Path, fake: fake_stripe.FakeStripe
) -> None:
    fake.reset()
    settings = make_settings(
        database_url,
        tmp_root,
        processor="stripe",
        stripe_secret_key=fake_stripe.SECRET_KEY,
        stripe_webhook_secret=fake_stripe.WEBHOOK_SECRET,
        stripe_api_base=fake.url,
    )
    stripe_core = Core.build(settings)
    try:
        app = create_app(core=stripe_core)
        owner = await new_owner(app, stripe_core)
        started = await start_topup(owner, 1500)
        assert started["url"].startswith("https://checkout.stripe.fake/")
        fake.complete_checkout(started["sessionId"], CARD_OK)
        deliveries = fake.take_events()  # signed with stripe.WebhookSignature.generate_signature_header
        assert len(deliveries) == 2
        async with new_client(app) as client:
            for body, header in deliveries * 2:  # each delivered twice
                r = await client.post(
                    "/webhooks/processor",
                    content=body,
                    headers={"Content-Type": "application/json", "Stripe-Signature": header},
                )
                assert r.status_code == 200, r.text
            assert (await client.get("/sandbox/processor/checkout/cs_x")).status_code == 404
        assert await available(owner) == 1500
        assert await topup_transactions(core, owner.user_id) == 1
        assert (await topup_row(core, started["topupId"])).status == TopUpStatus.SUCCEEDED
    finally:
        await stripe_core.processor.aclose()
        await stripe_core.db.dispose()
