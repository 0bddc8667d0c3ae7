"""The one compare-and-set every state machine moves by (callboard_core/states.py): the job lifecycle's
tables and the others' (the waitlist's, the agents')."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select

from callboard_core import clock, states
from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.agents.states import AGENT_MOVES, CLAIM_MOVES, ClaimStatus
from callboard_core.container import Core
from callboard_core.db import lookup
from callboard_core.db.rows import naming_its_tables
from callboard_core.db.uow import PENDING_MOVES
from callboard_core.errors import Conflict
from callboard_core.jobs import events, participation
from callboard_core.jobs import service as job_service
from callboard_core.jobs.models import Job, JobEvent, ParticipationSlot
from callboard_core.jobs.states import JOB_MOVES, JobStatus
from callboard_core.principals import SYSTEM, Actor
from callboard_core.waitlist.models import WAITLIST_MOVES, WaitlistSignup, WaitlistStatus
from tests.jobs_helpers import (
    acknowledged,
    create_published,
    job_body,
    new_agent,
    new_owner,
    postgres_only,
)

SQLITE_MOVES = "SQLite: a move is its own statement (no round trip to save)"


async def test_move_is_compare_and_set_along_the_table(app: Any, core: Core, client: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    created = await client.post("/api/v2/jobs", headers=requester.h, json=job_body())
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    publish = JOB_MOVES["publish"]
    async with core.uow() as uow:
        session = uow.session
        job = await session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.DRAFT
        # A guard that says no: nothing moves.
        assert (
            await states.compare_and_set(
                session, Job, job_id, publish, JobStatus.ADMISSION_OPEN, Job.id == "x"
            )
            is None
        )
        now = clock.now()
        moved = await states.move(
            session, Job, job_id, publish, JobStatus.ADMISSION_OPEN, what="job", published_at=now
        )
        # The session's copy is the moved row, refreshed.
        assert moved is job and job.status == JobStatus.ADMISSION_OPEN and job.published_at is not None
        # The same move again: the table no longer allows it, so a 409 naming the current state.
        with pytest.raises(Conflict) as refused:
            await states.move(session, Job, job_id, publish, JobStatus.ADMISSION_OPEN, what="job")
        assert refused.value.code == "invalid_state"
        assert refused.value.details["current_state"] == JobStatus.ADMISSION_OPEN
        # A stale caller (it read DRAFT) loses the race the same way.
        with pytest.raises(Conflict) as lost:
            await states.move(
                session, Job, job_id, publish, JobStatus.ADMISSION_OPEN, what="job", current=JobStatus.DRAFT
            )
        assert lost.value.details["current_state"] == JobStatus.ADMISSION_OPEN
        # Only rows in an allowed source state move in a set-based move.
        assert (
            await states.compare_and_set_where(
                session, Job, publish, JobStatus.ADMISSION_OPEN, Job.id == job_id
            )
            == []
        )


@contextlib.contextmanager
def updates_sent(core: Core) -> Iterator[list[str]]:
    """The UPDATE statements sent through the write engine meanwhile."""
    with statements_sent(core, "UPDATE") as sent:
        yield sent


@contextlib.contextmanager
def statements_sent(core: Core, starting: str = "") -> Iterator[list[str]]:
    """The statements (those starting so) sent through the write engine meanwhile, whitespace folded."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        folded = " ".join(statement.split())
        if folded.upper().startswith(starting):
            sent.append(folded)

    engine = core.db.write_engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", record)


def returned_columns(statement: str) -> set[str]:
    returning = statement.upper().rpartition("RETURNING")[2]
    return {column.strip().rpartition(".")[2].lower() for column in returning.split(",")}


async def draft_id(app: Any, core: Core, client: Any) -> str:
    requester = await new_agent(await new_owner(app, core))
    created = await client.post("/api/v2/jobs", headers=requester.h, json=job_body())
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def publish_move(core: Core, session: Any, job_id: str) -> tuple[Job, list[str]]:
    """The job published by `states.move`, and the UPDATE statements that sent."""
    with updates_sent(core) as sent:
        moved = await states.move(
            session,
            Job,
            job_id,
            JOB_MOVES["publish"],
            JobStatus.ADMISSION_OPEN,
            what="job",
            published_at=clock.now(),
        )
    return moved, sent


