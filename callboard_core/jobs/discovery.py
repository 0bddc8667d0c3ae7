"""Worker discovery: open jobs within the worker's capability tags (and, in rookie mode, the rest)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.capabilities.models import CapabilityTag
from callboard_core.db.readcache import ReadCache
from callboard_core.jobs import schemas as s
from callboard_core.jobs.actors import Actor, acting_agent
from callboard_core.jobs.models import Job
from callboard_core.jobs.pagination import decode_cursor, encode_cursor
from callboard_core.jobs.service import preview
from callboard_core.jobs.states import JobStatus

# What a preview shows, as plain rows: discovery pages are the hottest read, and ORM instances of every column
# (briefs included) cost several times more per job than these tuples.
_PREVIEW_COLUMNS = tuple(getattr(Job, name) for name in (
    "id", "status", "title", "description", "job_type_key", "capability_slug", "preview_json", "requirements_json",
    "submission_requirements_json", "reward_amount_cents", "currency", "application_cap", "participant_cap",
    "application_count", "admission_closes_at", "fair_work_duration_ms", "latest_submission_deadline_at",
    "review_deadline_at", "requester_agent_id", "is_house", "direct_hire_worker_agent_id", "published_at",
    "capability_tag_id",
))


@dataclass(frozen=True, slots=True)
class Seeker:
    """What discovery needs to know of the worker: who it is, its owner (whose jobs it never sees) and its
    capability tags."""

    agent_id: str
    owner_id: str | None
    tags: frozenset[str]


async def seeker(session: AsyncSession, actor: Actor, agent_id: str | None = None,
                 cache: ReadCache | None = None) -> Seeker:
    """The acting worker (its own key, or an owner naming one of its agents). An agent's own is read through
    the cache on SQLite: discovery is the hottest worker read."""

    async def load() -> Seeker:
        agent = await acting_agent(session, actor, agent_id)
        return Seeker(agent.id, agent.owner_id, frozenset(link.tag_id for link in agent.capability_links))

    if cache is None or actor.agent_id is None:
        return await load()
    return await cache.get_or_load(("seeker", actor.agent_id), load)


async def list_open(session: AsyncSession, agent: Seeker, *, capability: str | None, q: str | None, limit: int,
                    include: str | None, cursor: str | None, payment_mode: str | None = None) -> s.JobList:
    """Open jobs for this worker, newest first. Jobs with no capability tag are open to every worker.

    Never the worker's own owner's jobs, Direct Hires or starter jobs (those reach their worker directly)."""
    tags = agent.tags
    rookie_mode = include == "rookie"
    stmt = select(*_PREVIEW_COLUMNS).where(
        Job.status == JobStatus.ADMISSION_OPEN, Job.direct_hire_worker_agent_id.is_(None), Job.is_starter.is_(False)
    )
    if agent.owner_id is not None:
        stmt = stmt.where(or_(Job.owner_id.is_(None), Job.owner_id != agent.owner_id))
    if capability:
        tag_id = (await session.scalars(
            select(CapabilityTag.id).where(CapabilityTag.slug == capability.strip().lower())
        )).one_or_none()
        if tag_id is None or (tag_id not in tags and not rookie_mode):
            return s.JobList(jobs=[], next_cursor=None)
        stmt = stmt.where(Job.capability_tag_id == tag_id)
    elif not rookie_mode:
        stmt = stmt.where(or_(Job.capability_tag_id.in_(sorted(tags)), Job.capability_tag_id.is_(None))
                          if tags else Job.capability_tag_id.is_(None))
    if payment_mode == "FREE":
        stmt = stmt.where(Job.reward_amount_cents == 0)
    elif payment_mode == "PAID":
        stmt = stmt.where(Job.reward_amount_cents > 0)
    if q:
        pattern = "%" + q.strip().lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        stmt = stmt.where(or_(Job.title.ilike(pattern, escape="\\"), Job.description.ilike(pattern, escape="\\")))
    if cursor:
        at, ident = decode_cursor(cursor)
        # A row-value comparison, so the index range starts at the cursor (ix_jobs_discovery_*: ..., published_at,
        # id) instead of walking every newer job again: deep pages cost what the first one does.
        stmt = stmt.where(tuple_(Job.published_at, Job.id) < (at, ident))
    rows = list((await session.execute(stmt.order_by(Job.published_at.desc(), Job.id.desc()).limit(limit + 1))).all())
    more = len(rows) > limit
    rows = rows[:limit]
    jobs = [preview(j, rookie=j.capability_tag_id is not None and j.capability_tag_id not in tags) for j in rows]
    last = rows[-1] if rows else None
    return s.JobList(jobs=jobs, next_cursor=encode_cursor(last.published_at, last.id)
                     if more and last is not None and last.published_at is not None else None)
