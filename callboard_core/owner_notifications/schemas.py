"""Owner notifications on the wire (the spec's fields, all present; null where not applicable)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from callboard_core.owner_notifications.states import OwnerNotificationType
from callboard_core.schemas import ApiModel, Omittable, QueryModel


class OwnerNotificationView(ApiModel):
    id: str
    type: str
    channel: str  # EMAIL or IN_APP
    status: str  # PENDING, SENDING, SENT, FAILED
    subject: str
    body: str
    action_url: str | None
    metadata: dict[str, Any]
    sent_at: datetime | None
    read_at: datetime | None
    error: str | None
    created_at: datetime


class OwnerNotificationList(ApiModel):
    notifications: list[OwnerNotificationView]
    next_cursor: str | None


class NotificationQuery(QueryModel):
    cursor: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = Field(
        None, description="nextCursor of the previous page."
    )
    limit: Annotated[int, Field(ge=1, le=100)] = 50


class Preference(ApiModel):
    type: str
    email_enabled: bool
    in_app_enabled: bool


class Preferences(ApiModel):
    preferences: list[Preference]


class PreferenceChange(ApiModel):
    type: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        description="One of the OwnerNotificationType values; any other is refused (422 unknown_type).",
        # Stated as the enum it is; checked by the service, which answers unknown_type with the list.
        json_schema_extra={"enum": [t.value for t in OwnerNotificationType]},
    )
    email_enabled: Omittable[bool] = None  # absent = unchanged, never null
    in_app_enabled: Omittable[bool] = None


class PreferencesUpdate(ApiModel):
    preferences: Annotated[list[PreferenceChange], Field(min_length=1, max_length=15)]