async def test_a_move_of_a_locked_row_reads_back_only_what_it_set(app: Any, core: Core, client: Any) -> None:
    """The session holds the row as it stands (locked: FOR UPDATE on PostgreSQL, SQLite's one writer): the
    move sets the session's object. On SQLite its UPDATE returns only the columns it set; on PostgreSQL the
    state the lock read decided it, and the guarded UPDATE goes with the commit's statement. The row is
    stored so."""
    job_id = await draft_id(app, core, client)
    async with core.uow() as uow:
        session = uow.session
        job = await job_service.lock(session, job_id)
        read_at, title = job.updated_at, job.title
        moved, sent = await publish_move(core, session, job_id)
        assert moved is job and job.status == JobStatus.ADMISSION_OPEN
        assert job.published_at is not None and job.updated_at >= read_at and job.title == title
        if core.db.is_sqlite:
            assert len(sent) == 1 and returned_columns(sent[0]) == {"status", "published_at", "updated_at"}
        else:
            assert sent == [] and len(session.sync_session.info[PENDING_MOVES]) == 1
        published_at, updated_at = job.published_at, job.updated_at
    async with core.uow() as uow:
        stored = await uow.session.get(Job, job_id)
        assert stored is not None and stored.status == JobStatus.ADMISSION_OPEN
        assert (stored.published_at, stored.updated_at) == (published_at, updated_at)


async def quiet_draft_id(app: Any, core: Core, client: Any) -> str:
    """A draft, its request's background work (the key's last use) done: only the test's statements follow."""
    job_id = await draft_id(app, core, client)
    await core.bus.drain()
    return job_id


async def stored_status(core: Core, job_id: str) -> str:
    async with core.uow(write=False) as uow:
        status = await uow.session.scalar(select(Job.status).where(Job.id == job_id))
        return str(status)


async def test_a_held_move_rides_with_the_commit_and_no_read_sees_the_row_behind_it(
    app: Any, core: Core, client: Any
) -> None:
    """PostgreSQL: a locked row's move waits for the transaction's last statement, but a statement that names
    its table writes it first (the read sees the moved row); one that does not leaves it waiting. The commit
    writes it with the gathered rows: one statement for both."""
    postgres_only(core, SQLITE_MOVES)
    job_id = await quiet_draft_id(app, core, client)
    async with core.uow() as uow:
        session = uow.session
        job = await job_service.lock(session, job_id)
        with statements_sent(core) as sent:
            await publish_move(core, session, job_id)
            # A statement that says it names no jobs table leaves the move waiting; one that does not say
            # (or names the table) writes it first.
            agents_only = naming_its_tables(select(Agent.id).where(Agent.id == job.requester_agent_id))
            await session.execute(agents_only)
            assert len(sent) == 1 and "jobs" not in sent[0]
            assert (
                await session.scalar(select(Job.status).where(Job.id == job_id)) == JobStatus.ADMISSION_OPEN
            )
            assert sent[1].startswith("UPDATE jobs") and PENDING_MOVES not in session.sync_session.info

    other_id = await quiet_draft_id(app, core, client)
    with statements_sent(core) as sent:
        async with core.uow() as uow:
            session = uow.session
            job = await job_service.lock(session, other_id)
            await states.move(
                session, Job, other_id, JOB_MOVES["publish"], JobStatus.ADMISSION_OPEN, what="job"
            )
            await events.record(session, other_id, "published", SYSTEM, {})
    written = [s for s in sent if "jobs SET" in s]
    assert len(written) == 1 and written[0].startswith("WITH") and "INSERT INTO job_events" in written[0]
    assert await stored_status(core, other_id) == JobStatus.ADMISSION_OPEN


async def test_a_held_move_goes_with_a_rollback_and_a_broken_guard_fails_the_commit(
    app: Any, core: Core, client: Any
) -> None:
    """PostgreSQL: a transaction that rolls back writes none of its moves; a move whose guard finds the row in
    another state than the lock read (a broken lock) fails the commit: nothing of the transaction is stored,
    and the caller is told to try again."""
    postgres_only(core, SQLITE_MOVES)
    job_id = await quiet_draft_id(app, core, client)
    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            job = await job_service.lock(uow.session, job_id)  # held: the session's copy is the row
            await publish_move(core, uow.session, job_id)
            assert len(uow.session.sync_session.info[PENDING_MOVES]) == 1 and job.status == "ADMISSION_OPEN"
            raise RuntimeError("the request failed after the move")
    assert await stored_status(core, job_id) == JobStatus.DRAFT

    with pytest.raises(Conflict) as broken:
        async with core.uow() as uow:
            session = uow.session
            job = await job_service.lock(session, job_id)
            await publish_move(core, session, job_id)
            await events.record(session, job_id, "published", SYSTEM, {})
            pending = session.sync_session.info[PENDING_MOVES]
            pending[0] = dataclasses.replace(pending[0], source=JobStatus.CANCELLED)  # as a broken lock
    assert broken.value.code == "invalid_state" and "try again" in broken.value.message
    assert await stored_status(core, job_id) == JobStatus.DRAFT
    async with core.uow(write=False) as uow:
        assert (
            await uow.session.scalar(
                select(JobEvent.id).where(JobEvent.kind == "published", JobEvent.job_id == job_id)
            )
            is None
        )


