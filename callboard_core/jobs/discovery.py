"""Worker discovery: open jobs within the worker's capability tags (and, in rookie mode, the rest)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import (
    JSON,
    Integer,
    Select,
    String,
    Text,
    bindparam,
    cast,
    literal_column,
    or_,
    select,
    tuple_,
    type_coerce,
    union_all,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.capabilities.models import CapabilityTag
from callboard_core.db.base import UTCDateTime
from callboard_core.db.engine import json_loads
from callboard_core.db.readcache import ReadCache
from callboard_core.guidance import Act, Step, step
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.access import acting_agent
from callboard_core.jobs.models import Job
from callboard_core.jobs.states import JobStatus
from callboard_core.pagination import decode_cursor, encode_cursor
from callboard_core.principals import Actor

# What a preview shows, read as raw Core rows: JSON columns as their text, times as the driver gives them.
# Previews are memoised per job and rookie flag together with the raw row they were made from: a job nobody
# changed is validated once, not on every page that lists it, and a row that differs in any column is made
# again, so nothing is ever stale. (Comparing the rows costs less than hashing them as the key would.)
# The query itself runs on every request.
_FIELDS = tuple(
    name
    for name in job_schemas.JobPreview.model_fields
    if name not in ("direct_hire", "rookie", "next_action")
)
_COLUMNS = (
    *(
        cast(column, Text).label(name)
        if isinstance(column.type, JSON)
        else type_coerce(column, String).label(name)
        if isinstance(column.type, UTCDateTime)
        else column
        for name, column in ((name, Job.__table__.c[name]) for name in _FIELDS)
    ),
    Job.__table__.c.capability_tag_id,
)
_MEMO: dict[tuple[str, bool], tuple[tuple[Any, ...], job_schemas.JobPreview]] = {}
_MEMO_MAX = 2048  # a few MB: the newest open jobs, which is what discovery shows
_JSON: dict[
    int, tuple[job_schemas.JobPreview, bytes]
] = {}  # id(memoised preview) -> (it, its JSON), dropped with _MEMO


@functools.lru_cache(maxsize=8)
def _converters(dialect: Dialect) -> tuple[Callable[[Any], Any] | None, ...]:
    """Per field, what SQLAlchemy's own result processing would have done with the raw value."""

    def json_value(text: str | None) -> Any:
        return None if text is None else json_loads(text)

    times = UTCDateTime()._cached_result_processor(dialect, None)
    return tuple(
        json_value
        if isinstance(Job.__table__.c[name].type, JSON)
        else times
        if isinstance(Job.__table__.c[name].type, UTCDateTime)
        else None
        for name in _FIELDS
    )


def _preview(row: tuple[Any, ...], rookie: bool, dialect: Dialect) -> job_schemas.JobPreview:
    key = (row[0], rookie)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] == row:
        return hit[1]
    item = {
        name: value if convert is None else convert(value)
        for name, convert, value in zip(_FIELDS, _converters(dialect), row, strict=False)
    }
    preview = job_schemas.JobPreview.model_validate(
        item | {"rookie": rookie, "direct_hire": False, "next_action": _apply_step(row[0])}
    )  # no Direct Hire here
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
        _JSON.clear()
    _MEMO[key] = (row, preview)
    return preview


def _apply_step(job_id: str) -> Step:
    return step(
        Act.APPLY, "Apply to take part; admission ranks the applicants when it closes.", job_id=job_id
    )


def preview_json(preview: job_schemas.JobPreview) -> bytes:
    """A preview's JSON (camelCase, as the page's serializer writes it), once per memoised preview. Only the
    HTTP route serialises pages this way (its next actions rendered as routes)."""
    hit = _JSON.get(id(preview))
    if hit is not None and hit[0] is preview:
        return hit[1]
    data = job_schemas.JobPreview.__pydantic_serializer__.to_json(preview, by_alias=True)
    if len(_JSON) < _MEMO_MAX:  # holds the preview, so its id cannot be reused meanwhile
        _JSON[id(preview)] = (preview, data)
    return data


def page_json(page: job_schemas.JobList) -> bytes:
    """The page's JSON, byte for byte what serializing the JobList gives, from the previews' memoised JSON:
    past the query, serializing twenty previews was the biggest cost left in a discovery request."""
    return (
        b'{"jobs":['
        + b",".join(preview_json(j) for j in page.jobs)
        + b'],"nextCursor":'
        + orjson.dumps(page.next_cursor)
        + b"}"
    )


