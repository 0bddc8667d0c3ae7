"""Agent notifications: a per-agent record, created by the job events that concern the agent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agent_notifications import schemas as notification_schemas
from callboard_core.agent_notifications.models import AgentNotification
from callboard_core.db.rows import insert_dicts_at_commit
from callboard_core.errors import NotFound
from callboard_core.ids import new_id
from callboard_core.principals import Actor


async def notify(
    session: AsyncSession,
    agent_ids: Sequence[str],
    type: str,
    title: str,
    *,
    body: str | None = None,
    job_id: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """One notification per agent. Written with the transaction's last work, all of its notifications in
    one statement (an admission tells each admitted worker and every other applicant: thousands at once)."""
    if not agent_ids:
        return
    now = clock.now()
    rows = [
        dict(
            id=new_id("ntf"),
            agent_id=a,
            type=type,
            title=title,
            body=body,
            job_id=job_id,
            data=data or {},
            created_at=now,
        )
        for a in dict.fromkeys(agent_ids)
    ]
    await insert_dicts_at_commit(session, TABLE, rows)


TABLE = cast(Table, AgentNotification.__table__)


def _view(n: AgentNotification) -> notification_schemas.AgentNotificationView:
    return notification_schemas.AgentNotificationView(
        id=n.id,
        type=n.type,
        title=n.title,
        body=n.body,
        job_id=n.job_id,
        data=n.data or {},
        read=n.read_at is not None,
        read_at=n.read_at,
        created_at=n.created_at,
    )


async def unread_count(session: AsyncSession, agent_id: str) -> int:
    return int(
        (
            await session.execute(
                select(func.count())
                .select_from(AgentNotification)
                .where(AgentNotification.agent_id == agent_id, AgentNotification.read_at.is_(None))
            )
        ).scalar_one()
    )


async def list_for(
    session: AsyncSession, actor: Actor, *, include_read: bool, limit: int
) -> notification_schemas.AgentNotificationList:
    agent_id = actor.require_agent()
    stmt = select(AgentNotification).where(AgentNotification.agent_id == agent_id)
    if not include_read:
        stmt = stmt.where(AgentNotification.read_at.is_(None))
    rows = (
        await session.scalars(
            stmt.order_by(AgentNotification.created_at.desc(), AgentNotification.id.desc()).limit(limit)
        )
    ).all()
    return notification_schemas.AgentNotificationList(
        notifications=[_view(n) for n in rows], unread_count=await unread_count(session, agent_id)
    )


async def mark_read(
    session: AsyncSession, actor: Actor, notification_id: str
) -> notification_schemas.AgentNotificationView:
    n = await session.get(AgentNotification, notification_id)
    if n is None or n.agent_id != actor.require_agent():
        raise NotFound("No such notification.", code="notification_not_found")
    if n.read_at is None:
        n.read_at = clock.now()
        await session.flush()
    return _view(n)


async def mark_read_batch(
    session: AsyncSession, actor: Actor, ids: Sequence[str]
) -> notification_schemas.MarkedRead:
    """Marks the caller's unread notifications among ids; others' ids are ignored. Returns how many changed."""
    agent_id = actor.require_agent()
    if not ids:
        return notification_schemas.MarkedRead(updated=0)
    result = await session.execute(
        update(AgentNotification)
        .where(
            AgentNotification.id.in_(list(dict.fromkeys(ids))),
            AgentNotification.agent_id == agent_id,
            AgentNotification.read_at.is_(None),
        )
        .values(read_at=clock.now())
        .execution_options(synchronize_session=False)
    )
    return notification_schemas.MarkedRead(updated=int(result.rowcount or 0))  # type: ignore[attr-defined]
