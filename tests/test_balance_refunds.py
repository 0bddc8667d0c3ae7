"""Staff refund an owner's unspent balance to the cards that paid it, through the real app and the sandbox
processor on SQLite and PostgreSQL: split over the card payments newest first, held then refunded, a credit
note per piece, once per idempotencyKey, never beyond the balance or what the cards paid, and a refusal
gives the hold back. The ledger verifies clean after every test."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from callboard_core.billing import refunds
from callboard_core.billing import service as billing
from callboard_core.container import Core
from callboard_core.documents.models import CommercialDocument
from callboard_core.processor import ProcessorUnavailable
from callboard_core.processor.sandbox.models import SandboxObject
from callboard_core.security.permissions import Role
from tests.conftest import owner_client
from tests.jobs_helpers import Owner, new_owner
from tests.payments_helpers import CARD_OK, RETURN_URL, fund, money, start_topup, submit_page, worker_pass


async def top_up(app: Any, core: Core, owner: Owner, cents: int) -> None:
    started = await start_topup(owner, cents)
    paid = await submit_page(app, started["url"], CARD_OK)
    assert paid.status_code == 303 and paid.headers["location"] == RETURN_URL, paid.text
    await worker_pass(app, core)


async def refunded_at_processor(core: Core) -> int:
    async with core.db.session(write=False) as session:
        rows = await session.scalars(select(SandboxObject).where(SandboxObject.type == "refund"))
        return sum(int(r.data["amount"]) for r in rows)


pytestmark = pytest.mark.usefixtures("books_balance")


async def test_a_refund_splits_over_the_card_payments_once(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await top_up(app, core, owner, 2000)
    await top_up(app, core, owner, 3000)
    assert await money(core, owner.user_id) == (5000, 0, 0)
    path = f"/admin/payments/buyer-profiles/{billing.profile_id(owner.user_id)}/refunds"
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    moderator, _ = await owner_client(app, core, role=Role.MODERATOR)
    async with admin, moderator:
        body = {"amountCents": 4000, "reason": "Closing the account.", "idempotencyKey": "close-1"}
        assert (await moderator.post(path, json=body)).status_code == 403
        first = await admin.post(path, json=body)
        assert first.status_code == 201, first.text
        assert first.json()["status"] == "SUCCEEDED"
        assert [p["amountCents"] for p in first.json()["refunds"]] == [3000, 1000]  # newest payment first
        again = await admin.post(path, json=body)
        assert again.status_code == 201 and again.json()["refunds"] == first.json()["refunds"]
        assert first.json()["balance"]["availableCents"] == 1000
        too_much = await admin.post(path, json={"amountCents": 1001, "reason": "x"})
        assert too_much.status_code == 409 and too_much.json()["code"] in (
            "insufficient_funds",
            "refund_exceeds_card_payments",
        )
    assert await money(core, owner.user_id) == (1000, 0, 0)
    assert await refunded_at_processor(core) == 4000
    async with core.uow(write=False) as uow:
        notes = await uow.session.scalar(
            select(func.count())
            .select_from(CommercialDocument)
            .where(
                CommercialDocument.owner_user_id == owner.user_id, CommercialDocument.kind == "CREDIT_NOTE"
            )
        )
    assert notes == 2


async def test_only_card_money_is_refunded(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await top_up(app, core, owner, 1000)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    profile = f"/admin/payments/buyer-profiles/{billing.profile_id(owner.user_id)}"
    async with admin:
        credit = await admin.post(profile + "/adjustments", json={"amountCents": 5000, "reason": "Goodwill."})
        assert credit.status_code == 201, credit.text  # platform money, not a card's: never refunded to one
        r = await admin.post(profile + "/refunds", json={"amountCents": 1500, "reason": "x"})
        assert r.status_code == 409 and r.json()["code"] == "refund_exceeds_card_payments", r.text
        assert r.json()["refundableCents"] >= 1000
    assert await money(core, owner.user_id) == (1000 + 5000, 0, 0)


async def fund_by_hand(core: Core, user_id: str) -> None:
    """Money that did not come through this processor's cards (a test top-up with an unknown reference):
    refunding it fails at the processor and the hold goes back."""
    await fund(core, user_id, 5000)


async def test_a_refused_refund_gives_the_hold_back(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await fund_by_hand(core, owner.user_id)  # its reference is no payment the processor knows
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    path = f"/admin/payments/buyer-profiles/{billing.profile_id(owner.user_id)}/refunds"
    async with admin:
        r = await admin.post(path, json={"amountCents": 2000, "reason": "x"})
        assert r.status_code == 201, r.text
        assert r.json()["status"] == "FAILED" and r.json()["refunds"][0]["error"]
    assert await money(core, owner.user_id) == (5000, 0, 0)


async def test_an_outage_or_a_crash_mid_refund_is_finished_by_the_retry_once(
    app: Any, core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = await new_owner(app, core)
    await top_up(app, core, owner, 3000)
    path = f"/admin/payments/buyer-profiles/{billing.profile_id(owner.user_id)}/refunds"
    body = {"amountCents": 1200, "reason": "Closing.", "idempotencyKey": "k-1"}
    real_refund, real_finish = core.processor.refund, refunds.finish

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise ProcessorUnavailable()

    async def crash_after_the_processor(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the process died before recording the processor's answer")

    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        monkeypatch.setattr(core.processor, "refund", down)
        r = await admin.post(path, json=body)
        assert r.status_code == 201 and r.json()["status"] == "PENDING", r.text
        assert await money(core, owner.user_id) == (1800, 1200, 0)  # held, not gone
        monkeypatch.setattr(core.processor, "refund", real_refund)
        monkeypatch.setattr(refunds, "finish", crash_after_the_processor)
        with pytest.raises(RuntimeError):  # the processor refunded; the process died before we recorded it
            await admin.post(path, json=body)
        assert await refunded_at_processor(core) == 1200
        monkeypatch.setattr(refunds, "finish", real_finish)
        done = await admin.post(path, json=body)
        assert done.status_code == 201 and done.json()["status"] == "SUCCEEDED", done.text
    assert await refunded_at_processor(core) == 1200  # the processor's key: refunded once
    assert await money(core, owner.user_id) == (1800, 0, 0)
