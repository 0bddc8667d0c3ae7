"""A finished unit of work leaves nothing for Python's cyclic collector: its session, identity map, rows and
hooks are freed by reference counting as the request ends. What the collector finds it must scan first, and
its passes cost every request CPU (docs/decisions.md, the twentieth part of issue 28)."""

from __future__ import annotations

import ast
import contextlib
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import InvalidRequestError, NoResultFound
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.orm.state import AttributeState

from callboard_core.container import Core
from callboard_core.db.lookup import reread
from callboard_core.db.rows import Passenger
from callboard_core.db.uow import UnitOfWork
from callboard_core.documents.numbering import Waiting
from callboard_core.jobs.models import Job
from callboard_core.waitlist.models import WaitlistSignup
from tests.factories import uid
from tests.jobs_helpers import new_agent, new_owner
from tests.payments_helpers import buyer, draft, publish_and_award

pytestmark = pytest.mark.usefixtures("books_balance")

# What a request builds and must free: the work, its sessions, the documents' waiting numbers, the
# per-attribute history objects of a refreshed row (Session.refresh builds them: `db.lookup.reread` does not).
_FREED = (UnitOfWork, Waiting, Passenger, AttributeState)


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """The cyclic collector stopped (what it would have freed stays in gc.get_objects())."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _alive() -> dict[str, int]:
    """Objects of the kinds a request must free, tracked by the collector (freed ones are not)."""
    counts = dict.fromkeys((kind.__name__ for kind in _FREED), 0)
    counts["Session"] = 0
    for o in gc.get_objects():
        if isinstance(o, _FREED):
            counts[type(o).__name__] += 1
        elif isinstance(o, AsyncSession | Session):
            counts["Session"] += 1
    return counts


async def test_a_finished_unit_of_work_and_its_session_are_freed_at_once(core: Core) -> None:
    with collector_off():
        async with core.uow() as uow:
            job_id = await uow.session.scalar(select(Job.id).limit(1))
            work, session = weakref.ref(uow), weakref.ref(uow.real_session())
        del uow
        assert (work(), session()) == (None, None), job_id
        # A unit of work whose session was never built (a request the read cache answered).
        async with core.uow(write=False) as uow:
            work = weakref.ref(uow)
        del uow
        assert work() is None
        # One whose work raised: rolled back, and freed all the same.
        with pytest.raises(LookupError):
            async with core.uow() as uow:
                await uow.session.scalar(select(Job.id).limit(1))
                work, session = weakref.ref(uow), weakref.ref(uow.real_session())
                raise LookupError
        del uow
        assert (work(), session()) == (None, None)


async def test_a_session_used_after_its_work_ended_says_so(core: Core) -> None:
    async with core.uow(write=False) as uow:
        lazy = uow.session
    del uow
    gc.collect()
    with pytest.raises(RuntimeError, match="unit of work has ended"):
        await lazy.scalar(select(Job.id).limit(1))


async def test_a_paid_job_from_draft_to_award_leaves_nothing_for_the_collector(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1200)
    with collector_off():
        before = _alive()
        await publish_and_award(client, b, job_id, worker)
        await core.bus.drain()
        await core.mailer.drain()
        assert _alive() == before


async def test_reread_takes_the_rows_values_as_they_stand_in_place(core: Core) -> None:
    signup = WaitlistSignup(email=f"{uid()}@example.test", name="n", use_case="u", role="REQUESTER")
    async with core.uow() as uow:
        uow.session.add(signup)
        await uow.session.flush()
        changed = {"notes": "set behind the object", "company": "Acme"}
        await uow.session.execute(
            update(WaitlistSignup).where(WaitlistSignup.id == signup.id).values(**changed)
        )
        await reread(uow.session, signup, "notes")  # the named column only
        assert (signup.notes, signup.company) == ("set behind the object", None)
        await reread(uow.session, signup)  # every column
        assert (signup.notes, signup.company) == ("set behind the object", "Acme")
        assert not uow.session.sync_session.dirty  # read, not set: nothing to write back
        uow.session.expunge(signup)
        with pytest.raises(InvalidRequestError, match="not this session's object"):
            await reread(uow.session, signup)
        signup = await uow.session.merge(signup)
        await uow.session.delete(signup)
        await uow.session.flush()
        with pytest.raises(NoResultFound):
            await reread(uow.session, signup, "notes")
        with pytest.raises(NoResultFound):
            await reread(uow.session, signup)


def test_the_core_reads_rows_again_with_reread_not_session_refresh() -> None:
    """Session.refresh leaves a cycle per refreshed object (its AttributeStates): `db.lookup.reread` instead."""
    core_dir = Path(__file__).resolve().parent.parent / "callboard_core"
    found = [
        f"{path.relative_to(core_dir)}:{node.lineno}"
        for path in sorted(core_dir.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "refresh"
        and ast.unparse(node.func.value).split(".")[-1] in ("session", "sync_session")
    ]
    assert found == []
