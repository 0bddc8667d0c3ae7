"""pipeline.run_write's prepare step on demand (the publish's order): the write runs first; only when it
raises PrepareFirst is its attempt rolled back, the prepare step run, and the write run again. And a write
the database undid to break a deadlock runs again (at most `WRITE_ATTEMPTS` times), any other error once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import pipeline
from callboard_core.container import Core
from callboard_core.db.outage import as_outage
from callboard_core.errors import PrepareFirst
from callboard_core.idempotency.service import StoredResponse
from callboard_core.waitlist.models import WaitlistSignup
from tests.conftest import write_retries
from tests.factories import uid
from tests.jobs_helpers import postgres_only


class Action:
    """A write that adds a row, and asks for the prepare step when told to (before or after its write)."""

    def __init__(self, *, needs_prepare: bool) -> None:
        self.needs_prepare = needs_prepare
        self.writes: list[Any] = []
        self.prepares = 0
        self.email = f"{uid()}@example.test"

    async def authenticate(self, session: AsyncSession) -> str:
        return "caller"

    async def prepare(self, session: AsyncSession, caller: str) -> str:
        self.prepares += 1
        return "hashed"

    async def write(self, session: AsyncSession, caller: str, prepared: Any) -> str:
        self.writes.append(prepared)
        session.add(
            WaitlistSignup(email=self.email, name="n", use_case="u", role="REQUESTER", status="PENDING")
        )
        await session.flush()
        if prepared is None and self.needs_prepare:
            raise PrepareFirst  # after a write of its own: the attempt must leave nothing
        return f"done with {prepared}"

    async def rows(self, core: Core) -> int:
        async with core.uow(write=False) as uow:
            query = select(func.count()).where(WaitlistSignup.email == self.email)
            return int(await uow.session.scalar(query) or 0)


def _stored(answer: str) -> StoredResponse:
    return StoredResponse(200, answer.encode(), {})


async def _run(core: Core, action: Action, key: str | None = None, *, on_demand: bool = True) -> Any:
    once = pipeline.Idempotency(key, "POST", "/x", "fp") if key else None
    return await pipeline.run_write(
        core,
        action.authenticate,
        action.write,
        stored=_stored,
        idempotency_request=once,
        scope=lambda caller: f"test:{caller}:{action.email}",
        prepare=action.prepare,
        prepare_on_demand=on_demand,
    )


async def test_a_write_that_needs_nothing_runs_once_and_never_prepares(core: Core) -> None:
    action = Action(needs_prepare=False)
    assert await _run(core, action) == "done with None"
    assert (action.writes, action.prepares, await action.rows(core)) == ([None], 0, 1)


@pytest.mark.parametrize("key", [None, "k-1"])
async def test_prepare_first_rolls_the_attempt_back_prepares_once_and_writes_again(
    core: Core, key: str | None
) -> None:
    action = Action(needs_prepare=True)
    assert await _run(core, action, key) == "done with hashed"
    assert (action.writes, action.prepares) == ([None, "hashed"], 1)
    assert await action.rows(core) == 1  # the first attempt's row is gone
    if key:  # the key stayed reserved across both attempts; its retry replays the one answer
        retry = Action(needs_prepare=True)
        retry.email = action.email  # the same caller's scope
        replay = await _run(core, retry, key)
        assert isinstance(replay, StoredResponse) and replay.body == b"done with hashed"
        assert (retry.writes, retry.prepares) == ([], 0)


async def test_an_eager_prepare_runs_before_the_only_write(core: Core) -> None:
    action = Action(needs_prepare=True)
    assert await _run(core, action, on_demand=False) == "done with hashed"
    assert (action.writes, action.prepares, await action.rows(core)) == (["hashed"], 1, 1)


async def test_an_error_after_the_prepare_releases_the_key(core: Core) -> None:
    class Refuses(Action):
        async def write(self, session: AsyncSession, caller: str, prepared: Any) -> str:
            await super().write(session, caller, prepared)
            raise RuntimeError("refused")

    action = Refuses(needs_prepare=True)
    with pytest.raises(RuntimeError):
        await _run(core, action, "k-2")
    assert (action.writes, action.prepares, await action.rows(core)) == ([None, "hashed"], 1, 0)
    # Released: the same key runs the action again (and succeeds this time).
    again = Action(needs_prepare=True)
    again.email = action.email
    assert await _run(core, again, "k-2") == "done with hashed"


# --- a write the database undid for colliding with others runs again (`pipeline._retrying_conflicts`) ---


def _deadlock() -> DBAPIError:
    """What SQLAlchemy raises when PostgreSQL ends a transaction to break a lock cycle (SQLSTATE 40P01)."""
    return DBAPIError("UPDATE ...", {}, asyncpg.exceptions.DeadlockDetectedError("deadlock detected"))


class Colliding(Action):
    """A write that adds its row, then fails as the database would have it fail, `failures` times."""

    def __init__(self, error: Callable[[], Exception], failures: int) -> None:
        super().__init__(needs_prepare=False)
        self.error, self.failures = error, failures

    async def write(self, session: AsyncSession, caller: str, prepared: Any) -> str:
        answer = await super().write(session, caller, prepared)
        if len(self.writes) <= self.failures:
            raise self.error()
        return answer


@pytest.mark.write_retries
async def test_a_write_undone_by_a_deadlock_runs_again_and_lands_once(core: Core) -> None:
    """Undone twice, the third attempt lands: one row, one answer, the key's stored answer that one; each
    run again counted (`callboard_write_retries`)."""
    action = Colliding(_deadlock, failures=2)
    before = write_retries()
    assert await _run(core, action, "k-deadlock") == "done with None"
    assert (len(action.writes), await action.rows(core), write_retries() - before) == (3, 1, 2)
    assert await _run(core, action, "k-deadlock") == StoredResponse(200, b"done with None", {})  # replayed
    assert len(action.writes) == 3


@pytest.mark.write_retries
async def test_a_write_that_keeps_colliding_stops_after_three_attempts_with_a_503_that_says_so(
    core: Core,
) -> None:
    """After `WRITE_ATTEMPTS` undone attempts the conflict reaches the caller: nothing stored, the key free
    for the client's own retry, and the front ends' 503 says the request collided (not that the database
    is unreachable)."""
    action = Colliding(_deadlock, failures=99)
    with pytest.raises(DBAPIError) as raised:
        await _run(core, action, "k-stuck")
    assert (len(action.writes), await action.rows(core)) == (pipeline.WRITE_ATTEMPTS, 0)
    outage = as_outage(raised.value)
    assert outage is not None and outage.code == "database_unavailable" and outage.retry_after == 2
    assert "colliding with others" in outage.message and "not reachable" not in outage.message
    action.failures = 0  # the client retries with the same key: applied once
    assert await _run(core, action, "k-stuck") == "done with None"
    assert await action.rows(core) == 1


async def test_other_database_errors_are_not_run_again(core: Core) -> None:
    """Only a conflict the database broke is run again: any other error (a constraint refused, a lost
    connection) goes to the caller from the first attempt."""
    lost = Colliding(lambda: OperationalError("SELECT 1", {}, ConnectionResetError("reset")), failures=1)
    with pytest.raises(OperationalError):
        await _run(core, lost)
    refused = Colliding(lambda: IntegrityError("INSERT ...", {}, ValueError("duplicate key")), failures=1)
    with pytest.raises(IntegrityError):
        await _run(core, refused)
    assert (len(lost.writes), len(refused.writes), await lost.rows(core), await refused.rows(core)) == (
        1,
        1,
        0,
        0,
    )


@pytest.mark.write_retries
async def test_two_writes_that_deadlock_on_postgresql_both_land(core: Core) -> None:
    """Two writes that lock the same two rows in opposite orders: PostgreSQL ends one as a deadlock (after
    its `deadlock_timeout`), and instead of a 503 its write runs again once the other has committed. Both
    answer, each row written once."""
    postgres_only(core, "SQLite runs one write transaction at a time: two writes cannot deadlock")
    rows = []
    async with core.uow() as uow:
        for _ in range(2):
            row = WaitlistSignup(email=f"{uid()}@example.test", name="n", use_case="u", role="REQUESTER")
            uow.session.add(row)
            rows.append(row)
        await uow.session.flush()
        ids = [row.id for row in rows]
    first_locks = [asyncio.Event(), asyncio.Event()]

    class Crossing(Action):
        def __init__(self, side: int) -> None:
            super().__init__(needs_prepare=False)
            self.side = side

        async def write(self, session: AsyncSession, caller: str, prepared: Any) -> str:
            order = ids if self.side == 0 else ids[::-1]
            await session.execute(
                select(WaitlistSignup.id).where(WaitlistSignup.id == order[0]).with_for_update()
            )
            if not self.writes:  # the first attempt waits until both hold their first row: a lock cycle
                first_locks[self.side].set()
                await asyncio.wait_for(first_locks[1 - self.side].wait(), 5)
            await session.execute(
                select(WaitlistSignup.id).where(WaitlistSignup.id == order[1]).with_for_update()
            )
            return await super().write(session, caller, prepared)

    actions = [Crossing(0), Crossing(1)]
    before = write_retries()
    answers = await asyncio.wait_for(asyncio.gather(*(_run(core, a) for a in actions)), 15)
    assert answers == ["done with None", "done with None"]
    assert [await a.rows(core) for a in actions] == [1, 1]
    assert write_retries() - before == 1
