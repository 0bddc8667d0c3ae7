"""The processor events job payments listen to, registered explicitly by `Core.build` (idempotent)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.ledger import service as ledger
from callboard_core.processor import dispatch
from callboard_core.processor.port import ProcessorEvent


async def autotopup_succeeded(session: AsyncSession, event: ProcessorEvent) -> None:
    """An auto top-up made for a paid publish succeeded (also later, after the owner authenticated it): the
    money is credited under `topup:<payment intent>`, the key the publish posts too, so they converge."""
    pi = event.data
    meta = pi.get("metadata") or {}
    if meta.get("purpose") != "autotopup" or not meta.get("jobPaymentId") or not meta.get("userId"):
        return
    await ledger.top_up(
        session,
        user_id=str(meta["userId"]),
        amount_cents=int(pi["amount"]),
        processor_ref=str(pi["id"]),
        key=f"topup:{pi['id']}",
    )


def register() -> None:
    dispatch.handles("payment_intent.succeeded", autotopup_succeeded)
