"""A worker's track record: what verified events add to it, how it decays, and how the marketplace reads it.

The job lifecycle (and disputes and staff corrections, when they land) report events here rather than
writing the agent's statistics themselves. One figure, the reputation, per agent (overall) and per agent and
capability tag: it ranks applicants at admission, workers in the directory and in `find_workers`.

Events and their weights (docs/decisions.md, Reputation):
- a completion (a submission on a job that closed, awarded or not): +1; a win adds +3 more;
- an expired slot (admitted, never submitted: the acknowledgement or work deadline missed): -1;
- a dispute lost: -4; a staff correction: any amount, with a reason (audited by the staff console).

Decay: an event's weight halves every HALF_LIFE. It is stored "forward-decayed": an event at time t adds
weight x 2^((t - EPOCH) / HALF_LIFE) to the stored figure, which therefore never has to be rewritten as time
passes; the reputation now is stored / 2^((now - EPOCH) / HALF_LIFE). Every stored figure is divided by the
same factor at any one moment, so comparing stored figures ranks exactly as comparing current ones: indexes
on the stored columns stay valid forever, and a figure copied at application time (admission) compares with
one copied later.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Float, Table, bindparam, case, func, select, update
from sqlalchemy import cast as cast_
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from callboard_core import clock
from callboard_core.agents.models import Agent, AgentCapability, CapabilitySource
from callboard_core.db.engine import dialect_of
from callboard_core.db.lookup import by_pk
from callboard_core.db.rows import alight, insert_rows, naming_its_tables

COMPLETION_WEIGHT = 1.0
WIN_WEIGHT = 3.0  # on top of the completion: a won job counts 4
EXPIRY_WEIGHT = -1.0
DISPUTE_LOST_WEIGHT = -4.0
HALF_LIFE = timedelta(days=180)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def growth(at: datetime | None = None) -> float:
    """The forward-decay factor at `at` (now by default): an event then weighs this much in stored terms."""
    return float(2 ** (((at or clock.now()) - EPOCH) / HALF_LIFE))


def current(stored: float, at: datetime | None = None) -> float:
    """A stored figure as the reputation at `at` (now by default), rounded for display."""
    return round(stored / growth(at), 4)


def stored(value: float, at: datetime | None = None) -> float:
    """The stored figure of a reputation `value` at `at`: what a filter on the stored column compares with."""
    return value * growth(at)


@dataclass(frozen=True)
class CapabilityStanding:
    rookie: bool  # the job's tag is not among the worker's
    reputation: float  # under that tag, stored (forward-decayed) terms


# Untagged jobs are open to every worker: nobody is a rookie on them.
UNTAGGED = CapabilityStanding(rookie=False, reputation=0.0)


def is_new_worker(agent: Agent) -> bool:
    """A new worker has completed no job (practice jobs count nothing)."""
    return agent.total_tasks == 0


async def capability_standing(session: AsyncSession, agent_id: str, tag_id: str | None) -> CapabilityStanding:
    """The worker's standing for a job's capability tag."""
    if tag_id is None:
        return UNTAGGED
    link = await by_pk(session, AgentCapability, (agent_id, tag_id))
    if link is None:
        return CapabilityStanding(rookie=True, reputation=0.0)
    return CapabilityStanding(rookie=False, reputation=link.reputation)


def new_link(agent: Agent, tag_id: str, tag_slug: str, source: str) -> AgentCapability:
    """A capability link, carrying the agent's presence (the directory's index orders on both)."""
    return AgentCapability(
        agent_id=agent.id,
        tag_id=tag_id,
        tag_slug=tag_slug,
        source=source,
        completed_count=0,
        win_count=0,
        reputation=0.0,
        presence_rank=agent.presence_rank or 0,
    )


async def _add(
    session: AsyncSession, agent: Agent, tag_id: str | None, weight: float
) -> AgentCapability | None:
    """Add an event's weight, forward-decayed, to the agent and to its link for the tag (if it has one)."""
    amount = weight * growth()
    agent.reputation_score = (agent.reputation_score or 0.0) + amount
    link = await by_pk(session, AgentCapability, (agent.id, tag_id)) if tag_id else None
    if link is not None:
        link.reputation = (link.reputation or 0.0) + amount
    return link


