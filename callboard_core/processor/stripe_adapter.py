"""The Stripe adapter (`CALLBOARD_PROCESSOR=stripe`), through the SDK's `StripeClient`.

Every call is the SDK's `*_async` method over its async httpx client, so nothing blocks the event loop.
Cards are saved through a hosted Checkout Session in setup mode, top-ups are a hosted Checkout Session in
payment mode, auto top-ups an off-session PaymentIntent (`confirm=true, off_session=true`); payouts go
to Express accounts (onboarded through Account Links) as Transfers. Every create passes the caller's
idempotency key as `Idempotency-Key`, so the SDK's retries (and ours) never make a second object.
`CALLBOARD_STRIPE_API_BASE` points the client elsewhere (the tests' fake Stripe server).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import stripe

from callboard_core.config import Settings
from callboard_core.processor import webhooks
from callboard_core.processor.port import (
    AccountLink,
    AccountStatus,
    CardSetup,
    Charge,
    ChargeStatus,
    Checkout,
    PaymentMethodInfo,
    ProcessorEvent,
    ProcessorRefundStatus,
    ProcessorUnavailable,
    Refund,
    Transfer,
    key_reused,
    object_missing,
    refused,
)

T = TypeVar("T")
TOPUP_PRODUCT_NAME = "Callboard balance top-up"


class StripeProcessor:
    name = "stripe"

    def __init__(
        self,
        secret_key: str,
        webhook_secret: str,
        *,
        api_base: str = stripe.DEFAULT_API_BASE,
        max_network_retries: int = 2,
        timeout: float = 30.0,
    ) -> None:
        self.webhook_secret = webhook_secret
        self._http = stripe.HTTPXClient(timeout=timeout)
        self.client = stripe.StripeClient(
            secret_key,
            base_addresses={"api": api_base, "connect": api_base},
            http_client=self._http,
            max_network_retries=max_network_retries,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> StripeProcessor:
        assert settings.stripe_secret_key and settings.stripe_webhook_secret  # Settings validates both
        return cls(
            settings.stripe_secret_key, settings.stripe_webhook_secret, api_base=settings.stripe_api_base
        )

    async def aclose(self) -> None:
        await self._http.close_async()

    async def _call(self, what: str, object_id: str, key: str | None, call: Callable[[], Awaitable[T]]) -> T:
        """One SDK call, its errors as core errors (see the port)."""
        try:
            return await call()
        except stripe.IdempotencyError:
            raise key_reused(key or "") from None
        except stripe.InvalidRequestError as exc:
            if exc.http_status == 404 or exc.code == "resource_missing":
                raise object_missing(what, object_id) from None
            raise refused(exc.user_message or str(exc), exc.code) from None
        except stripe.CardError as exc:
            raise refused(exc.user_message or str(exc), exc.code) from None
        except stripe.StripeError as exc:  # connection, 5xx, rate limit, authentication
            raise ProcessorUnavailable(
                code="processor_unavailable", processor_error=type(exc).__name__
            ) from None

    @staticmethod
    def _options(key: str) -> stripe.RequestOptions:
        return {"idempotency_key": key}

    # Customers and cards ---------------------------------------------------------------------------------

    async def create_customer(self, user_id: str, email: str, *, idempotency_key: str) -> str:
        customer = await self._call(
            "customer",
            user_id,
            idempotency_key,
            lambda: self.client.v1.customers.create_async(
                {"email": email, "metadata": {"user_id": user_id}}, self._options(idempotency_key)
            ),
        )
        return str(customer.id)

    async def create_card_setup(
        self, customer_id: str, return_url: str, *, idempotency_key: str
    ) -> CardSetup:
        session = await self._call(
            "customer",
            customer_id,
            idempotency_key,
            lambda: self.client.v1.checkout.sessions.create_async(
                _params(
                    {
                        "mode": "setup",
                        "customer": customer_id,
                        "currency": "usd",
                        "payment_method_types": ["card"],
                        "success_url": return_url,
                        "cancel_url": return_url,
                    }
                ),
                self._options(idempotency_key),
            ),
        )
        return CardSetup(
            id=session.id, client_secret=getattr(session, "client_secret", None), url=str(session.url)
        )

    async def payment_method(self, pm_id: str) -> PaymentMethodInfo:
        pm = await self._call(
            "payment method", pm_id, None, lambda: self.client.v1.payment_methods.retrieve_async(pm_id)
        )
        card = getattr(pm, "card", None)
        return PaymentMethodInfo(
            id=pm.id,
            type=pm.type,
            brand=card.brand if card else None,
            last4=card.last4 if card else None,
            exp_month=card.exp_month if card else None,
            exp_year=card.exp_year if card else None,
            customer_id=_ref(getattr(pm, "customer", None)),
        )

    async def detach_payment_method(self, pm_id: str) -> None:
        await self._call(
            "payment method", pm_id, None, lambda: self.client.v1.payment_methods.detach_async(pm_id)
        )

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
        session = await self._call(
            "customer",
            customer_id,
            idempotency_key,
            lambda: self.client.v1.checkout.sessions.create_async(
                _params(
                    {
                        "mode": "payment",
                        "customer": customer_id,
                        "payment_method_types": ["card"],
                        "line_items": [
                            {
                                "quantity": 1,
                                "price_data": {
                                    "currency": currency.lower(),
                                    "unit_amount": amount_cents,
                                    "product_data": {"name": TOPUP_PRODUCT_NAME},
                                },
                            }
                        ],
                        "metadata": metadata,
                        "payment_intent_data": {"metadata": metadata},
                        "success_url": return_url,
                        "cancel_url": return_url,
                    }
                ),
                self._options(idempotency_key),
            ),
        )
        return Checkout(id=session.id, url=str(session.url))

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
        async def create() -> Charge:
            try:
                pi = await self.client.v1.payment_intents.create_async(
                    {
                        "amount": amount_cents,
                        "currency": currency.lower(),
                        "customer": customer_id,
                        "payment_method": payment_method_id,
                        "off_session": True,
                        "confirm": True,
                        "metadata": metadata,
                    },
                    self._options(idempotency_key),
                )
            except stripe.CardError as exc:
                # A decline is an answer, not a failure: the PaymentIntent exists and says why.
                body: Any = exc.json_body or {}
                error = body.get("error") or {}
                intent = error.get("payment_intent") or {}
                status: ChargeStatus = (
                    "requires_action" if exc.code == "authentication_required" else "failed"
                )
                return Charge(id=str(intent.get("id", "")), status=status, failure_code=exc.code)
            last_error = getattr(pi, "last_payment_error", None)
            code = last_error.code if last_error else None
            if pi.status == "succeeded":
                return Charge(id=pi.id, status="succeeded")
            if pi.status == "requires_action":
                return Charge(
                    id=pi.id, status="requires_action", failure_code=code or "authentication_required"
                )
            return Charge(id=pi.id, status="failed", failure_code=code)

        return await self._call("payment method", payment_method_id, idempotency_key, create)

    async def refund(self, charge_or_payment_id: str, amount_cents: int, *, idempotency_key: str) -> Refund:
        target = "charge" if charge_or_payment_id.startswith("ch_") else "payment_intent"
        refund = await self._call(
            target.replace("_", " "),
            charge_or_payment_id,
            idempotency_key,
            lambda: self.client.v1.refunds.create_async(
                _params({target: charge_or_payment_id, "amount": amount_cents}),
                self._options(idempotency_key),
            ),
        )
        statuses: dict[str | None, ProcessorRefundStatus] = {
            "pending": "pending",
            "succeeded": "succeeded",
            "canceled": "canceled",
        }
        status = statuses.get(refund.status, "failed")
        return Refund(id=refund.id, status=status)

    # Connect ---------------------------------------------------------------------------------------------

    async def create_connect_account(self, owner_ref: str, email: str, *, idempotency_key: str) -> str:
        account = await self._call(
            "account",
            owner_ref,
            idempotency_key,
            lambda: self.client.v1.accounts.create_async(
                {
                    "type": "express",
                    "email": email,
                    "metadata": {"owner_ref": owner_ref},
                    "capabilities": {"transfers": {"requested": True}},
                },
                self._options(idempotency_key),
            ),
        )
        return str(account.id)

    async def create_account_link(self, account_id: str, return_url: str, refresh_url: str) -> AccountLink:
        link = await self._call(
            "account",
            account_id,
            None,
            lambda: self.client.v1.account_links.create_async(
                {
                    "account": account_id,
                    "type": "account_onboarding",
                    "return_url": return_url,
                    "refresh_url": refresh_url,
                }
            ),
        )
        return AccountLink(url=link.url, expires_at=datetime.fromtimestamp(link.expires_at, UTC))

    async def account_status(self, account_id: str) -> AccountStatus:
        account = await self._call(
            "account", account_id, None, lambda: self.client.v1.accounts.retrieve_async(account_id)
        )
        return AccountStatus(
            details_submitted=bool(getattr(account, "details_submitted", False)),
            charges_enabled=bool(getattr(account, "charges_enabled", False)),
            payouts_enabled=bool(getattr(account, "payouts_enabled", False)),
        )

    async def transfer(
        self,
        account_id: str,
        amount_cents: int,
        currency: str,
        metadata: dict[str, str],
        *,
        idempotency_key: str,
    ) -> Transfer:
        transfer = await self._call(
            "account",
            account_id,
            idempotency_key,
            lambda: self.client.v1.transfers.create_async(
                {
                    "amount": amount_cents,
                    "currency": currency.lower(),
                    "destination": account_id,
                    "metadata": metadata,
                },
                self._options(idempotency_key),
            ),
        )
        return Transfer(id=transfer.id, status="reversed" if transfer.reversed else "paid")

    # Webhooks --------------------------------------------------------------------------------------------

    def parse_event(self, payload: bytes, signature_header: str) -> ProcessorEvent:
        return webhooks.parse_event(payload, signature_header, self.webhook_secret)


def _params(values: dict[str, Any]) -> Any:
    """Our plain dict as the SDK's typed parameters (TypedDicts)."""
    return values


def _ref(value: Any) -> str | None:
    """An expandable reference: an id, or the expanded object's id."""
    if value is None or isinstance(value, str):
        return value
    return str(value.id)
