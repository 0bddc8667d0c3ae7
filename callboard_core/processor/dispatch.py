"""Who handles which processor event. The webhook route verifies and deduplicates an event, then calls
`dispatch` in its unit of work; the money packages register their handlers here (`Core.build` calls each
package's `register`, explicitly and idempotently), so the code after the webhook is the same for both
adapters and no package imports another to hear of a payment.

A handler must converge: the processor may send an event twice, out of order, or after the synchronous
path (a confirm route, an off-session charge) already recorded the fact. It changes money only through
the ledger's idempotency keys (a top-up is always `topup:<payment intent id>`) and moves states by
compare-and-set, so a repeat is a no-op.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.processor.port import ProcessorEvent

EventHandler = Callable[[AsyncSession, ProcessorEvent], Awaitable[None]]

_handlers: dict[str, list[EventHandler]] = {}


def handles(event_type: str, handler: EventHandler) -> None:
    """Call `handler` for every event of `event_type` (registering the same handler twice is a no-op)."""
    listeners = _handlers.setdefault(event_type, [])
    if handler not in listeners:
        listeners.append(handler)


def handled_types() -> list[str]:
    return sorted(t for t, listeners in _handlers.items() if listeners)


async def dispatch(session: AsyncSession, event: ProcessorEvent) -> int:
    """Run the event's handlers in the caller's transaction; the number run (0: an event we ignore)."""
    listeners = _handlers.get(event.type, ())
    for handler in listeners:
        await handler(session, event)
    return len(listeners)