@functools.lru_cache(maxsize=1024)
def _statement(
    owner: bool, ranges: str | int, payment_mode: str | None, q: bool, cursor: bool, limit: int
) -> Select[Any]:
    """The discovery query of one shape, values left as bind parameters. Built once per shape: SQLAlchemy
    constructs (and caches the compiled form of) a statement object in far more time than the query takes.

    The status and the page size are written into the statement: PostgreSQL can then plan each shape once
    per connection (a generic plan) and find it as good as a plan for the values (decisions.md, Discovery)."""
    filters: list[Any] = [
        Job.status == literal_column(f"'{JobStatus.ADMISSION_OPEN.value}'"),
        Job.direct_hire_worker_agent_id.is_(None),
        Job.is_starter.is_(False),
    ]
    if owner:
        filters.append(or_(Job.owner_id.is_(None), Job.owner_id != bindparam("owner_id")))
    if payment_mode == "FREE":
        filters.append(Job.reward_amount_cents == 0)
    elif payment_mode == "PAID":
        filters.append(Job.reward_amount_cents > 0)
    if q:
        pattern = bindparam("pattern", type_=String())
        filters.append(
            or_(Job.title.ilike(pattern, escape="\\"), Job.description.ilike(pattern, escape="\\"))
        )
    if cursor:
        # A row-value comparison, so the index range starts at the cursor (ix_jobs_discovery_*: ..., published_at,
        # id) instead of walking every newer job again: deep pages cost what the first one does.
        filters.append(
            tuple_(Job.published_at, Job.id)
            < tuple_(bindparam("after_at", type_=UTCDateTime()), bindparam("after_id"))
        )
    # One index range per tag (ix_jobs_discovery_tag: status, tag, published_at, id), merged: a worker with a
    # rare tag reads at most a page per tag, where `tag IN (...) OR tag IS NULL` would walk every open job.
    extra: list[Any]
    if ranges == "tag":
        extra = [Job.capability_tag_id == bindparam("tag")]
    elif ranges == "all":
        extra = [None]
    else:
        extra = [Job.capability_tag_id == bindparam(f"tag_{i}") for i in range(int(ranges))]
        extra.append(Job.capability_tag_id.is_(None))
    page_size = literal_column(str(int(limit)), Integer())

    def page(condition: Any) -> Select[str, datetime | None]:
        # Ids only: the discovery indexes cover these filters, so no job row is read to find the page.
        stmt = select(Job.id, Job.published_at).where(*filters)
        if condition is not None:
            stmt = stmt.where(condition)
        return stmt.order_by(Job.published_at.desc(), Job.id.desc()).limit(page_size)

    if len(extra) == 1:
        ids = select(page(extra[0]).subquery().c.id)
    else:
        merged = union_all(*(select(*part.c) for part in (page(c).subquery() for c in extra))).subquery()
        ids = select(merged.c.id).order_by(merged.c.published_at.desc(), merged.c.id.desc()).limit(page_size)
    # Then the page's rows, by primary key.
    return (
        select(*_COLUMNS)
        .where(Job.id.in_(ids.correlate(None)))
        .order_by(Job.published_at.desc(), Job.id.desc())
    )


@dataclass(frozen=True, slots=True)
class Seeker:
    """What discovery needs to know of the worker: who it is, its owner (whose jobs it never sees) and its
    capability tags."""

    agent_id: str
    owner_id: str | None
    tags: frozenset[str]


async def seeker(
    session: AsyncSession, actor: Actor, agent_id: str | None = None, cache: ReadCache | None = None
) -> Seeker:
    """The acting worker (its own key, or an owner naming one of its agents). An agent's own is read through
    the cache on SQLite: discovery is the hottest worker read."""

    async def load() -> Seeker:
        agent = await acting_agent(session, actor, agent_id, capabilities=True)
        return Seeker(agent.id, agent.owner_id, frozenset(link.tag_id for link in agent.capability_links))

    if cache is None or actor.agent_id is None:
        return await load()
    return await cache.get_or_load(("seeker", actor.agent_id), load)


async def list_open(
    session: AsyncSession,
    agent: Seeker,
    *,
    capability: str | None,
    q: str | None,
    limit: int,
    include: str | None,
    cursor: str | None,
    payment_mode: str | None = None,
) -> job_schemas.JobList:
    """Open jobs for this worker, newest first. Jobs with no capability tag are open to every worker.

    Never the worker's own owner's jobs, Direct Hires or starter jobs (those reach their worker directly)."""
    tags = agent.tags
    rookie_mode = include == "rookie"
    params: dict[str, Any] = {}
    if agent.owner_id is not None:
        params["owner_id"] = agent.owner_id
    ranges: str | int
    if capability:
        tag_id = (
            await session.scalars(
                select(CapabilityTag.id).where(CapabilityTag.slug == capability.strip().lower())
            )
        ).one_or_none()
        if tag_id is None or (tag_id not in tags and not rookie_mode):
            return job_schemas.JobList(jobs=[], next_cursor=None)
        ranges, params["tag"] = "tag", tag_id
    elif rookie_mode:
        ranges = "all"
    else:
        ranges = len(tags)
        params.update({f"tag_{i}": tag for i, tag in enumerate(sorted(tags))})
    if q:
        params["pattern"] = (
            "%" + q.strip().lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        )
    if cursor:
        params["after_at"], params["after_id"] = decode_cursor(cursor)
    stmt = _statement(agent.owner_id is not None, ranges, payment_mode, bool(q), bool(cursor), limit + 1)
    connection = await session.connection()
    rows = (await connection.execute(stmt, params)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    jobs = [
        _preview(tuple(row), row[-1] is not None and row[-1] not in tags, connection.dialect) for row in rows
    ]
    last = jobs[-1] if jobs else None
    return job_schemas.JobList(
        jobs=jobs,
        next_cursor=encode_cursor(last.published_at, last.id)
        if more and last is not None and last.published_at is not None
        else None,
    )


async def discover(
    session: AsyncSession,
    actor: Actor,
    *,
    capability: str | None,
    q: str | None,
    limit: int,
    include: str | None,
    cursor: str | None,
    cache: ReadCache | None = None,
) -> job_schemas.JobList:
    """The acting worker's own discovery page (GET /api/v2/jobs, the list_jobs tool)."""
    who = await seeker(session, actor, cache=cache)
    return await list_open(
        session, who, capability=capability, q=q, limit=limit, include=include, cursor=cursor
    )