async def test_held_moves_of_one_row_a_flush_and_a_savepoint_keep_their_order(
    app: Any, core: Core, client: Any
) -> None:
    """PostgreSQL: two moves of one held row are one UPDATE from the stored state to the last; a flush of
    the row's other columns writes the move before it; inside a savepoint a move is sent at once (a rollback
    to the savepoint undoes it there)."""
    postgres_only(core, SQLITE_MOVES)
    job_id = await quiet_draft_id(app, core, client)
    async with core.uow() as uow:
        session = uow.session
        job = await job_service.lock(session, job_id)
        await publish_move(core, session, job_id)
        await states.move(session, Job, job_id, JOB_MOVES["staff_cancel"], JobStatus.CANCELLED, what="job")
        assert len(session.sync_session.info[PENDING_MOVES]) == 1
    assert await stored_status(core, job_id) == JobStatus.CANCELLED

    flushed_id = await quiet_draft_id(app, core, client)
    async with core.uow() as uow:
        session = uow.session
        job = await job_service.lock(session, flushed_id)
        await publish_move(core, session, flushed_id)
        job.title = "Renamed after publishing"
        await session.flush()
        assert PENDING_MOVES not in session.sync_session.info
    async with core.uow(write=False) as uow:
        stored = await uow.session.get(Job, flushed_id)
        assert stored is not None and (stored.status, stored.title) == (
            JobStatus.ADMISSION_OPEN,
            "Renamed after publishing",
        )

    nested_id = await quiet_draft_id(app, core, client)
    async with core.uow() as uow:
        session = uow.session
        job = await job_service.lock(session, nested_id)
        with contextlib.suppress(RuntimeError):
            async with session.begin_nested():
                _, sent = await publish_move(core, session, nested_id)
                assert len(sent) == 1 and PENDING_MOVES not in session.sync_session.info
                raise RuntimeError("undo the savepoint")
    assert await stored_status(core, nested_id) == JobStatus.DRAFT


async def test_a_move_of_a_row_read_without_its_lock_reads_all_of_it_again(
    app: Any, core: Core, client: Any
) -> None:
    """PostgreSQL: a row read without its lock may have changed since (another transaction committed): the
    move reads every column back, so the session's object shows the other transaction's change too. A
    rollback to a savepoint forgets the locks taken before it (they may be gone)."""
    if core.db.is_sqlite:
        pytest.skip("SQLite: a write transaction holds the one write lock from its first statement")
    job_id = await draft_id(app, core, client)
    async with core.uow() as uow:
        session = uow.session
        job = await session.get(Job, job_id)
        assert job is not None and lookup.current(session, Job, job_id) is None
        async with core.uow() as other:  # commits a new title while the first transaction runs
            changed = await other.session.get(Job, job_id)
            assert changed is not None
            changed.title = "Changed meanwhile"
        moved, sent = await publish_move(core, session, job_id)
        assert moved is job and job.status == JobStatus.ADMISSION_OPEN and job.title == "Changed meanwhile"
        assert len(sent) == 1 and {"title", "status", "reward_amount_cents"} <= returned_columns(sent[0])
        # Locked now: current. A rollback to a savepoint may release it: no longer known current.
        await job_service.lock(session, job_id)
        assert lookup.current(session, Job, job_id) is job
        with contextlib.suppress(RuntimeError):
            async with session.begin_nested():
                raise RuntimeError("undo the savepoint")
        assert lookup.current(session, Job, job_id) is None


async def test_a_session_that_ended_a_transaction_trusts_nothing_it_holds(
    app: Any, core: Core, client: Any
) -> None:
    """Once its transaction has committed, what a session still holds may be changed by others: a later
    move reads the whole row back, on both databases, even for a row the ended transaction had locked."""
    job_id = await draft_id(app, core, client)
    async with core.uow() as uow:
        session = uow.session
        job = await job_service.lock(session, job_id)
        assert lookup.current(session, Job, job_id) is job
        await session.commit()
        assert lookup.held(session, Job, job_id) is job and lookup.current(session, Job, job_id) is None
        moved, sent = await publish_move(core, session, job_id)
        assert moved is job and {"title", "status", "reward_amount_cents"} <= returned_columns(sent[0])


