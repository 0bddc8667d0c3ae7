"""A small fake Stripe API for the Stripe adapter's contract tests: a Starlette app under uvicorn on a free
127.0.0.1 port, speaking what the SDK speaks (form-encoded bodies with `a[b][0]=v` keys, Bearer secret
key, `Idempotency-Key`) and answering Stripe-shaped JSON objects and errors.

Only the endpoints the adapter calls exist. Idempotency as Stripe keeps it: the same key with the same
parameters replays the stored answer (2xx or a card error) with `Idempotent-Replayed: true`; the same key
with other parameters (or on another endpoint) is a 400 `idempotency_error`. The fake side of the hosted
pages (`complete_card_setup`, `complete_checkout`, `complete_onboarding`) runs in-process and records the
events Stripe would send, signed with the SDK's own `WebhookSignature.generate_signature_header`.
Test cards as in Stripe's test mode: 4242… succeeds, 4000000000000002 is declined (`card_declined`),
4000000000000341 saves but
its charges are declined, 4000002500003155 needs authentication.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl

import stripe
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.netutil import free_port

SECRET_KEY = "sk_test_fake_callboard"
WEBHOOK_SECRET = "whsec_fake_callboard"
CARDS = {
    "4000000000000341": "card_declined",
    "4242424242424242": None,
    "4000000000000002": "card_declined",
    "4000002500003155": "authentication_required",
}


class FakeStripeError(Exception):
    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.status = status
        self.error = error


def missing(kind: str, object_id: str, param: str = "id") -> FakeStripeError:
    return FakeStripeError(
        404,
        {
            "type": "invalid_request_error",
            "code": "resource_missing",
            "param": param,
            "message": f"No such {kind}: '{object_id}'",
        },
    )


def invalid(message: str, code: str | None = None, param: str | None = None) -> FakeStripeError:
    return FakeStripeError(
        400, {"type": "invalid_request_error", "code": code, "param": param, "message": message}
    )


def decode_form(body: bytes) -> dict[str, Any]:
    """`a[b][0][c]=v` form keys as nested dicts and lists (the SDK's encoding, undone)."""
    root: dict[str, Any] = {}
    for raw_key, value in parse_qsl(body.decode(), keep_blank_values=True):
        head, _, rest = raw_key.partition("[")
        parts = [head] + ([p.rstrip("]") for p in ("[" + rest).split("[")[1:]] if rest else [])
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value

    def listify(value: Any) -> Any:
        if isinstance(value, dict):
            items = {k: listify(v) for k, v in value.items()}
            if items and all(k.isdigit() for k in items):
                return [items[k] for k in sorted(items, key=int)]
            return items
        return value

    return listify(root)


class FakeStripe:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.idempotency: dict[str, tuple[str, str, int, dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, idempotency key)
        self.lock = threading.RLock()
        self.url = ""
        self.app = Starlette(
            routes=[
                Route("/v1/customers", self._post(self.create_customer), methods=["POST"]),
                Route("/v1/checkout/sessions", self._post(self.create_checkout_session), methods=["POST"]),
                Route("/v1/payment_intents", self._post(self.create_payment_intent), methods=["POST"]),
                Route("/v1/accounts", self._post(self.create_account), methods=["POST"]),
                Route("/v1/accounts/{id}", self._get("account"), methods=["GET"]),
                Route("/v1/account_links", self._post(self.create_account_link), methods=["POST"]),
                Route("/v1/transfers", self._post(self.create_transfer), methods=["POST"]),
                Route("/v1/refunds", self._post(self.create_refund), methods=["POST"]),
                Route("/v1/payment_methods/{id}", self._get("payment_method"), methods=["GET"]),
                Route("/v1/payment_methods/{id}/detach", self._post(self.detach), methods=["POST"]),
            ]
        )

    def reset(self) -> None:
        """Forget every object, key and event (each test starts with an empty account)."""
        with self.lock:
            self.objects.clear()
            self.idempotency.clear()
            self.events.clear()
            self.requests.clear()

    # Plumbing ------------------------------------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {SECRET_KEY}"

    def _post(self, handler: Callable[[dict[str, Any], dict[str, str]], dict[str, Any]]) -> Any:
        async def endpoint(request: Request) -> Response:
            if not self._authorized(request):
                return _error(401, {"type": "invalid_request_error", "message": "Invalid API Key provided"})
            params = decode_form(await request.body())
            key = request.headers.get("idempotency-key")
            with self.lock:
                self.requests.append(("POST", request.url.path, key))
                fingerprint = hashlib.sha256(
                    (request.url.path + json.dumps(params, sort_keys=True)).encode()
                ).hexdigest()
                if key and key in self.idempotency:
                    _path, stored_fingerprint, status, body = self.idempotency[key]
                    if stored_fingerprint != fingerprint:
                        return _error(
                            400,
                            {
                                "type": "idempotency_error",
                                "message": "Keys for idempotent requests can only be used with the same "
                                f"parameters they were first used with. Try using a key other than '{key}'.",
                            },
                        )
                    return JSONResponse(body, status_code=status, headers={"Idempotent-Replayed": "true"})
                try:
                    status, body = 200, handler(params, dict(request.path_params))
                except FakeStripeError as exc:
                    status, body = exc.status, {"error": exc.error}
                if key and (status == 200 or status == 402):  # Stripe keeps what the endpoint executed
                    self.idempotency[key] = (request.url.path, fingerprint, status, body)
                return JSONResponse(body, status_code=status)

        return endpoint

    def _get(self, kind: str) -> Any:
        async def endpoint(request: Request) -> Response:
            if not self._authorized(request):
                return _error(401, {"type": "invalid_request_error", "message": "Invalid API Key provided"})
            with self.lock:
                self.requests.append(("GET", request.url.path, None))
                try:
                    return JSONResponse(self.get(kind, request.path_params["id"]))
                except FakeStripeError as exc:
                    return _error(exc.status, exc.error)

        return endpoint

    def new(self, prefix: str, kind: str, **fields: Any) -> dict[str, Any]:
        obj = {"id": f"{prefix}_{secrets.token_hex(12)}", "object": kind, "created": int(time.time())}
        obj.update(livemode=False, **fields)
        self.objects[obj["id"]] = obj
        return obj

    def get(self, kind: str, object_id: str, param: str = "id") -> dict[str, Any]:
        obj = self.objects.get(object_id)
        if obj is None or obj["object"] != kind:
            raise missing(
                kind.replace("_", " ").replace("checkout.session", "checkout session"), object_id, param
            )
        return obj

    def count(self, kind: str) -> int:
        with self.lock:
            return sum(1 for o in self.objects.values() if o["object"] == kind)

    def emit(self, event_type: str, obj: dict[str, Any], *, account: str | None = None) -> None:
        event: dict[str, Any] = {
            "id": f"evt_{secrets.token_hex(12)}",
            "object": "event",
            "api_version": stripe.api_version,
            "created": int(time.time()),
            "data": {"object": {k: v for k, v in obj.items() if not k.startswith("_")}},
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
        }
        if account:
            event["account"] = account
        self.events.append(json.loads(json.dumps(event)))

    def take_events(self) -> list[tuple[bytes, str]]:
        """The recorded events as Stripe would deliver them: (body, Stripe-Signature header)."""
        with self.lock:
            events, self.events = self.events, []
        return [sign_event(event) for event in events]

    # Endpoints -----------------------------------------------------------------------------------------

    def create_customer(self, p: dict[str, Any], _: dict[str, str]) -> dict[str, Any]:
        return self.new("cus", "customer", email=p.get("email"), metadata=p.get("metadata", {}))

    def create_checkout_session(self, p: dict[str, Any], _: dict[str, str]) -> dict[str, Any]:
        customer = self.get("customer", p.get("customer", ""), "customer")["id"]
        if "success_url" not in p:
            raise invalid("Missing required param: success_url.", "parameter_missing", "success_url")
        common = dict(
            customer=customer, status="open", success_url=p["success_url"], metadata=p.get("metadata", {})
        )
        if p.get("mode") == "setup":
            seti = self.new(
                "seti",
                "setup_intent",
                customer=customer,
                status="requires_payment_method",
                payment_method=None,
                usage="off_session",
            )
            seti["client_secret"] = f"{seti['id']}_secret_{secrets.token_hex(8)}"
            cs = self.new(
                "cs",
                "checkout.session",
                mode="setup",
                setup_intent=seti["id"],
                payment_intent=None,
                payment_status="no_payment_required",
                amount_total=None,
                currency=p.get("currency"),
                client_secret=None,
                **common,
            )
        elif p.get("mode") == "payment":
            items = p.get("line_items") or []
            if len(items) != 1:
                raise invalid("line_items must hold one item.", "parameter_invalid", "line_items")
            price = items[0]["price_data"]
            amount = int(price["unit_amount"]) * int(items[0].get("quantity", "1"))
            cs = self.new(
                "cs",
                "checkout.session",
                mode="payment",
                setup_intent=None,
                payment_intent=None,
                payment_status="unpaid",
                amount_total=amount,
                currency=price["currency"],
                client_secret=None,
                **common,
            )
            cs["_payment_intent_metadata"] = (p.get("payment_intent_data") or {}).get("metadata", {})
        else:
            raise invalid("Invalid mode.", "parameter_invalid", "mode")
        cs["url"] = f"https://checkout.stripe.fake/c/pay/{cs['id']}"
        return cs

    def _payment_method(self, card_number: str, customer: str | None) -> dict[str, Any]:
        return self.new(
            "pm",
            "payment_method",
            type="card",
            customer=customer,
            metadata={},
            card={
                "brand": "visa",
                "last4": card_number[-4:],
                "exp_month": 12,
                "exp_year": 2030,
                "funding": "credit",
                "country": "US",
            },
            _number=card_number,
        )

    def _confirm(self, pi: dict[str, Any], pm: dict[str, Any]) -> FakeStripeError | None:
        fate = CARDS.get(pm["_number"], "card_declined")
        if fate is None:
            charge = self.new(
                "ch",
                "charge",
                amount=pi["amount"],
                amount_refunded=0,
                currency=pi["currency"],
                payment_intent=pi["id"],
                customer=pi["customer"],
                refunded=False,
                status="succeeded",
            )
            pi.update(status="succeeded", amount_received=pi["amount"], latest_charge=charge["id"])
            self.emit("payment_intent.succeeded", pi)
            return None
        status = "requires_action" if fate == "authentication_required" else "requires_payment_method"
        message = (
            "Your card was declined." if fate == "card_declined" else "This payment requires authentication."
        )
        error = {"type": "card_error", "code": fate, "message": message, "payment_method": {"id": pm["id"]}}
        pi.update(status=status, last_payment_error=dict(error))
        self.emit(
            "payment_intent.payment_failed" if fate == "card_declined" else "payment_intent.requires_action",
            pi,
        )
        return FakeStripeError(402, {**error, "payment_intent": dict(pi)})

    def create_payment_intent(self, p: dict[str, Any], _: dict[str, str]) -> dict[str, Any]:
        customer = self.get("customer", p.get("customer", ""), "customer")["id"]
        pm = self.get("payment_method", p.get("payment_method", ""), "payment_method")
        if pm["customer"] != customer:
            raise invalid(
                "The provided PaymentMethod is not attached to this customer.", None, "payment_method"
            )
        if p.get("confirm") != "true" or p.get("off_session") != "true":
            raise invalid("The fake only makes confirmed off-session PaymentIntents.", "parameter_invalid")
        pi = self.new(
            "pi",
            "payment_intent",
            amount=int(p["amount"]),
            amount_received=0,
            currency=p["currency"],
            customer=customer,
            payment_method=pm["id"],
            metadata=p.get("metadata", {}),
            status="processing",
            latest_charge=None,
            last_payment_error=None,
        )
        error = self._confirm(pi, pm)
        if error:
            raise error
        return pi

    def create_account(self, p: dict[str, Any], _: dict[str, str]) -> dict[str, Any]:
        if p.get("type") != "express":
            raise invalid("The fake only makes Express accounts.", "parameter_invalid", "type")
        requested = (p.get("capabilities") or {}).get("transfers", {}).get("requested") == "true"
        return self.new(
            "acct",
            "account",
            type="express",
            email=p.get("email"),
            metadata=p.get("metadata", {}),
            details_submitted=False,
            charges_enabled=False,
            payouts_enabled=False,
            capabilities={"transfers": "inactive"} if requested else {},
        )

    def create_account_link(self, p: dict[str, Any], _: dict[str, str]) -> dict[str, Any]:
        account = self.get("account", p.get("account", ""), "account")
        if p.get("type") != "account_onboarding" or not p.get("return_url") or not p.get("refresh_url"):
            raise invalid("type, return_url and refresh_url are required.", "parameter_missing")
        now = int(time.time())
        return {
            "object": "account_link",
            "created": now,
            "expires_at": now + 300,
            "url": f"https://connect.stripe.fake/setup/e/{account['id']}/{secrets.token_hex(8)}",
        }

    def create_transfer(self, p: dict[str, Any], _: dict[str, str]) -> dict[str, Any]:
        account = self.get("account", p.get("destination", ""), "destination")
        if account["capabilities"].get("transfers") != "active":
            raise invalid(
                "Your destination account needs to have at least one of the following capabilities "
                "enabled: transfers, crypto_transfers, legacy_payments",
                "insufficient_capabilities_for_transfer",
            )
        transfer = self.new(
            "tr",
            "transfer",
            amount=int(p["amount"]),
            amount_reversed=0,
            currency=p["currency"],
            destination=account["id"],
            metadata=p.get("metadata", {}),
            reversed=False,
        )
        self.emit("transfer.created", transfer)
        return transfer

    def create_refund(self, p: dict[str, Any], _: dict[str, str]) -> dict[str, Any]:
        if "charge" in p:
            charge = self.get("charge", p["charge"], "charge")
        else:
            pi = self.get("payment_intent", p.get("payment_intent", ""), "payment_intent")
            if pi["status"] != "succeeded":
                raise invalid(
                    "This PaymentIntent has no successful charge to refund.", "charge_not_refundable"
                )
            charge = self.get("charge", pi["latest_charge"])
        amount = int(p.get("amount", charge["amount"] - charge["amount_refunded"]))
        if amount > charge["amount"] - charge["amount_refunded"]:
            raise invalid(
                "Refund amount is greater than unrefunded amount on charge.", "amount_too_large", "amount"
            )
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] == charge["amount"]
        refund = self.new(
            "re",
            "refund",
            amount=amount,
            charge=charge["id"],
            currency=charge["currency"],
            payment_intent=charge["payment_intent"],
            status="succeeded",
        )
        self.emit("refund.created", refund)
        self.emit("charge.refunded", charge)
        return refund

    def detach(self, _: dict[str, Any], path: dict[str, str]) -> dict[str, Any]:
        pm = self.get("payment_method", path["id"])
        if pm["customer"] is None:
            raise invalid(
                "The payment method you provided is not attached to a customer.",
                "payment_method_unexpected_state",
            )
        pm["customer"] = None
        self.emit("payment_method.detached", pm)
        return pm

    # The hosted pages (what a customer does on Stripe's side) -------------------------------------------

    def complete_card_setup(self, session_id: str, card_number: str) -> str:
        with self.lock:
            cs = self.get("checkout.session", session_id)
            assert cs["mode"] == "setup" and cs["status"] == "open"
            if card_number == "4000000000000002":
                raise AssertionError("declined: Stripe's hosted form refuses to save this card")
            pm = self._payment_method(card_number, cs["customer"])
            seti = self.get("setup_intent", cs["setup_intent"])
            seti.update(status="succeeded", payment_method=pm["id"])
            cs["status"] = "complete"
            self.emit("payment_method.attached", pm)
            self.emit("setup_intent.succeeded", seti)
            self.emit("checkout.session.completed", cs)
            return str(pm["id"])

    def complete_checkout(self, session_id: str, card_number: str) -> str:
        with self.lock:
            cs = self.get("checkout.session", session_id)
            assert cs["mode"] == "payment" and cs["status"] == "open"
            pm = self._payment_method(card_number, None)
            pi = self.new(
                "pi",
                "payment_intent",
                amount=cs["amount_total"],
                amount_received=0,
                currency=cs["currency"],
                customer=cs["customer"],
                payment_method=pm["id"],
                metadata=cs["_payment_intent_metadata"],
                status="processing",
                latest_charge=None,
                last_payment_error=None,
            )
            if self._confirm(pi, pm) is None:
                cs.update(status="complete", payment_status="paid", payment_intent=pi["id"])
                self.emit("checkout.session.completed", cs)
            return str(pi["id"])

    def complete_onboarding(self, account_id: str) -> None:
        with self.lock:
            account = self.get("account", account_id)
            account.update(
                details_submitted=True,
                charges_enabled=True,
                payouts_enabled=True,
                capabilities={"transfers": "active"},
            )
            self.emit("account.updated", account, account=account_id)


def sign_event(
    event: dict[str, Any], *, timestamp: int | None = None, secret: str = WEBHOOK_SECRET
) -> tuple[bytes, str]:
    """A webhook delivery signed by the SDK's own signer: (body, Stripe-Signature)."""
    body = json.dumps(event)
    return body.encode(), stripe.WebhookSignature.generate_signature_header(body, secret, timestamp=timestamp)


def _error(status: int, error: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"error": error}, status_code=status)


def serve() -> Iterator[FakeStripe]:
    """Run a FakeStripe under uvicorn in a thread for the duration of the generator."""
    fake = FakeStripe()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(fake.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="fake-stripe", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the fake Stripe server did not start")
        time.sleep(0.01)
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(timeout=10)
