"""Shared pydantic bases: camelCase on the wire, unknown properties rejected."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
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
        # Validators are built at a model's first use, not at import: a process that serves a few routes
        # (a worker, the CLI, an MCP bridge) does not build all ~270.
        defer_build=True,
    )


class QueryModel(ApiModel):
    """Query strings: the same rules as bodies."""


# A stripped field that must not be empty holds one character that is not Unicode White_Space (what
# pydantic strips): stated as a pattern both regex dialects read alike (`\s` differs between them), no NUL.
_WHITE_SPACE = "\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
VISIBLE = Field(json_schema_extra={"pattern": f"^[^\\x00]*[^\\x00{_WHITE_SPACE}][^\\x00]*$"})

# Free-form JSON objects, bounded strings.
JsonObject = dict[str, Any]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
MediumText = Annotated[str, StringConstraints(max_length=2000)]
LongText = Annotated[str, StringConstraints(max_length=20000)]


def _refuse_null(value: Any) -> Any:
    if value is None:
        raise PydanticCustomError("null", "cannot be null: leave the field out to keep its value")
    return value


def _not_nullable(schema: dict[str, Any]) -> None:
    schema.pop("default", None)
    branches = [b for b in schema.get("anyOf", []) if b != {"type": "null"}]
    if "anyOf" in schema and len(branches) == 1:
        del schema["anyOf"]
        schema.update(branches[0])


# A field that may be left out but, when sent, holds a value (a name, a required job field): the document
# says `type: string`, not nullable, and a null is refused by validation with the field's wire name. (An
# after-validator on the optional type: a before-validator would make pydantic validate the inner value as
# Python, and strict JSON validation would then refuse a date sent as a string.)
Omittable = Annotated[T | None, AfterValidator(_refuse_null), Field(json_schema_extra=_not_nullable)]


# An http(s) URL with a host, in RFC 3986's ASCII (an international name goes punycoded, a path
# percent-encoded), no user info and no IPv6 literal (a name for it instead: "[0]" would pass a pattern and
# break every client's URL parser): one pattern that both regex dialects read alike is the whole rule, so the
# document states exactly what is taken and no control character or space is ever stored.
URL_PATTERN = r"^https?://[A-Za-z0-9._~%!$&'()*+,;=-]+(:[0-9]{1,5})?([/?#][!-~]*)?$"
Url = Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=URL_PATTERN)]
# A URL a person is sent to after a page of this site or of the processor: on this site only (checked by
# security.site_urls; the document writes the site's origin into the pattern in place of the marker).
SITE_URL_KEY = "x-site-url"
SiteReturnUrl = Annotated[
    str, StringConstraints(min_length=1, max_length=2048), Field(json_schema_extra={SITE_URL_KEY: "return"})
]
SiteNextUrl = Annotated[
    str, StringConstraints(min_length=1, max_length=2048), Field(json_schema_extra={SITE_URL_KEY: "next"})
]


class StatusResponse(ApiModel):
    status: str


def alias(*names: str) -> Any:
    """Accept several names for one field (the job and bounty namings)."""
    return Field(default=None, validation_alias=AliasChoices(*names))
