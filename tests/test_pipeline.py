"""pipeline.run_write's prepare step on demand (the publish's order): the write runs first; only when it
raises PrepareFirst is its attempt rolled back, the prepare step run, and the write run again."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import pipeline
from callboard_core.container import Core
from callboard_core.errors import PrepareFirst
from callboard_core.idempotency.service import StoredResponse
from callboard_core.waitlist.models import WaitlistSignup
from tests.factories import uid


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
