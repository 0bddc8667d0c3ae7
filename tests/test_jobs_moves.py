"""The one compare-and-set every state machine of the job lifecycle moves by (callboard_core/jobs/states.py)."""

from __future__ import annotations

from typing import Any

import pytest

from callboard_core import clock
from callboard_core.container import Core
from callboard_core.errors import Conflict
from callboard_core.jobs import states
from callboard_core.jobs.models import Job
from callboard_core.jobs.states import JOB_MOVES, JobStatus
from tests.jobs_helpers import job_body, new_agent, new_owner


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
            await states.try_move(session, Job, publish, job_id, JobStatus.ADMISSION_OPEN, Job.id == "x")
            is None
        )
        now = clock.now()
        moved = await states.move(
            session, Job, publish, job_id, JobStatus.ADMISSION_OPEN, what="job", published_at=now
        )
        # The session's copy is the moved row, refreshed.
        assert moved is job and job.status == JobStatus.ADMISSION_OPEN and job.published_at is not None
        # The same move again: the table no longer allows it, so a 409 naming the current state.
        with pytest.raises(Conflict) as refused:
            await states.move(session, Job, publish, job_id, JobStatus.ADMISSION_OPEN, what="job")
        assert refused.value.code == "invalid_state"
        assert refused.value.details["current_state"] == JobStatus.ADMISSION_OPEN
        # A stale caller (it read DRAFT) loses the race the same way.
        with pytest.raises(Conflict) as lost:
            await states.move(
                session, Job, publish, job_id, JobStatus.ADMISSION_OPEN, what="job", current=JobStatus.DRAFT
            )
        assert lost.value.details["current_state"] == JobStatus.ADMISSION_OPEN
        # Only rows in an allowed source state move in a set-based move.
        assert await states.move_all(session, Job, publish, JobStatus.ADMISSION_OPEN, Job.id == job_id) == []