async def record_completions(
    session: AsyncSession,
    agent_ids: Sequence[str],
    *,
    winner: str | None,
    tag_id: str | None = None,
    tag_slug: str | None = None,
    beside: tuple[Any, ...] = (),
    beside_params: Mapping[str, Any] | None = None,
    agents_from: Any = None,
) -> set[str]:
    """Count one completed job for each of these agents (a job's submitters; `winner` won it), and under
    the job's capability tag when it has one; a win under a tag the winner lacks earns the tag (source
    `earned`). Two increments in SQL whatever the number of agents (one statement on PostgreSQL; no read
    first, no unit of work): the figures the session holds are set from what the statements return.
    Returns the agents counted.
    `beside` (PostgreSQL only): the caller's own writes, data-modifying CTEs built once, that go in the
    same statement (with `beside_params`), as do the transaction's waiting passengers (`db/rows.Passenger`,
    run before the agents' rows are locked); `agents_from` (PostgreSQL only, `agent_ids` then unused): a
    select of the agents' ids, built once, which the statement runs (from one of those CTEs)."""
    if not agent_ids and agents_from is None:
        return set()
    now_growth = growth()
    params = {
        "p_ids": list(agent_ids),
        "p_winner": winner or "",
        "p_amount": COMPLETION_WEIGHT * now_growth,
        "p_win_amount": (COMPLETION_WEIGHT + WIN_WEIGHT) * now_growth,
    }
    if dialect_of(session) == "postgresql":
        together = {**params, **(beside_params or {}), "p_updated": clock.now()}
        if tag_id:
            together["p_tag"] = tag_id
        # Writes waiting for a carrier (a paid award's document numbers) go in this statement too; not from
        # inside a savepoint, whose rollback would take back what they were told they took.
        passengers = [] if session.sync_session.in_nested_transaction() else alight(session)
        for passenger in passengers:
            together.update(passenger.params)
        shapes = tuple(passenger.shape() for passenger in passengers)
        rows = (await session.execute(_counting(bool(tag_id), beside, agents_from, shapes), together)).all()
        for i, passenger in enumerate(passengers):
            if rows:  # none: nothing moved, and the caller's refusal rolls the transaction back
                passenger.take(rows[0]._mapping[f"carried{i}"])
        agents = _refresh(session, Agent, rows, names=_AGENT_FIGURES)
        if not tag_id:
            return agents
        counted = _refresh(
            session,
            AgentCapability,
            [row for row in rows if row.link_completed_count is not None],
            key=lambda row: (row.id, tag_id),
            names=_LINK_FIGURES,
        )
    else:
        assert not beside and agents_from is None, "data-modifying CTEs are PostgreSQL's"
        count = len(agent_ids) if len(agent_ids) <= FIXED_IDS_MAX else 0
        if count:  # one parameter per agent, not an expanding list (see `_listed`)
            params.update({f"p_id{j}": agent_id for j, agent_id in enumerate(agent_ids)})
        agents = _refresh(session, Agent, await session.execute(_listed(_completed_agents, count), params))
        if not tag_id:
            return agents
        links = await session.execute(_listed(_completed_links, count), {**params, "p_tag": tag_id})
        counted = _refresh(session, AgentCapability, links, key=lambda row: (row.agent_id, tag_id))
    if winner and tag_slug and winner in agents and winner not in counted:
        agent = await by_pk(session, Agent, winner)
        if agent is not None:
            link = new_link(agent, tag_id, tag_slug, CapabilitySource.EARNED)
            link.completed_count, link.win_count = 1, 1
            link.reputation = (COMPLETION_WEIGHT + WIN_WEIGHT) * now_growth
            await insert_rows(session, [link])
    return agents


def _refresh(
    session: AsyncSession,
    model: type[Any],
    rows: Any,
    key: Any = None,
    names: dict[str, str] | None = None,
) -> set[str]:
    """Set the returned figures on the session's copies of these rows (a Core UPDATE synchronises none);
    the ids of the rows the statement moved (`key`: a row's primary key; `names`: which returned column
    is which attribute, when not all of them and not by their own names)."""
    moved = set()
    identity = session.sync_session.identity_map
    mapper = sa_inspect(model)
    for row in rows:
        values = row._mapping
        ident = key(row) if key else (values[mapper.primary_key[0].key],)
        moved.add(str(ident[0]))
        held = identity.get(mapper.identity_key_from_primary_key(ident))
        if held is not None:
            for column, name in (names or {n: n for n in values}).items():
                set_committed_value(held, name, values[column])
    return moved


def _completion_case(column: Any) -> Any:
    return case((column == bindparam("p_winner"), 1), else_=0)


def _gain(column: Any) -> Any:
    amount, win_amount = bindparam("p_amount", type_=Float()), bindparam("p_win_amount", type_=Float())
    return case((column == bindparam("p_winner"), win_amount), else_=amount)


_AGENTS = cast(Table, Agent.__table__).c
_LINKS = cast(Table, AgentCapability.__table__).c
_AGENT_FIGURES = {
    name: name for name in ("id", "total_tasks", "win_count", "success_rate", "reputation_score")
}
_BY_IDS: Any = bindparam("p_ids", expanding=True)


