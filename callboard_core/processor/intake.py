"""Webhook intake: verify a processor event, record it once, publish it as our own fact (processor/events.py)
on the bus, whose handlers run in the same transaction.

The event id is unique in `processor_events`, and the row is inserted in the unit of work that runs the
handlers, so an event is handled exactly once: a repeated delivery finds the row (or, delivered
concurrently, waits on the unique index until the first commits) and answers without running anything; a
handler that fails rolls the whole unit back, row included, so the processor's retry runs it again.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock
from callboard_core.errors import CallboardError, Unavailable
from callboard_core.processor.models import ProcessorEventRecord
from callboard_core.processor.port import PaymentProcessor
from callboard_core.processor.translate import fact_of
from callboard_core.schemas import ApiModel

log = logging.getLogger("callboard.webhooks")


class WebhookAck(ApiModel):
    """What the webhook answers the processor: `duplicate` when the event was already handled (nothing ran
    again), `handled` when handlers ran (false: a type we record and ignore)."""

    received: bool
    event_id: str
    type: str
    duplicate: bool
    handled: bool


class WebhookHandlerFailed(Unavailable):
    """A handler failed: nothing of the event was kept, so the processor's next delivery retries it."""

    code = "webhook_handler_failed"
    message = "Handling this event failed and nothing was recorded; deliver it again later."


async def _record(session: AsyncSession, event_id: str, event_type: str) -> ProcessorEventRecord | None:
    """The event's new row, or None when it was already received (race-safe: a savepoint insert)."""
    if await session.scalar(select(ProcessorEventRecord.id).where(ProcessorEventRecord.event_id == event_id)):
        return None
    row = ProcessorEventRecord(event_id=event_id, type=event_type)
    await session.flush()
    try:
        async with session.begin_nested():
            session.add(row)
            await session.flush()
    except IntegrityError:
        return None
    return row


async def receive(
    session: AsyncSession, processor: PaymentProcessor, payload: bytes, signature: str | None
) -> WebhookAck:
    """Verify (400 `invalid_signature`), deduplicate and handle one webhook delivery, in the caller's unit
    of work. A handler's failure is raised as 503 `webhook_handler_failed` and rolls everything back."""
    event = processor.parse_event(payload, signature or "")
    row = await _record(session, event.id, event.type)
    if row is None:
        return WebhookAck(received=True, event_id=event.id, type=event.type, duplicate=True, handled=False)
    try:
        fact = fact_of(event)
        ran = await bus.publish(session, fact) if fact is not None else 0
    except Exception as exc:
        log.exception("handling processor event %s (%s) failed", event.id, event.type)
        reason = exc.code if isinstance(exc, CallboardError) else type(exc).__name__
        raise WebhookHandlerFailed(event_id=event.id, event_type=event.type, reason=reason) from exc
    if ran:
        row.handled_at = clock.now()
        await session.flush()
    return WebhookAck(received=True, event_id=event.id, type=event.type, duplicate=False, handled=bool(ran))
