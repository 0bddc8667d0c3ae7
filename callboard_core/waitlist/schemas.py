"""The waitlist on the wire: the public signup and the staff views and bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import EmailStr, Field, StringConstraints

from callboard_core.schemas import VISIBLE, ApiModel, QueryModel
from callboard_core.users.schemas import PublicUser

WaitlistStatusName = Literal["PENDING", "INVITED", "APPROVED", "REJECTED", "DELETED"]
WaitlistRoleName = Literal["BUYER", "SELLER", "BOTH"]
NotifiedFilter = Literal["ALL", "PENDING", "NOTIFIED"]

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), VISIBLE]
UseCase = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=5000), VISIBLE]
Notes = Annotated[str, StringConstraints(max_length=5000)]


class WaitlistJoin(ApiModel):
    email: EmailStr
    name: Name
    use_case: UseCase
    role: WaitlistRoleName
    company: Name | None = None


class WaitlistJoined(ApiModel):
    id: str
    email: str
    created_at: datetime


class WaitlistSignup(ApiModel):
    """The staff view of a signup."""

    id: str
    email: str
    name: str
    use_case: str
    role: WaitlistRoleName
    company: str | None
    status: WaitlistStatusName
    notes: str | None
    notified_at: datetime | None
    deleted_at: datetime | None
    created_at: datetime
    updated_at: datetime


class WaitlistList(ApiModel):
    signups: list[WaitlistSignup]
    total: int = Field(description="Signups matching the filters (the list itself stops at `limit`).")


class WaitlistQuery(QueryModel):
    query: Annotated[str, StringConstraints(max_length=200)] | None = None
    role: WaitlistRoleName | None = None
    status: WaitlistStatusName | None = None
    notified: NotifiedFilter = "ALL"
    include_deleted: bool = False
    limit: Annotated[int, Field(ge=1, le=200)] = 50


class WaitlistUpdate(ApiModel):
    status: WaitlistStatusName
    notes: Notes | None = None


class WaitlistDelete(ApiModel):
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = None


class WaitlistConversion(ApiModel):
    signup: WaitlistSignup
    user: PublicUser
    user_created: bool = Field(description="False when an account with this email existed already.")