def _completed_agents(ids: Any) -> Any:
    """The agents' update for the agents `ids` names (a list bound, or a select)."""
    return (
        update(cast(Table, Agent.__table__))
        .where(_AGENTS.id.in_(ids))
        .values(
            total_tasks=_AGENTS.total_tasks + 1,
            win_count=_AGENTS.win_count + _completion_case(_AGENTS.id),
            # SET reads the row as it was: the new success rate from the old counts
            success_rate=cast_(_AGENTS.win_count + _completion_case(_AGENTS.id), Float)
            / (_AGENTS.total_tasks + 1),
            reputation_score=func.coalesce(_AGENTS.reputation_score, 0.0) + _gain(_AGENTS.id),
        )
        .returning(
            _AGENTS.id, _AGENTS.total_tasks, _AGENTS.win_count, _AGENTS.success_rate, _AGENTS.reputation_score
        )
    )


def _completed_links(ids: Any) -> Any:
    """The capability links' update (the tag bound as `p_tag`) for the agents `ids` names."""
    return (
        update(cast(Table, AgentCapability.__table__))
        .where(_LINKS.tag_id == bindparam("p_tag"), _LINKS.agent_id.in_(ids))
        .values(
            completed_count=func.coalesce(_LINKS.completed_count, 0) + 1,
            win_count=func.coalesce(_LINKS.win_count, 0) + _completion_case(_LINKS.agent_id),
            reputation=func.coalesce(_LINKS.reputation, 0.0) + _gain(_LINKS.agent_id),
        )
        .returning(_LINKS.agent_id, _LINKS.completed_count, _LINKS.win_count, _LINKS.reputation)
    )


FIXED_IDS_MAX = 16  # submitters named one parameter each (a job's are a few); more, an expanding list


@functools.cache
def _listed(build: Any, count: int) -> Any:
    """Every award and every closed job with submissions runs these: built once per number of agents, on
    the tables (states._moving). `count` agents as `p_id<j>`, one parameter each: an expanding list
    (`count` 0: `p_ids`) has SQLAlchemy write the statement's text again on every run."""
    return build([bindparam(f"p_id{j}") for j in range(count)] if count else _BY_IDS)


_LINK_FIGURES = {
    "link_completed_count": "completed_count",
    "link_win_count": "win_count",
    "link_reputation": "reputation",
}


@functools.cache
def _counting(
    tagged: bool, beside: tuple[Any, ...], agents_from: Any = None, passengers: tuple[Any, ...] = ()
) -> Any:
    """PostgreSQL's one statement, built once per shape: the agents' update, with the links' (`tagged`) and
    the caller's `beside` as data-modifying CTEs. On PostgreSQL both updates go in one statement: the links'
    update a CTE of the agents' (other tables, one snapshot), each agent's row returned with its link's new
    figures (NULL: it had no link for the tag). `updated_at` is bound by hand: SQLAlchemy leaves a column's
    Python onupdate default unset in an UPDATE that carries a data-modifying CTE (NULL: the agents' NOT NULL
    refused it)."""
    ids = _BY_IDS if agents_from is None else agents_from
    statement = _completed_agents(ids).values(updated_at=bindparam("p_updated"))
    if tagged:
        links = _completed_links(ids).cte("counted_links")
        statement = statement.add_cte(links).returning(
            *(
                select(links.c[column]).where(links.c.agent_id == _AGENTS.id).scalar_subquery().label(label)
                for label, column in _LINK_FIGURES.items()
            )
        )
    for i, (build, args) in enumerate(passengers):
        # A passenger's CTE runs first: the filter that reads it is evaluated once, before any agent's row.
        cte, carried = build(*args)
        statement = (
            statement.add_cte(cte)
            .where(select(func.count()).select_from(cte).scalar_subquery() >= 0)
            .returning(carried.label(f"carried{i}"))
        )
    return naming_its_tables(statement.add_cte(*beside) if beside else statement)


async def record_expiry(session: AsyncSession, agent_id: str, tag_id: str | None) -> None:
    """An admitted slot that ended without a submission because a deadline passed."""
    agent = await by_pk(session, Agent, agent_id)
    if agent is not None:
        await _add(session, agent, tag_id, EXPIRY_WEIGHT)


async def record_dispute_lost(session: AsyncSession, agent_id: str, tag_id: str | None) -> None:
    """A dispute staff settled against the worker (the disputes issue calls this)."""
    agent = await by_pk(session, Agent, agent_id)
    if agent is not None:
        await _add(session, agent, tag_id, DISPUTE_LOST_WEIGHT)


async def record_correction(session: AsyncSession, agent_id: str, tag_id: str | None, delta: float) -> None:
    """A staff correction of `delta` reputation points as of now (the staff console audits who and why)."""
    agent = await by_pk(session, Agent, agent_id)
    if agent is not None:
        await _add(session, agent, tag_id, delta)
