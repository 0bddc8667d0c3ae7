"""The unit of work: one transaction per request or tool call. Services flush; this commits."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value

from callboard_core.db.engine import Database, dialect_of, insert_for

if TYPE_CHECKING:
    from callboard_core.bus import MessageBus

# session.info: the state moves db/rows.py writes with the last statement, not written yet (a rollback
# drops them with everything else).
PENDING_MOVES = "moves_pending"
# ... and other modules' statements that ride with it (a posting, notes: db/rows.Rider), not written yet.
PENDING_RIDERS = "riders_pending"
# ... and writes waiting for a statement the transaction sends anyway to carry them (db/rows.Passenger).
PASSENGERS = "passengers_waiting"


def drop_pending(info: dict[Any, Any]) -> None:
    """Forget the moves, riders and passengers waiting for the commit: the transaction rolls back."""
    info.pop(PENDING_MOVES, None)
    info.pop(PENDING_RIDERS, None)
    info.pop(PASSENGERS, None)


AfterCommit = Callable[[], Awaitable[None]]
BeforeCommit = Callable[[AsyncSession], Awaitable[None]]
H = TypeVar("H", bound=BeforeCommit)


class _LazySession:
    """Stands in for the AsyncSession until something uses it: a request answered from the read cache
    then never builds a session at all. It points to its unit of work weakly (the work points to it): no
    reference cycle, so a finished unit of work is freed at once (`UnitOfWork._release`)."""

    __slots__ = ("_uow",)
    _uow: weakref.ref[UnitOfWork]

    def __init__(self, uow: UnitOfWork) -> None:
        self._uow = weakref.ref(uow)

    def __getattr__(self, name: str) -> Any:
        uow = self._uow()
        if uow is None:
            raise RuntimeError("this session's unit of work has ended")
        return getattr(uow.real_session(), name)


class UnitsOfWork(Protocol):
    """What a background pass needs of the running core: units of work (`Core` is one). Domain passes take
    this port instead of the container, which sits above every domain."""

    def uow(self, *, write: bool = True) -> UnitOfWork: ...


class UnitOfWork:
    def __init__(self, db: Database, *, write: bool = True, bus: MessageBus | None = None) -> None:
        self.db = db
        self.write = write
        self.bus = bus  # what the work publishes reaches the core's handlers (callboard_core/bus.py)
        self._after_commit: list[AfterCommit] = []
        self._before_commit: dict[str, BeforeCommit] = {}
        self._last: dict[str, BeforeCommit] = {}  # before-commit hooks that run after all the others
        self._session: AsyncSession | None = None
        self._committing = False  # the before-commit hooks are running (`sole_statement`)
        self.session = cast(AsyncSession, _LazySession(self))

    def real_session(self) -> AsyncSession:
        if self._session is None:
            self._session = self.db.session(write=self.write)
            self._session.info["uow"] = self
            self.session = self._session
        return self._session

    async def __aenter__(self) -> UnitOfWork:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None and (self._before_commit or self._last):
                self._committing = True
                try:
                    await self._run_before_commit(self.real_session())
                except BaseException:
                    await self._end(commit=False)
                    raise
            await self._end(commit=exc_type is None)
            if exc_type is None:
                for hook in self._after_commit:
                    await hook()
        finally:
            self._release()

    def _release(self) -> None:
        """The finished work and its session let go of each other (the session's info names its work, which
        holds the session): without that cycle the request's session, identity map, rows and hooks are freed
        as it ends, by reference counting, instead of waiting for Python's cyclic collector, whose passes
        cost every request CPU in proportion to what is left for it (docs/decisions.md)."""
        if self._session is not None:
            self._session.sync_session.info.pop("uow", None)

    async def _end(self, *, commit: bool) -> None:
        session = self._session
        if session is not None:
            sync = session.sync_session
            if not commit:
                drop_pending(sync.info)
            if sync.in_transaction() or sync.identity_map or sync.new:
                try:
                    if commit:
                        await session.commit()
                    else:
                        await session.rollback()
                finally:
                    await session.close()

    async def _run_before_commit(self, session: AsyncSession) -> None:
        while self._before_commit or self._last:  # a hook may register another
            hooks = self._before_commit or self._last
            key = next(iter(hooks))
            await hooks.pop(key)(session)

    async def discard(self) -> None:
        """Undo what the work did so far and stay open: a refusal shown as a page (a response whose unit of
        work commits) keeps nothing of the refused action, and none of its commit hooks run."""
        self._after_commit.clear()
        self._before_commit.clear()
        self._last.clear()
        if self._session is not None:
            drop_pending(self._session.sync_session.info)
            await self._session.rollback()

    def after_commit(self, hook: AfterCommit) -> None:
        """Run hook once the transaction has committed (mail delivery, cache invalidation)."""
        self._after_commit.append(hook)

    async def run_now(self, key: str) -> None:
        """Run the before-commit hook registered under `key` now, if there is one (a later registration
        under the key starts afresh): a transaction that reads back what a hook would write."""
        hook = self._before_commit.pop(key, None) or self._last.pop(key, None)
        if hook is not None:
            await hook(self.real_session())

    def before_commit(self, key: str, hook: H, *, last: bool = False) -> H:
        """Run hook(session) once, as the last work of the transaction, before it commits (and not at all
        if it rolls back): work gathered from several events of one transaction and done once for all of
        them. Returns the hook registered under `key`: this one, or the one registered before (which the
        caller adds its part to). What the hook raises rolls the transaction back. A `last` hook runs after
        every other (rows the others may still add to: db/rows.py)."""
        return cast(H, (self._last if last else self._before_commit).setdefault(key, hook))


def before_commit(session: AsyncSession, key: str, hook: H, *, last: bool = False) -> H:
    """Register hook on the unit of work that owns session (see UnitOfWork.before_commit)."""
    uow = session.info.get("uow")
    if uow is None:
        raise RuntimeError("session is not owned by a UnitOfWork")
    return cast(H, uow.before_commit(key, hook, last=last))


class _Gathered:
    """What a transaction gathered under one key, handed to `run` once as its last work."""

    def __init__(self, run: Callable[[AsyncSession, list[Any]], Awaitable[object]]) -> None:
        self.run, self.items = run, list[Any]()

    async def __call__(self, session: AsyncSession) -> None:
        await self.run(session, self.items)


async def at_commit(
    session: AsyncSession,
    key: str,
    items: Sequence[Any],
    run: Callable[[AsyncSession, list[Any]], Awaitable[object]],
    *,
    last: bool = False,
) -> None:
    """Gather `items` under `key`; `run(session, every item gathered)` once, as the transaction's last work
    (a request's rows or notes of one kind in one statement; `last`: after every other hook). Nothing runs if
    the transaction rolls back. A session without a unit of work runs them now."""
    if not items:
        return
    if session.info.get("uow") is None:
        await run(session, list(items))
        return
    before_commit(session, key, _Gathered(run), last=last).items.extend(items)


_AUTOCOMMIT = {"isolation_level": "AUTOCOMMIT"}


async def sole_statement(session: AsyncSession) -> None:
    """Called by a commit hook about to send one statement (db/rows.py's INSERT of the gathered rows). When
    it is the transaction's only one (nothing sent before it, no hook after it, no object for the commit's
    flush), PostgreSQL runs it without BEGIN and COMMIT: a statement is atomic on its own, and a draft whose
    reads the read cache answered then costs one round trip instead of three (each ~0.2 ms of the server's
    CPU in the kernel alone on this machine: docs/decisions.md). SQLite's BEGIN IMMEDIATE costs no round
    trip, and takes the write lock its writers queue on: it keeps its transaction."""
    uow = session.info.get("uow")
    if not isinstance(uow, UnitOfWork) or not uow._committing or uow._before_commit or uow._last:
        return
    sync = session.sync_session
    if sync.in_transaction() or dialect_of(session) != "postgresql":  # a statement went, or an object came
        return
    if sync.new or sync.deleted or sync.dirty:
        return
    await session.connection(execution_options=_AUTOCOMMIT)


def after_commit(session: AsyncSession, hook: AfterCommit) -> None:
    """Register hook on the unit of work that owns session."""
    uow = session.info.get("uow")
    if uow is None:
        raise RuntimeError("session is not owned by a UnitOfWork")
    uow.after_commit(hook)


async def add_or_conflict(session: AsyncSession, row: object, conflict: Exception) -> None:
    """Insert `row` now, in one `INSERT … ON CONFLICT DO NOTHING RETURNING`: a row whose unique key is
    already held (a concurrent or earlier duplicate) inserts nothing and raises `conflict` (a 409, never a
    500), with no savepoint around it. The row becomes the session's own, its defaults filled in."""
    mapper = sa_inspect(type(row))
    state = sa_inspect(row)
    columns = {prop.key: prop.columns[0] for prop in mapper.column_attrs}
    values = {columns[key].key: value for key, value in state.dict.items() if key in columns}
    try:
        stored = (
            await session.execute(_insert_or_nothing(mapper.local_table, dialect_of(session)), values)
        ).first()
    except IntegrityError:  # not a duplicate (a row it points to went): the caller's refusal all the same
        raise conflict from None
    if stored is None:
        raise conflict
    for key, column in columns.items():
        set_committed_value(row, key, stored._mapping[column])
    make_transient_to_detached(row)
    session.add(row)


@functools.cache
def _insert_or_nothing(table: Any, dialect: str) -> Any:
    return insert_for(dialect)(table).on_conflict_do_nothing().returning(*table.c)


async def discard(session: AsyncSession) -> None:
    """`UnitOfWork.discard` for the unit of work this session belongs to (a lazy one not yet used has
    nothing to undo)."""
    uow = session._uow() if isinstance(session, _LazySession) else session.info.get("uow")
    if isinstance(uow, UnitOfWork):
        await uow.discard()
