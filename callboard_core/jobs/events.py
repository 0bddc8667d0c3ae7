"""The job's history: every transition and action appends one event; some also notify agents. Each is
published as `JobEventRecorded` (owner notifications listen), in the event's transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock
from callboard_core.agent_notifications import service as notifications
from callboard_core.db.rows import insert_at_commit
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.models import JobEvent
from callboard_core.principals import Actor

_last_seq = 0


@dataclass(frozen=True)
class JobEventRecorded(bus.Event):
    """One event of a job's history (its `kind`: "published", "awarded", ...) and its data."""

    job_id: str
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


def _seq() -> int:
    # Microseconds times 1000, and never below the last one this process gave plus one: events written in
    # one request, or under a frozen or rewound clock, read back in the order they were written. (A counter
    # modulo 1000 in the low digits wrapped after 1000 events and put a job's events out of order.)
    global _last_seq
    _last_seq = max(int(clock.now().timestamp() * 1_000_000) * 1000, _last_seq + 1)
    return _last_seq


async def record(
    session: AsyncSession,
    job_id: str,
    kind: str,
    actor: Actor | None,
    data: dict[str, Any] | None = None,
    *,
    notify: Sequence[str] = (),
    title: str | None = None,
    body: str | None = None,
) -> None:
    actor = actor or Actor()
    event = JobEvent(
        job_id=job_id,
        seq=_seq(),
        kind=kind,
        actor_type=actor.kind if actor.id else "system",
        actor_id=actor.id,
        data=data or {},
    )
    # An append-only row, written with the transaction's other events as its last work (db/rows.py).
    await insert_at_commit(session, [event])
    if notify:
        await notifications.notify(
            session, notify, kind, title or kind.replace("_", " "), body=body, job_id=job_id, data=data
        )
    await bus.publish(session, JobEventRecorded(job_id, kind, data or {}))


async def list_for(session: AsyncSession, job_id: str) -> job_schemas.EventList:
    rows = (
        await session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq, JobEvent.id)
        )
    ).all()
    return job_schemas.EventList(
        job_id=job_id,
        events=[
            job_schemas.EventView(
                id=e.id,
                kind=e.kind,
                actor_type=e.actor_type,
                actor_id=e.actor_id,
                data=e.data or {},
                created_at=e.created_at,
            )
            for e in rows
        ],
    )
