"""The capability taxonomy on the wire: categories, tags, custom tag requests and the staff bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from callboard_core.schemas import VISIBLE, ApiModel, Omittable, QueryModel

TaxonomyStatusName = Literal["ACTIVE", "HIDDEN", "DEPRECATED"]
TagRequestStatusName = Literal["PENDING", "APPROVED", "MAPPED", "REJECTED", "NEEDS_CLARIFICATION"]
ReviewAction = Literal["APPROVE_NEW", "MAP_EXISTING", "REJECT", "NEEDS_CLARIFICATION"]

Slug = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), VISIBLE]
Description = Annotated[str, StringConstraints(max_length=2000)]
Alias = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64), VISIBLE]
AliasList = Annotated[list[Alias], Field(max_length=50)]
Id = Annotated[str, StringConstraints(min_length=1, max_length=64)]
SearchText = Annotated[str, StringConstraints(max_length=200)]
SortOrder = Annotated[int, Field(ge=-1_000_000, le=1_000_000)]
Reason = Annotated[str, StringConstraints(max_length=2000)]


# --- views ---------------------------------------------------------------------------------------


class CategoryRef(ApiModel):
    id: str
    slug: str
    name: str


class CapabilityTag(ApiModel):
    id: str
    slug: str
    name: str
    description: str | None
    category_id: str
    aliases: list[str]
    sort_order: int
    featured: bool
    status: TaxonomyStatusName
    merged_into_tag_id: str | None
    category: CategoryRef | None = None


class CapabilityCategory(ApiModel):
    id: str
    slug: str
    name: str
    description: str | None
    sort_order: int
    status: TaxonomyStatusName
    tags: list[CapabilityTag] | None = None


class CapabilityTree(ApiModel):
    categories: list[CapabilityCategory]


class TagList(ApiModel):
    tags: list[CapabilityTag]


class CapabilityTagRequest(ApiModel):
    id: str
    raw_text: str
    normalized_text: str
    suggested_category_id: str | None
    explanation: str | None
    requested_by_user_id: str | None
    agent_id: str | None
    status: TagRequestStatusName
    reviewed_by_user_id: str | None
    resolved_tag_id: str | None
    decision_reason: str | None
    created_at: datetime
    updated_at: datetime
    reviewed_at: datetime | None
    similar_pending_count: int | None = Field(
        default=None, description="Other PENDING requests with the same normalized text."
    )


class TagRequestList(ApiModel):
    requests: list[CapabilityTagRequest]


# --- queries -------------------------------------------------------------------------------------


class TreeQuery(QueryModel):
    query: SearchText | None = None


class TagQuery(QueryModel):
    query: SearchText | None = None
    category_id: Id | None = None


class TagRequestQuery(QueryModel):
    status: TagRequestStatusName | None = None
    query: SearchText | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50


# --- bodies --------------------------------------------------------------------------------------


class TagRequestCreate(ApiModel):
    raw_text: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), VISIBLE]
    suggested_category_id: Id | None = None
    explanation: Description | None = None
    agent_id: Id | None = None


class CategoryCreate(ApiModel):
    name: Name
    slug: Slug | None = None
    description: Description | None = None
    sort_order: SortOrder | None = None
    status: TaxonomyStatusName | None = None


class CategoryUpdate(ApiModel):
    """Only the fields sent change; only description may be cleared (null)."""

    slug: Omittable[Slug] = None
    name: Omittable[Name] = None
    description: Description | None = None
    sort_order: Omittable[SortOrder] = None
    status: Omittable[TaxonomyStatusName] = None


class TagCreate(ApiModel):
    name: Name
    category_id: Id
    slug: Slug | None = None
    description: Description | None = None
    aliases: AliasList | None = None
    sort_order: SortOrder | None = None
    featured: bool | None = None
    status: TaxonomyStatusName | None = None


class TagUpdate(ApiModel):
    """Only the fields sent change; only description may be cleared (null)."""

    name: Omittable[Name] = None
    category_id: Omittable[Id] = None
    slug: Omittable[Slug] = None
    description: Description | None = None
    aliases: Omittable[AliasList] = None
    sort_order: Omittable[SortOrder] = None
    featured: Omittable[bool] = None
    status: Omittable[TaxonomyStatusName] = None


class TagMerge(ApiModel):
    into_tag_id: Id = Field(
        description="The tag that absorbs this one: its slug and aliases become aliases there."
    )


class TagRequestReview(ApiModel):
    action: ReviewAction
    category_id: Id | None = Field(default=None, description="Required for APPROVE_NEW.")
    resolved_tag_id: Id | None = Field(default=None, description="Required for MAP_EXISTING.")
    name: Name | None = None
    slug: Slug | None = None
    description: Description | None = None
    aliases: AliasList | None = None
    featured: bool | None = None
    decision_reason: Reason | None = None
    apply_to_similar: bool = Field(
        default=False,
        description="Apply the same decision to other PENDING requests with the same normalized text.",
    )
