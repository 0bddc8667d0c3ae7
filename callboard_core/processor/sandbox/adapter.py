"""The sandbox processor: the embedded default (`CALLBOARD_PROCESSOR=sandbox`).

It behaves like the real processor and keeps its state in our database (`processor/sandbox/models.py`), each
call in a transaction of its own, as a remote service would: the caller's transaction neither sees nor
rolls back what the processor did. Objects are Stripe-shaped JSON (`cus_`, `seti_`, `cs_`, `pm_`, `pi_`,
`ch_`, `acct_`, `tr_`, `re_`); every create is idempotent on its key (same key and parameters: the first
result; other parameters: 409 `processor_idempotency_key_reused`).

Its hosted pages (`/sandbox/processor/...`, served by the app) act through the page actions here:
`complete_card_setup`, `complete_checkout`, `complete_action`, `complete_onboarding` (and the test lever
`reverse_transfer`). Test cards: `4242424242424242` succeeds, `4000000000000002` is declined
(`card_declined`; it cannot even be saved), `4000000000000341` saves but every charge of it is declined,
`4000002500003155` requires action (`complete_action` then succeeds it).

Each completion writes the events the real processor would send to the `sandbox_events` outbox; the
worker delivers them with `deliver`, signed exactly as Stripe signs, so the app's webhook endpoint runs
the same `parse_event` for both adapters.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlencode

import orjson
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, metrics
from callboard_core.config import Settings
from callboard_core.db import Database
from callboard_core.errors import Conflict, ValidationFailed
from callboard_core.ids import new_id, random_string
from callboard_core.processor import webhooks
from callboard_core.processor.port import (
    AccountLink,
    AccountStatus,
    CardSetup,
    Charge,
    Checkout,
    PaymentMethodInfo,
    ProcessorEvent,
    Refund,
    Transfer,
    key_reused,
    object_missing,
    refused,
)
from callboard_core.processor.sandbox.models import SandboxEvent, SandboxIdempotencyKey, SandboxObject
from callboard_core.processor.translate import account_status, card_info

if TYPE_CHECKING:
    import httpx

CARD_OK = "4242424242424242"
CARD_DECLINED = "4000000000000002"
CARD_REQUIRES_ACTION = "4000002500003155"
CARD_DECLINED_AFTER_ATTACH = "4000000000000341"  # saves fine, every charge is declined (as at Stripe)
# Test card → what happens when it pays: None (succeeds), "card_declined", "authentication_required".
TEST_CARDS: dict[str, str | None] = {
    CARD_OK: None,
    "5555555555554444": None,
    CARD_DECLINED: "card_declined",
    CARD_REQUIRES_ACTION: "authentication_required",
    CARD_DECLINED_AFTER_ATTACH: "card_declined",
}
PAGE_PREFIX = "/sandbox/processor"
ACCOUNT_LINK_TTL = timedelta(minutes=5)


def _account_link_id(secret: str) -> str:
    return "acctlink_" + hashlib.sha256(secret.encode()).hexdigest()[:48]


T = TypeVar("T")


@dataclass(frozen=True)
class PageOutcome:
    """What a hosted page shows after the customer acted: `complete`, `requires_action` (then
    `complete_action(payment_intent)`), or `failed` with the decline code."""

    status: Literal["complete", "requires_action", "failed"]
    failure_code: str | None = None
    payment_intent: str | None = None
    payment_method: str | None = None


def card_details(number: str) -> tuple[str, str | None]:
    """(brand, behaviour) of a test card; any other number is refused as the real test mode would."""
    digits = "".join(ch for ch in number if ch.isdigit())
    if digits not in TEST_CARDS:
        raise ValidationFailed(
            "Use a test card: 4242424242424242 (succeeds), 4000000000000002 (declined), "
            "4000002500003155 (requires action).",
            code="invalid_card_number",
        )
    brand = "mastercard" if digits.startswith("5") else "visa"
    return brand, TEST_CARDS[digits]


def sandbox_webhook_secret(secret_key: str) -> str:
    """The sandbox's webhook signing secret, derived from CALLBOARD_SECRET_KEY (nothing to configure)."""
    mac = hmac.new(secret_key.encode(), b"callboard-sandbox-webhooks", hashlib.sha256).hexdigest()
    return "whsec_" + mac[:40]


def _unix(moment: datetime | None = None) -> int:
    return int((moment or clock.now()).timestamp())


