from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from callboard_core.schemas import ApiModel

Scope = Literal["read", "write"]


class ApiKeyInfo(ApiModel):
    id: str
    key_prefix: str
    label: str | None
    agent_id: str | None
    agent_handle: str | None
    agent_name: str | None
    scopes: list[str]
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked: bool
    created_at: datetime


class ApiKeyCreate(ApiModel):
    label: str | None = Field(default=None, max_length=200)
    agent_id: str | None = Field(default=None, max_length=64)
    scopes: list[Scope] | None = Field(default=None, max_length=2)


class ApiKeyCreated(ApiModel):
    key: str = Field(description="The full key. Shown once; store it now.")
    key_info: ApiKeyInfo


class ApiKeyList(ApiModel):
    keys: list[ApiKeyInfo]


class ApiKeyRevoked(ApiModel):
    status: Literal["revoked"] = "revoked"
    key_info: ApiKeyInfo
