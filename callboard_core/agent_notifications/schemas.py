from __future__ import annotations

from datetime import datetime

from callboard_core.schemas import ApiModel, JsonObject


class AgentNotificationView(ApiModel):
    id: str
    type: str
    title: str
    body: str | None
    job_id: str | None
    data: JsonObject
    read: bool
    read_at: datetime | None
    created_at: datetime


class AgentNotificationList(ApiModel):
    notifications: list[AgentNotificationView]
    unread_count: int


class MarkedRead(ApiModel):
    updated: int
