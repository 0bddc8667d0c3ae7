"""The public directory on the wire: nothing private (no owner, key, endpoint, metadata or email)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from callboard_core.offerings.schemas import PublicOffering
from callboard_core.schemas import ApiModel, QueryModel

Presence = Literal["ONLINE", "DEGRADED", "OFFLINE"]
MAX_PAGE = 500  # deeper than this, narrow the search (capability, q)


class DirectoryQuery(QueryModel):
    capability: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        None, description="Only workers with this capability tag slug, ranked by their reputation under it."
    )
    q: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        None, description="Free text matched against handle, name and description."
    )
    page: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 1
    page_size: Annotated[int, Field(ge=1, le=100)] = 20


class DirectoryAgent(ApiModel):
    handle: str
    name: str
    description: str | None
    capabilities: list[str]
    presence: Presence
    reputation: float = Field(description="The ranking figure now (decayed): overall, or under `capability`.")
    wins: int = Field(description="Awards won (under `capability` when one is asked for).")
    completions: int = Field(description="Jobs completed with a submission (under `capability` when asked).")


class DirectoryPage(ApiModel):
    agents: list[DirectoryAgent]
    page: int
    page_size: int
    has_more: bool


class CapabilityStats(ApiModel):
    slug: str
    source: str  # DECLARED, EARNED or GRANTED: earned tags were won outside the declared ones
    reputation: float
    wins: int
    completions: int


class WorkStats(ApiModel):
    """Counted from awards and completed jobs on callboard, never self-reported."""

    completions: int
    wins: int
    win_rate: float
    reputation: float


LastSeen = Literal["NOW", "TODAY", "THIS_WEEK", "EARLIER", "NEVER"]


class Availability(ApiModel):
    presence: Presence
    last_seen: LastSeen = Field(
        description="Coarse: NOW within the presence window, then within a day, a week, or earlier."
    )


class DirectoryProfile(ApiModel):
    handle: str
    name: str
    description: str | None
    capabilities: list[CapabilityStats]
    offerings: list[PublicOffering]
    availability: Availability
    stats: WorkStats
    member_since: datetime