async def test_a_slot_read_under_its_jobs_lock_is_current(app: Any, core: Core, client: Any) -> None:
    """A submit reads its slot after locking the job (`slot_with_job(locked=True)`), and every writer of a
    job's slots takes that lock first: the slot and the job are known current, so their moves read back only
    what they set. Read without the lock, on PostgreSQL, neither is."""
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    job_id = (await create_published(requester, client))["id"]
    (slot_id,) = await acknowledged(client, job_id, requester, [worker])
    for locked in (True, False):
        async with core.uow() as uow:
            session = uow.session
            slot, _, job = await participation.slot_with_job(
                session, Actor.agent(worker.id), slot_id, locked=locked
            )
            known = locked or core.db.is_sqlite
            assert (lookup.current(session, ParticipationSlot, slot_id) is slot) is known
            assert (lookup.current(session, Job, job_id) is job) is known


async def test_the_same_helpers_drive_the_waitlist_table(core: Core) -> None:
    convert, update = WAITLIST_MOVES["convert"], WAITLIST_MOVES["update"]
    async with core.uow() as uow:
        session = uow.session
        signup = WaitlistSignup(
            email=f"moves-{uuid.uuid4().hex[:8]}@example.com", name="M", use_case="u", role="BUYER"
        )
        session.add(signup)
        await session.flush()
        assert signup.status == WaitlistStatus.PENDING
        # Given the state the caller read, a move the table refuses is a 409 before the row is touched.
        with pytest.raises(Conflict) as refused:
            await states.move(
                session,
                WaitlistSignup,
                signup.id,
                convert,
                WaitlistStatus.INVITED,
                what="signup",
                current=signup.status,
                details={"target_state": WaitlistStatus.INVITED},
                notes="touched",
            )
        assert refused.value.code == "invalid_state"
        assert str(refused.value) == "This signup is PENDING; it cannot become INVITED."
        assert refused.value.details == {"current_state": "PENDING", "target_state": "INVITED"}
        await session.refresh(signup)
        assert signup.notes is None
        # A caller's own message and code, without a state read first: the row's state as stored now.
        with pytest.raises(Conflict) as own:
            await states.move(
                session,
                WaitlistSignup,
                signup.id,
                convert,
                WaitlistStatus.INVITED,
                message="Not yet.",
                code="nope",
            )
        assert (str(own.value), own.value.code, own.value.details) == (
            "Not yet.",
            "nope",
            {"current_state": "PENDING"},
        )
        moved = await states.move(
            session, WaitlistSignup, signup.id, update, WaitlistStatus.APPROVED, what="signup", notes="ok"
        )
        assert moved is signup and signup.status == WaitlistStatus.APPROVED and signup.notes == "ok"
        # The table allows the move but a `where` says no: the lost-race message, the current state only.
        with pytest.raises(Conflict) as lost:
            await states.move(
                session,
                WaitlistSignup,
                signup.id,
                convert,
                WaitlistStatus.INVITED,
                WaitlistSignup.notes.is_(None),
                what="signup",
                details={"target_state": WaitlistStatus.INVITED},
            )
        assert str(lost.value) == "The signup changed while this request ran; try again."
        assert lost.value.details == {"current_state": "APPROVED"}
        # A batch move takes exactly the rows the table and the filter allow.
        delete = WAITLIST_MOVES["delete"]
        where = WaitlistSignup.id == signup.id
        assert await states.compare_and_set_where(
            session, WaitlistSignup, delete, WaitlistStatus.DELETED, where
        ) == [signup.id]
        assert (
            await states.compare_and_set_where(session, WaitlistSignup, delete, WaitlistStatus.DELETED, where)
            == []
        )


async def test_a_table_with_several_targets_picks_each_rows_own(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    archive = AGENT_MOVES["archive"]  # ACTIVE and INACTIVE become INACTIVE, SUSPENDED stays SUSPENDED
    async with core.uow() as uow:
        session = uow.session
        moved = await states.compare_and_set(session, Agent, agent.id, archive)
        assert moved is not None and moved.status == AgentStatus.INACTIVE
        states.check(archive, moved.status, what="agent")
        with pytest.raises(Conflict) as refused:
            states.check(AGENT_MOVES["deactivate"], moved.status, AgentStatus.INACTIVE, what="agent")
        assert str(refused.value) == "This agent is INACTIVE; it cannot become INACTIVE."


async def test_a_refused_move_along_another_column_names_that_columns_state(app: Any, core: Core) -> None:
    """`move(state_column=...)`: the refusal reads the state of the column the move compares, not `status`."""
    agent = await new_agent(await new_owner(app, core))  # claimed: its claim_status is CLAIMED
    async with core.uow() as uow:
        with pytest.raises(Conflict) as refused:
            await states.move(
                uow.session,
                Agent,
                agent.id,
                CLAIM_MOVES,
                ClaimStatus.CLAIMED,
                what="claim",
                state_column="claim_status",
            )
    assert refused.value.details == {"current_state": "CLAIMED"}
    assert str(refused.value) == "This claim is CLAIMED; it cannot become CLAIMED."
