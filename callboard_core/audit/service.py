from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.audit.models import AuditEvent


def record(
    session: AsyncSession,
    *,
    actor_type: str,
    actor_id: str | None,
    action: str,
    target_type: str,
    target_id: str | None,
    **data: Any,
) -> AuditEvent:
    event = AuditEvent(
        actor_type=actor_type,
        actor_id=actor_id,
        action=action,
        target_type=target_type,
        target_id=target_id,
        data=data or None,
    )
    session.add(event)
    return event
