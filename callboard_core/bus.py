"""The core's one message bus (cosmicpython's, in miniature).

A package that has news publishes a typed event (`ledger.events.LedgerPosted`, `jobs.events.JobEventRecorded`,
`processor.events.CardSaved`, ...), defined in that package; it never knows who listens. Who listens is
one table, `callboard_core/handlers.py`, which `Core.build` turns into the core's `MessageBus`: nothing is
registered at import time and nothing is process-global, so two cores in one process (tests) never cross.

A handler runs in one of two places, declared in the table:
- `InTransaction`: inside the publishing unit of work, with its session; what it writes commits or rolls
  back with the fact (a receipt with its top-up, a queued payout with its capture). It may raise: the
  whole unit of work rolls back.
- `AfterCommit`: once the publishing unit of work has committed (counters on /metrics, mail), with the
  event only; a rolled-back fact never runs it.

A question (`Question[T]`) is asked, not published: every handler answers, and the asker gets the answers
in the table's order (what blocks an agent's archive, whether it has marketplace history).

The bus rides on the unit of work (`UnitOfWork.bus`): a session that no core's unit of work opened has no
bus, and publishing on it is a programming error (RuntimeError), never a silently lost event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.uow import after_commit

log = logging.getLogger("callboard.bus")


class Event:
    """A fact that happened (past tense); subclasses are frozen dataclasses."""

    __slots__ = ()


T = TypeVar("T")


class Question(Generic[T]):
    """A question every handler answers with a T (subclasses are frozen dataclasses)."""

    __slots__ = ()


E = TypeVar("E", bound=Event)


@dataclass(frozen=True)
class InTransaction:
    """Run `(session, event)` inside the publishing unit of work."""

    run: Callable[[AsyncSession, Any], Awaitable[object]]


@dataclass(frozen=True)
class AfterCommit:
    """Run `(event)` once the publishing unit of work has committed."""

    run: Callable[[Any], Awaitable[object]]


Handler = InTransaction | AfterCommit
HandlerTable = Mapping[type[Event] | type[Question[Any]], Sequence[Handler]]


# Background work under way at once: each holds a database connection for a moment, and a burst (a receipt
# mail for each of hundreds of top-ups) must queue here rather than take the pool from the requests.
BACKGROUND_SLOTS = 4


class MessageBus:
    def __init__(self, handlers: HandlerTable | None = None) -> None:
        self._handlers: dict[type, tuple[Handler, ...]] = {k: tuple(v) for k, v in (handlers or {}).items()}
        self._background: set[asyncio.Task[Any]] = set()
        self._slots = asyncio.Semaphore(BACKGROUND_SLOTS)

    def extended(self, extra: HandlerTable) -> MessageBus:
        """This table plus `extra` (each appended after the kind's own handlers), sharing the background
        work: a test listens in without touching the core's table."""
        table: dict[type, list[Handler]] = {k: list(v) for k, v in self._handlers.items()}
        for kind, handlers in extra.items():
            table.setdefault(kind, []).extend(handlers)
        bus = MessageBus(table)
        bus._background, bus._slots = self._background, self._slots
        return bus

    def handlers(self, kind: type) -> tuple[Handler, ...]:
        return self._handlers.get(kind, ())

    def kinds(self) -> list[type]:
        """Every event and question someone listens to."""
        return [k for k, handlers in self._handlers.items() if handlers]

    async def publish(self, session: AsyncSession, event: Event) -> int:
        """Run the event's handlers (in-transaction ones now, the others after the commit); how many there
        are (0: nobody listens)."""
        handlers = self.handlers(type(event))
        for handler in handlers:
            if isinstance(handler, InTransaction):
                await handler.run(session, event)
            else:
                after_commit(session, _after(handler, event))
        return len(handlers)

    async def ask(self, session: AsyncSession, question: Question[T]) -> list[T]:
        answers: list[T] = []
        for handler in self.handlers(type(question)):
            assert isinstance(handler, InTransaction), "a question is answered in the asker's transaction"
            answers.append(await handler.run(session, question))  # type: ignore[arg-type]
        return answers

    async def ask_one(self, session: AsyncSession, question: Question[T]) -> T:
        """The one answer to `question`; a table with no answerer (or two) is a wiring bug, never a
        silently skipped check."""
        answers = await self.ask(session, question)
        if len(answers) != 1:
            raise RuntimeError(
                f"{type(question).__name__} has {len(answers)} answerers in the bus's table, not 1"
            )
        return answers[0]

    def spawn(self, work: Coroutine[Any, Any, object]) -> None:
        """Run `work` in the background (the answer never waits for it), at most BACKGROUND_SLOTS at once;
        `drain` waits for it. A failure is logged (the work's own retry, such as the worker's pass over
        undelivered mail, picks it up)."""
        task = asyncio.ensure_future(self._bounded(work))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _bounded(self, work: Coroutine[Any, Any, object]) -> None:
        async with self._slots:
            try:
                await work
            except Exception:
                log.exception("background work %s failed", getattr(work, "__qualname__", work))

    async def drain(self) -> None:
        """Wait for background work under way (shutdown, tests)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
            await asyncio.sleep(0)  # let the done-callbacks take the finished tasks out of the set


def _after(handler: AfterCommit, event: Event) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        # The fact has committed: a failing listener is logged, never turned into the caller's error.
        try:
            await handler.run(event)
        except Exception:
            log.exception("after-commit handler %r for %s failed", handler.run, type(event).__name__)

    return run


def bus_of(session: AsyncSession) -> MessageBus:
    uow = session.info.get("uow")
    bus = getattr(uow, "bus", None)
    if bus is None:
        raise RuntimeError(
            "This session has no message bus: open it through a core's unit of work (core.uow()), so what it "
            "publishes reaches its handlers."
        )
    return bus


async def publish(session: AsyncSession, event: Event) -> int:
    """Publish `event` on the bus of the unit of work that owns `session`."""
    return await bus_of(session).publish(session, event)


async def ask(session: AsyncSession, question: Question[T]) -> list[T]:
    """Ask `question` on the bus of the unit of work that owns `session`: every handler's answer."""
    return await bus_of(session).ask(session, question)


async def ask_one(session: AsyncSession, question: Question[T]) -> T:
    """The one answer to `question` on the bus of the unit of work that owns `session`."""
    return await bus_of(session).ask_one(session, question)