def _public(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the processor shows it (private `_` fields dropped)."""
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def _fingerprint(params: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(params, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _positive_amount(amount_cents: int) -> None:
    if isinstance(amount_cents, bool) or not isinstance(amount_cents, int) or amount_cents <= 0:
        raise refused("the amount must be a positive integer of cents", "parameter_invalid_integer")


class SandboxProcessor:
    name = "sandbox"

    def __init__(self, db: Database, *, base_url: str, webhook_secret: str) -> None:
        self.db = db
        self.base_url = base_url.rstrip("/")
        self.webhook_secret = webhook_secret

    @classmethod
    def from_settings(cls, settings: Settings, db: Database) -> SandboxProcessor:
        return cls(db, base_url=settings.base_url, webhook_secret=sandbox_webhook_secret(settings.secret_key))

    async def aclose(self) -> None:
        return None

    # Storage -------------------------------------------------------------------------------------------

    async def _get(
        self, session: AsyncSession, kind: str, object_id: str, *, lock: bool = False
    ) -> dict[str, Any]:
        """The object; `lock`: its row locked until the transaction ends (PostgreSQL; SQLite's write
        transactions are serial already), read afresh, so a check on it holds until commit."""
        row = await session.get(SandboxObject, object_id, with_for_update=lock, populate_existing=lock)
        if row is None or row.type != kind:
            raise object_missing(kind.replace("_", " "), object_id)
        return dict(row.data)

    async def _put(self, session: AsyncSession, obj: dict[str, Any]) -> dict[str, Any]:
        row = await session.get(SandboxObject, obj["id"])
        if row is None:
            session.add(SandboxObject(id=obj["id"], type=obj["object"], data=obj))
        else:
            row.data = dict(obj)
        await session.flush()
        return obj

    async def _emit(
        self,
        session: AsyncSession,
        event_type: str,
        obj: dict[str, Any],
        *,
        account: str | None = None,
        previous: dict[str, Any] | None = None,
    ) -> None:
        event_id = new_id("evt")
        body = webhooks.event_body(event_id, event_type, _public(obj), _unix(), account=account)
        if previous is not None:
            body["data"]["previous_attributes"] = previous
        session.add(SandboxEvent(id=event_id, type=event_type, payload=orjson.dumps(body).decode()))
        await session.flush()

    async def _write(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        async with self.db.session(write=True) as session, session.begin():
            return await work(session)

    async def _read(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        async with self.db.session(write=False) as session:
            return await work(session)

    async def _idempotent(
        self,
        operation: str,
        key: str,
        params: dict[str, Any],
        create: Callable[[AsyncSession], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Run `create` once per key: a repeat with the same parameters returns the stored result; the key
        row is written in the same transaction as the objects, so a concurrent duplicate fails on its
        primary key and then reads the winner's result."""
        if not key or len(key) > 255:
            raise refused("an idempotency key of 1 to 255 characters is required", "idempotency_key_invalid")
        fingerprint = _fingerprint({"op": operation, **params})

        async def attempt(session: AsyncSession) -> dict[str, Any]:
            row = await session.get(SandboxIdempotencyKey, key)
            if row is not None:
                if row.operation != operation or row.fingerprint != fingerprint:
                    raise key_reused(key)
                return dict(row.result)
            result = await create(session)
            session.add(
                SandboxIdempotencyKey(key=key, operation=operation, fingerprint=fingerprint, result=result)
            )
            await session.flush()
            return result

        try:
            return await self._write(attempt)
        except IntegrityError:
            return await self._write(attempt)

    # Customers and cards ---------------------------------------------------------------------------------

    async def create_customer(self, user_id: str, email: str, *, idempotency_key: str) -> str:
        async def create(session: AsyncSession) -> dict[str, Any]:
            customer = {
                "id": new_id("cus"),
                "object": "customer",
                "email": email,
                "metadata": {"user_id": user_id},
                "created": _unix(),
                "livemode": False,
            }
            await self._put(session, customer)
            await self._emit(session, "customer.created", customer)
            return {"id": customer["id"]}

        result = await self._idempotent(
            "create_customer", idempotency_key, {"user_id": user_id, "email": email}, create
        )
        return str(result["id"])

    async def create_card_setup(
        self, customer_id: str, return_url: str, *, idempotency_key: str
    ) -> CardSetup:
        async def create(session: AsyncSession) -> dict[str, Any]:
            await self._get(session, "customer", customer_id)
            seti_id, cs_id = new_id("seti"), new_id("cs")
            setup_intent = {
                "id": seti_id,
                "object": "setup_intent",
                "client_secret": f"{seti_id}_secret_{random_string(24)}",
                "customer": customer_id,
                "payment_method": None,
                "status": "requires_payment_method",
                "usage": "off_session",
                "created": _unix(),
                "livemode": False,
            }
            session_obj: dict[str, Any] = {
                "id": cs_id,
                "object": "checkout.session",
                "mode": "setup",
                "status": "open",
                "payment_status": "no_payment_required",
                "customer": customer_id,
                "setup_intent": seti_id,
                "payment_intent": None,
                "amount_total": None,
                "currency": None,
                "metadata": {},
                "success_url": return_url,
                "url": f"{self.base_url}{PAGE_PREFIX}/setup/{cs_id}",
                "created": _unix(),
                "livemode": False,
            }
            await self._put(session, setup_intent)
            await self._put(session, session_obj)
            return {"id": cs_id, "client_secret": setup_intent["client_secret"], "url": session_obj["url"]}

        result = await self._idempotent(
            "create_card_setup",
            idempotency_key,
            {"customer": customer_id, "return_url": return_url},
            create,
        )
        return CardSetup(id=result["id"], client_secret=result["client_secret"], url=result["url"])

    async def _new_payment_method(
        self, session: AsyncSession, card_number: str, customer_id: str | None
    ) -> dict[str, Any]:
        brand, behaviour = card_details(card_number)
        digits = "".join(ch for ch in card_number if ch.isdigit())
        pm = {
            "id": new_id("pm"),
            "object": "payment_method",
            "type": "card",
            "card": {
                "brand": brand,
                "last4": digits[-4:],
                "exp_month": 12,
                "exp_year": clock.now().year + 3,
                "funding": "credit",
                "country": "US",
            },
            "customer": customer_id,
            "metadata": {},
            "created": _unix(),
            "livemode": False,
            "_behaviour": behaviour,  # the test card's fate when it pays (never shown)
        }
        return await self._put(session, pm)

    async def complete_card_setup(self, setup_id: str, card_number: str) -> PageOutcome:
        """The hosted card form was submitted: the card is saved to the customer (`setup_intent.succeeded`,
        `payment_method.attached`, `checkout.session.completed` in setup mode), or refused if declined."""

        async def work(session: AsyncSession) -> PageOutcome:
            cs = await self._get(session, "checkout.session", setup_id)
            if cs["mode"] != "setup":
                raise object_missing("card setup", setup_id)
            if cs["status"] != "open":
                raise Conflict("This card form was already completed.", code="card_setup_not_open")
            card_details(card_number)
            if "".join(ch for ch in card_number if ch.isdigit()) == CARD_DECLINED:
                return PageOutcome("failed", failure_code="card_declined")
            pm = await self._new_payment_method(session, card_number, cs["customer"])
            seti = await self._get(session, "setup_intent", cs["setup_intent"])
            seti.update(status="succeeded", payment_method=pm["id"])
            cs.update(status="complete")
            await self._put(session, seti)
            await self._put(session, cs)
            await self._emit(session, "payment_method.attached", pm)
            await self._emit(session, "setup_intent.succeeded", seti)
            await self._emit(session, "checkout.session.completed", cs)
            return PageOutcome("complete", payment_method=pm["id"])

        return await self._write(work)

    async def hosted_object(self, kind: str, object_id: str) -> dict[str, Any]:
        """An object as the hosted pages read it (`checkout.session`, `payment_intent`); 404 if unknown."""
        return await self._read(lambda s: self._get(s, kind, object_id))

    async def payment_method(self, pm_id: str) -> PaymentMethodInfo:
        pm = await self._read(lambda s: self._get(s, "payment_method", pm_id))
        return card_info(pm)

    async def detach_payment_method(self, pm_id: str) -> None:
        async def work(session: AsyncSession) -> None:
            pm = await self._get(session, "payment_method", pm_id)
            if pm["customer"] is None:
                raise refused(
                    "the payment method is not attached to a customer", "payment_method_unexpected_state"
                )
            previous = {"customer": pm["customer"]}
            pm["customer"] = None
            await self._put(session, pm)
            await self._emit(session, "payment_method.detached", pm, previous=previous)

        await self._write(work)

    # Payments --------------------------------------------------------------------------------------------

    async def create_checkout(
        self,
        customer_id: str,
        amount_cents: int,
        currency: str,
        return_url: str,
        metadata: dict[str, str],
        *,
        idempotency_key: str,
    ) -> Checkout:
        _positive_amount(amount_cents)

        async def create(session: AsyncSession) -> dict[str, Any]:
            await self._get(session, "customer", customer_id)
            cs_id = new_id("cs")
            cs = {
                "id": cs_id,
                "object": "checkout.session",
                "mode": "payment",
                "status": "open",
                "payment_status": "unpaid",
                "customer": customer_id,
                "setup_intent": None,
                "payment_intent": None,
                "amount_total": amount_cents,
                "currency": currency.lower(),
                "metadata": dict(metadata),
                "success_url": return_url,
                "url": f"{self.base_url}{PAGE_PREFIX}/checkout/{cs_id}",
                "created": _unix(),
                "livemode": False,
            }
            await self._put(session, cs)
            return {"id": cs_id, "url": cs["url"]}

        params = {
            "customer": customer_id,
            "amount": amount_cents,
            "currency": currency.lower(),
            "return_url": return_url,
            "metadata": metadata,
        }
        result = await self._idempotent("create_checkout", idempotency_key, params, create)
        return Checkout(id=result["id"], url=result["url"])

    async def _pay(
        self,
        session: AsyncSession,
        *,
        customer_id: str | None,
        pm: dict[str, Any],
        amount_cents: int,
        currency: str,
        metadata: dict[str, str],
        off_session: bool,
        checkout_session: str | None = None,
    ) -> dict[str, Any]:
        """A confirmed PaymentIntent: succeeded (with its charge), declined or waiting for action."""
        pi: dict[str, Any] = {
            "id": new_id("pi"),
            "object": "payment_intent",
            "amount": amount_cents,
            "amount_received": 0,
            "currency": currency,
            "customer": customer_id,
            "payment_method": pm["id"],
            "metadata": dict(metadata),
            "status": "processing",
            "latest_charge": None,
            "last_payment_error": None,
            "off_session": off_session,
            "created": _unix(),
            "livemode": False,
            "_checkout_session": checkout_session,
        }
        behaviour = pm.get("_behaviour")
        if behaviour == "card_declined":
            pi.update(
                status="requires_payment_method",
                last_payment_error={
                    "type": "card_error",
                    "code": "card_declined",
                    "decline_code": "generic_decline",
                    "message": "Your card was declined.",
                },
            )
            await self._put(session, pi)
            await self._emit(session, "payment_intent.payment_failed", pi)
        elif behaviour == "authentication_required":
            pi.update(
                status="requires_action",
                last_payment_error={
                    "type": "card_error",
                    "code": "authentication_required",
                    "message": "This payment requires authentication.",
                },
            )
            await self._put(session, pi)
            await self._emit(session, "payment_intent.requires_action", pi)
        else:
            await self._succeed(session, pi)
        return pi

    async def _succeed(self, session: AsyncSession, pi: dict[str, Any]) -> None:
        charge = {
            "id": new_id("ch"),
            "object": "charge",
            "amount": pi["amount"],
            "amount_refunded": 0,
            "currency": pi["currency"],
            "customer": pi["customer"],
            "payment_intent": pi["id"],
            "payment_method": pi["payment_method"],
            "refunded": False,
            "status": "succeeded",
            "paid": True,
            "created": _unix(),
            "livemode": False,
        }
        pi.update(
            status="succeeded",
            amount_received=pi["amount"],
            latest_charge=charge["id"],
            last_payment_error=None,
        )
        cs = None
        if pi.get("_checkout_session"):
            # A checkout is paid once: a second payment started on its page (one waiting for
            # authentication) cannot complete it again.
            cs = await self._get(session, "checkout.session", pi["_checkout_session"], lock=True)
            if cs["status"] != "open":
                raise Conflict("This checkout was already completed.", code="checkout_not_open")
        await self._put(session, charge)
        await self._put(session, pi)
        await self._emit(session, "payment_intent.succeeded", pi)
        if cs is not None:
            cs.update(status="complete", payment_status="paid", payment_intent=pi["id"])
            await self._put(session, cs)
            await self._emit(session, "checkout.session.completed", cs)

    async def complete_checkout(self, checkout_id: str, card_number: str) -> PageOutcome:
        """The hosted payment page was submitted with a card: paid (`payment_intent.succeeded`,
        `checkout.session.completed`), declined (the session stays open), or waiting for action."""

        async def work(session: AsyncSession) -> PageOutcome:
            # Locked: twenty submissions of one page at once complete it once.
            cs = await self._get(session, "checkout.session", checkout_id, lock=True)
            if cs["mode"] != "payment":
                raise object_missing("checkout", checkout_id)
            if cs["status"] != "open":
                raise Conflict("This checkout was already completed.", code="checkout_not_open")
            pm = await self._new_payment_method(session, card_number, None)
            pi = await self._pay(
                session,
                customer_id=cs["customer"],
                pm=pm,
                amount_cents=cs["amount_total"],
                currency=cs["currency"],
                metadata=cs["metadata"],
                off_session=False,
                checkout_session=cs["id"],
            )
            return _outcome(pi)

        return await self._write(work)

    async def complete_action(self, payment_intent_id: str) -> PageOutcome:
        """The customer passed the authentication a payment waited for: it succeeds (and completes its
        checkout, if it came from one)."""

        async def work(session: AsyncSession) -> PageOutcome:
            pi = await self._get(session, "payment_intent", payment_intent_id)
            if pi["status"] != "requires_action":
                raise Conflict(
                    "This payment is not waiting for authentication.",
                    code="payment_not_requiring_action",
                    current_state=pi["status"],
                )
            await self._succeed(session, pi)
            return _outcome(pi)

        return await self._write(work)

    async def charge_off_session(
        self,
        customer_id: str,
        payment_method_id: str,
        amount_cents: int,
        metadata: dict[str, str],
        *,
        idempotency_key: str,
        currency: str = "usd",
    ) -> Charge:
        _positive_amount(amount_cents)

        async def create(session: AsyncSession) -> dict[str, Any]:
            await self._get(session, "customer", customer_id)
            pm = await self._get(session, "payment_method", payment_method_id)
            if pm["customer"] != customer_id:
                raise refused(
                    "the payment method does not belong to this customer", "payment_method_not_attached"
                )
            pi = await self._pay(
                session,
                customer_id=customer_id,
                pm=pm,
                amount_cents=amount_cents,
                currency=currency.lower(),
                metadata=metadata,
                off_session=True,
            )
            error = pi["last_payment_error"] or {}
            status = {"succeeded": "succeeded", "requires_action": "requires_action"}.get(
                pi["status"], "failed"
            )
            return {"id": pi["id"], "status": status, "failure_code": error.get("code")}

        params = {
            "customer": customer_id,
            "payment_method": payment_method_id,
            "amount": amount_cents,
            "currency": currency.lower(),
            "metadata": metadata,
        }
        result = await self._idempotent("charge_off_session", idempotency_key, params, create)
        return Charge(id=result["id"], status=result["status"], failure_code=result["failure_code"])

    async def refund(self, charge_or_payment_id: str, amount_cents: int, *, idempotency_key: str) -> Refund:
        _positive_amount(amount_cents)

        async def create(session: AsyncSession) -> dict[str, Any]:
            if charge_or_payment_id.startswith("ch_"):
                charge = await self._get(session, "charge", charge_or_payment_id)
            else:
                pi = await self._get(session, "payment_intent", charge_or_payment_id)
                if pi["status"] != "succeeded" or not pi["latest_charge"]:
                    raise refused("the payment has not succeeded", "charge_not_refundable")
                charge = await self._get(session, "charge", pi["latest_charge"])
            remaining = charge["amount"] - charge["amount_refunded"]
            if amount_cents > remaining:
                raise refused(
                    f"the refund ({amount_cents}) is greater than the unrefunded amount ({remaining})",
                    "amount_too_large",
                )
            refund = {
                "id": new_id("re"),
                "object": "refund",
                "amount": amount_cents,
                "currency": charge["currency"],
                "charge": charge["id"],
                "payment_intent": charge["payment_intent"],
                "status": "succeeded",
                "created": _unix(),
            }
            charge["amount_refunded"] += amount_cents
            charge["refunded"] = charge["amount_refunded"] == charge["amount"]
            await self._put(session, refund)
            await self._put(session, charge)
            await self._emit(session, "refund.created", refund)
            await self._emit(session, "charge.refunded", charge)
            return {"id": refund["id"], "status": refund["status"]}

        result = await self._idempotent(
            "refund", idempotency_key, {"target": charge_or_payment_id, "amount": amount_cents}, create
        )
        return Refund(id=result["id"], status=result["status"])

    # Connect ---------------------------------------------------------------------------------------------

    async def create_connect_account(self, owner_ref: str, email: str, *, idempotency_key: str) -> str:
        async def create(session: AsyncSession) -> dict[str, Any]:
            account = {
                "id": new_id("acct"),
                "object": "account",
                "type": "express",
                "email": email,
                "metadata": {"owner_ref": owner_ref},
                "details_submitted": False,
                "charges_enabled": False,
                "payouts_enabled": False,
                "capabilities": {"transfers": "inactive"},
                "created": _unix(),
            }
            await self._put(session, account)
            return {"id": account["id"]}

        result = await self._idempotent(
            "create_connect_account", idempotency_key, {"owner_ref": owner_ref, "email": email}, create
        )
        return str(result["id"])

    async def create_account_link(self, account_id: str, return_url: str, refresh_url: str) -> AccountLink:
        """A single-use, short-lived link to the hosted onboarding, as Stripe's are: its URL holds a secret
        (only its hash is kept), never the account id, so knowing an account's id opens nothing."""
        secret = random_string(32)
        expires = (clock.now() + ACCOUNT_LINK_TTL).replace(microsecond=0)

        async def work(session: AsyncSession) -> None:
            await self._get(session, "account", account_id)
            link = {
                "id": _account_link_id(secret),
                "object": "account_link",
                "account": account_id,
                "expires_at": int(expires.timestamp()),
                "used": False,
            }
            await self._put(session, link)

        await self._write(work)
        # The hosted page sends the owner back to return_url (as Stripe's does): the link carries it.
        back = urlencode({"return_url": return_url, "refresh_url": refresh_url})
        return AccountLink(url=f"{self.base_url}{PAGE_PREFIX}/onboarding/{secret}?{back}", expires_at=expires)

    async def _live_link(self, session: AsyncSession, secret: str, *, lock: bool = False) -> dict[str, Any]:
        """An onboarding link that is neither used nor expired (404 otherwise, like an unknown one)."""
        link = await self._get(session, "account_link", _account_link_id(secret), lock=lock)
        if link["used"] or link["expires_at"] <= int(clock.now().timestamp()):
            raise object_missing("account link", "(used or expired)")
        return link

    async def account_link(self, secret: str) -> str:
        """The account a live onboarding link is for."""
        return str((await self._read(lambda s: self._live_link(s, secret)))["account"])

    async def complete_account_link(self, secret: str) -> AccountStatus:
        """The hosted onboarding submitted through its link: the link is spent (once, under a lock), the
        account's onboarding completes."""

        async def work(session: AsyncSession) -> AccountStatus:
            link = await self._live_link(session, secret, lock=True)
            link["used"] = True
            await self._put(session, link)
            return await self._complete_onboarding(session, str(link["account"]))

        return await self._write(work)

    async def complete_onboarding(self, account_id: str) -> AccountStatus:
        """The owner finished the hosted onboarding: payouts are enabled (`account.updated`). (Tests and
        the link's page; what Stripe's dashboard would do for an account.)"""
        return await self._write(lambda session: self._complete_onboarding(session, account_id))

    async def _complete_onboarding(self, session: AsyncSession, account_id: str) -> AccountStatus:
        account = await self._get(session, "account", account_id)
        previous = {
            k: account[k] for k in ("details_submitted", "charges_enabled", "payouts_enabled", "capabilities")
        }
        account.update(
            details_submitted=True,
            charges_enabled=True,
            payouts_enabled=True,
            capabilities={"transfers": "active"},
        )
        await self._put(session, account)
        await self._emit(session, "account.updated", account, account=account_id, previous=previous)
        return account_status(account)

    async def account_status(self, account_id: str) -> AccountStatus:
        return account_status(await self._read(lambda s: self._get(s, "account", account_id)))

    async def transfer(
        self,
        account_id: str,
        amount_cents: int,
        currency: str,
        metadata: dict[str, str],
        *,
        idempotency_key: str,
    ) -> Transfer:
        _positive_amount(amount_cents)

        async def create(session: AsyncSession) -> dict[str, Any]:
            account = await self._get(session, "account", account_id)
            if account["capabilities"].get("transfers") != "active":
                raise refused(
                    "the destination account cannot receive transfers until its onboarding is complete",
                    "transfers_not_enabled",
                )
            transfer = {
                "id": new_id("tr"),
                "object": "transfer",
                "amount": amount_cents,
                "amount_reversed": 0,
                "currency": currency.lower(),
                "destination": account_id,
                "metadata": dict(metadata),
                "reversed": False,
                "created": _unix(),
                "livemode": False,
            }
            await self._put(session, transfer)
            await self._emit(session, "transfer.created", transfer)
            return {"id": transfer["id"], "status": "paid"}

        params = {
            "account": account_id,
            "amount": amount_cents,
            "currency": currency.lower(),
            "metadata": metadata,
        }
        result = await self._idempotent("transfer", idempotency_key, params, create)
        return Transfer(id=result["id"], status=result["status"])

    async def reverse_transfer(self, transfer_id: str) -> Transfer:
        """Test lever: the transfer is reversed in full (`transfer.reversed`), as a failed payout would be."""

        async def work(session: AsyncSession) -> Transfer:
            transfer = await self._get(session, "transfer", transfer_id)
            if not transfer["reversed"]:
                transfer.update(reversed=True, amount_reversed=transfer["amount"])
                await self._put(session, transfer)
                await self._emit(session, "transfer.reversed", transfer)
            return Transfer(id=transfer_id, status="reversed")

        return await self._write(work)

    # Webhooks --------------------------------------------------------------------------------------------

    def parse_event(self, payload: bytes, signature_header: str) -> ProcessorEvent:
        return webhooks.parse_event(payload, signature_header, self.webhook_secret)

    def signed(self, event: SandboxEvent, *, timestamp: int | None = None) -> tuple[bytes, str]:
        """The event's body and its `Stripe-Signature` header, signed now (as each Stripe delivery is)."""
        return event.payload.encode(), webhooks.sign(event.payload, self.webhook_secret, timestamp)

    async def deliver(self, client: httpx.AsyncClient, url: str, *, limit: int = 100) -> int:
        """POST pending events to the app's webhook endpoint (`{base_url}/webhooks/processor`), oldest
        first; a 2xx marks an event delivered, anything else counts an attempt and keeps it pending.
        Returns how many were delivered."""
        import httpx  # loaded already by whoever made `client`

        async with self.db.session(write=False) as session:
            events = await pending_events(session, limit)
        delivered = 0
        for event in events:
            body, header = self.signed(event)
            error: str | None = None
            try:
                response = await client.post(
                    url,
                    content=body,
                    headers={"Content-Type": "application/json", webhooks.SIGNATURE_HEADER: header},
                )
                if not response.is_success:
                    error = f"HTTP {response.status_code}: {response.text[:500]}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:1000]
            if error is not None:
                metrics.DELIVERY_FAILURES.labels(channel="webhook").inc()
            async with self.db.session(write=True) as session, session.begin():
                await mark_delivered(session, event.id, error=error)
            delivered += error is None
        return delivered


async def pending_events(session: AsyncSession, limit: int = 100) -> list[SandboxEvent]:
    """Undelivered events, oldest first."""
    rows = await session.scalars(
        select(SandboxEvent)
        .where(SandboxEvent.delivered_at.is_(None))
        .order_by(SandboxEvent.created_at, SandboxEvent.id)
        .limit(limit)
    )
    return list(rows)


async def mark_delivered(session: AsyncSession, event_id: str, *, error: str | None = None) -> None:
    """Count a delivery attempt; without an error the event is delivered and leaves the pending scan."""
    values: dict[str, Any] = {"attempts": SandboxEvent.attempts + 1, "last_error": error}
    if error is None:
        values["delivered_at"] = clock.now()
    await session.execute(update(SandboxEvent).where(SandboxEvent.id == event_id).values(**values))


def _outcome(pi: dict[str, Any]) -> PageOutcome:
    error = pi.get("last_payment_error") or {}
    if pi["status"] == "succeeded":
        return PageOutcome("complete", payment_intent=pi["id"], payment_method=pi["payment_method"])
    if pi["status"] == "requires_action":
        return PageOutcome("requires_action", error.get("code"), pi["id"], pi["payment_method"])
    return PageOutcome("failed", error.get("code"), pi["id"], pi["payment_method"])
