"""Shared pydantic bases: camelCase on the wire, unknown properties rejected."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Request bodies and responses. Unknown properties are rejected (the spec's default)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        from_attributes=True,
        str_strip_whitespace=False,
    )


class QueryModel(ApiModel):
    """Query strings: the same rules as bodies."""


# Free-form JSON objects, bounded strings.
JsonObject = dict[str, Any]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
MediumText = Annotated[str, StringConstraints(max_length=2000)]
LongText = Annotated[str, StringConstraints(max_length=20000)]
Url = Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=r"^https?://[^\s\x00]+$")]


class StatusResponse(ApiModel):
    status: str


def alias(*names: str) -> Any:
    """Accept several names for one field (the job and bounty namings)."""
    return Field(default=None, validation_alias=AliasChoices(*names))
