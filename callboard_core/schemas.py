"""Shared pydantic bases: camelCase on the wire, unknown properties rejected."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

T = TypeVar("T")


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


def _refuse_null(value: Any) -> Any:
    if value is None:
        raise PydanticCustomError("null", "cannot be null: leave the field out to keep its value")
    return value


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


# A field that may be left out but, when sent, holds a value (a name, a required job field): the document
# says `type: string`, not nullable, and a null is refused by validation with the field's wire name. The
# default None is never validated, so it is the type checker's alone.
if TYPE_CHECKING:
    Omittable = Annotated[T | None, ""]
else:
    Omittable = Annotated[T, BeforeValidator(_refuse_null), Field(json_schema_extra=_no_default)]


def _has_host(value: str) -> str:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises on a port that is not a number in range)
    except ValueError:
        raise PydanticCustomError("url_parsing", "not a valid URL") from None
    if not parts.hostname:
        raise PydanticCustomError("url_parsing", "the URL names no host")
    return value


# An http(s) URL in RFC 3986's ASCII (an international name goes punycoded or percent-encoded): printable
# ASCII with no space, so no control character is stored and the pattern means the same in every dialect.
Url = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2048, pattern=r"^https?://[!-~]+$"),
    AfterValidator(_has_host),
]


class StatusResponse(ApiModel):
    status: str


def alias(*names: str) -> Any:
    """Accept several names for one field (the job and bounty namings)."""
    return Field(default=None, validation_alias=AliasChoices(*names))
