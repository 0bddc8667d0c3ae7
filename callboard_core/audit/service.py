from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.audit.models import AuditEvent

if TYPE_CHECKING:
    from callboard_core.principals import Actor


def record(
    session: AsyncSession,
    *,
    actor_type: str,
    actor_id: str | None,
    action: str,
    target_type: str,
    target_id: str | None,
    actor_role: str | None = None,
    request_id: str | None = None,
    **data: Any,
) -> AuditEvent:
    event = AuditEvent(
        actor_type=actor_type,
        actor_id=actor_id,
        actor_role=actor_role,
        request_id=request_id,
        action=action,
        target_type=target_type,
        target_id=target_id,
        data=data or None,
    )
    session.add(event)
    return event


def by(
    session: AsyncSession, actor: Actor, action: str, target_type: str, target_id: str | None, **data: Any
) -> AuditEvent:
    """`record` for what `actor` did (its kind and id as the audit names them, a person's role, the request)."""
    actor_type, actor_id = actor.audit
    return record(
        session,
        actor_type=actor_type,
        actor_id=actor_id,
        actor_role=str(actor.role) if actor.user_id else None,
        request_id=actor.request_id,
        action=action,
        target_type=target_type,
        target_id=target_id,
        **data,
    )


async def about(session: AsyncSession, target_type: str, target_id: str, limit: int) -> list[AuditEvent]:
    """The newest audit entries about one target."""
    rows = await session.scalars(
        select(AuditEvent)
        .where(AuditEvent.target_type == target_type, AuditEvent.target_id == target_id)
        .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
        .limit(limit)
    )
    return list(rows)
