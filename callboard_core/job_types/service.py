"""Job types: the public list, look-up by key while a job is created, and the checks a submission must pass.

A job type says, as data (job_types.json, seeded by key):
- artifactSchemaJson: a JSON Schema (draft 2020-12) for the submission's structuredPayloadJson;
- submissionRequirementsJson: the allowed artifactType values and the rules for the submission's files;
- previewPolicyJson: which payload fields the requester sees before the award, cut to size;
- reviewPacketSchemaJson: the JSON Schema of that preview.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError
from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.lookup import by_pk
from callboard_core.db.readcache import ReadCache
from callboard_core.db.scopes import TAXONOMY
from callboard_core.errors import NotFound, ValidationFailed, field_error
from callboard_core.guidance import Act, step
from callboard_core.job_types import schemas as job_type_schemas
from callboard_core.job_types.models import JobType

PAYLOAD_FIELD = "structuredPayloadJson"
# A payload that is wrong everywhere gets this many errors, not thousands.
MAX_ERRORS = 50
ELLIPSIS = "…"

_JSON_TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


# --- reads ---------------------------------------------------------------------------------------


def job_type_view(job_type: JobType) -> job_type_schemas.JobType:
    return job_type_schemas.JobType.model_validate(job_type)


async def list_active(session: AsyncSession) -> job_type_schemas.JobTypeList:
    """Active job types, by key."""
    rows = await session.execute(select(JobType).where(JobType.active.is_(True)).order_by(JobType.key))
    return job_type_schemas.JobTypeList(job_types=[job_type_view(t) for t in rows.scalars()])


# Every draft reads its job type one of these ways: built once.
_ACTIVE = select(JobType).where(JobType.active.is_(True))
_ACTIVE_BY_KEY = _ACTIVE.where(JobType.key == bindparam("p_key"))
_ACTIVE_BY_ID = _ACTIVE.where(JobType.id == bindparam("p_id"))
_ACTIVE_BY_KEY_AND_ID = _ACTIVE_BY_KEY.where(JobType.id == bindparam("p_id"))


async def get_active(
    session: AsyncSession, *, key: str | None = None, type_id: str | None = None, field: str = "jobTypeKey"
) -> JobType:
    """The active job type with this key (or id), for a job being created.

    Unknown or inactive is a 422 `unknown_job_type` on `field` (pass "bountyTypeKey" for the earlier naming)."""
    if key is None and type_id is None:
        missing = field_error(field, "Name a job type: the key of one of the active job types.", "missing")
        missing.details["next_action"] = step(Act.LIST_JOB_TYPES, "The active job types and their keys.")
        raise missing
    if type_id is None:
        found = await session.execute(_ACTIVE_BY_KEY, {"p_key": key})
    elif key is None:
        found = await session.execute(_ACTIVE_BY_ID, {"p_id": type_id})
    else:
        found = await session.execute(_ACTIVE_BY_KEY_AND_ID, {"p_key": key, "p_id": type_id})
    job_type = found.scalar_one_or_none()
    if job_type is None:
        keys = (
            (await session.execute(select(JobType.key).where(JobType.active.is_(True)).order_by(JobType.key)))
            .scalars()
            .all()
        )
        wanted = key if key is not None else type_id
        raise field_error(
            field,
            f"'{wanted}' is not an active job type; use one of: {', '.join(keys)}.",
            "unknown_job_type",
        )
    return job_type


@dataclass(frozen=True)
class JobTypeRules:
    """What a job copies from its type and a submission is checked and previewed against: a read cache
    entry of the taxonomy scope, shared by every request, so never modified (copy what a row keeps)."""

    id: str
    key: str
    artifact_schema_json: dict[str, Any]
    submission_requirements_json: dict[str, Any]
    preview_policy_json: dict[str, Any]

    @classmethod
    def of(cls, job_type: JobType) -> JobTypeRules:
        return cls(
            job_type.id,
            job_type.key,
            job_type.artifact_schema_json,
            job_type.submission_requirements_json,
            job_type.preview_policy_json,
        )


async def active_rules(
    session: AsyncSession, cache: ReadCache | None, *, key: str | None = None, type_id: str | None = None
) -> JobTypeRules:
    """`get_active` for a new job, through the read cache's taxonomy scope when given: job types change
    rarely, and every draft names one. Only found types are kept (the errors are get_active's)."""

    async def load() -> JobTypeRules:
        return JobTypeRules.of(await get_active(session, key=key, type_id=type_id))

    if cache is None:
        return await load()
    return await cache.get_or_load(("job_type", key, type_id), load, TAXONOMY)


async def rules(session: AsyncSession, type_id: str, cache: ReadCache | None = None) -> JobTypeRules:
    """A job type's rules by id, active or not (404 as `get`), through the read cache's taxonomy scope when
    given."""

    async def load() -> JobTypeRules:
        return JobTypeRules.of(await get(session, type_id))

    if cache is None:
        return await load()
    return await cache.get_or_load(("job_type_rules", type_id), load, TAXONOMY)


async def get(session: AsyncSession, type_id: str) -> JobType:
    """A job type by id, active or not (a job keeps the type it was created with)."""
    job_type = await by_pk(session, JobType, type_id)
    if job_type is None:
        raise NotFound("No such job type.", code="job_type_not_found", jobTypeId=type_id)
    return job_type


# --- submissions ---------------------------------------------------------------------------------


def requirements(job_type: JobType | JobTypeRules) -> job_type_schemas.SubmissionRequirements:
    return job_type_schemas.SubmissionRequirements.model_validate(job_type.submission_requirements_json)


def preview_policy(job_type: JobType | JobTypeRules) -> job_type_schemas.PreviewPolicy:
    return job_type_schemas.PreviewPolicy.model_validate(job_type.preview_policy_json)


def _dotted(path: Iterable[Any]) -> str:
    return ".".join([PAYLOAD_FIELD, *(str(p) for p in path)])


def _snake(keyword: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", keyword).lower()


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _schema_errors(error: SchemaError) -> list[dict[str, Any]]:
    """One jsonschema error as API field errors: the dotted path inside structuredPayloadJson, a stable
    snake_case code, and a message that says what to change (never a dump of the offending value)."""
    path = list(error.absolute_path)
    if error.validator == "required":
        present = error.instance if isinstance(error.instance, dict) else {}
        return [
            {
                "field": _dotted([*path, name]),
                "in": "body",
                "code": "missing",
                "message": f"Required field '{name}' is missing.",
            }
            for name in error.validator_value
            if name not in present
        ]
    if error.validator == "type":
        expected = (
            error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        )
        wanted = " or ".join(_JSON_TYPE_NAMES.get(str(t), str(t)) for t in expected)
        message = f"Must be {wanted}, not {_JSON_TYPE_NAMES.get(_json_type(error.instance), 'that')}."
        return [{"field": _dotted(path), "in": "body", "code": "wrong_type", "message": message}]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set((error.schema or {}).get("properties", {}))
        return [
            {
                "field": _dotted([*path, name]),
                "in": "body",
                "code": "unknown_field",
                "message": f"Unknown field '{name}'; allowed: {', '.join(sorted(allowed)) or 'none'}.",
            }
            for name in error.instance
            if name not in allowed
        ]
    message = error.message if len(error.message) <= 300 else error.message[:299] + ELLIPSIS
    return [{"field": _dotted(path), "in": "body", "code": _snake(str(error.validator)), "message": message}]


def payload_errors(job_type: JobType | JobTypeRules, payload: Any) -> list[dict[str, Any]]:
    """structuredPayloadJson checked against the type's artifact schema (at most MAX_ERRORS errors)."""
    validator = Draft202012Validator(job_type.artifact_schema_json)
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for error in islice(validator.iter_errors(payload), MAX_ERRORS):
        for item in _schema_errors(error):
            if (item["field"], item["code"]) not in seen:
                seen.add((item["field"], item["code"]))
                out.append(item)
    return out[:MAX_ERRORS]


def _mime_allowed(mime_type: str, allowed: Sequence[str]) -> bool:
    mime = mime_type.split(";", 1)[0].strip().lower()
    family = mime.split("/", 1)[0] + "/*"
    return mime in allowed or family in allowed


def validate_submission(
    job_type: JobType | JobTypeRules,
    *,
    artifact_type: str,
    payload: Any,
    files: Sequence[tuple[str, str]] = (),
) -> None:
    """Raise ValidationFailed (422) listing every problem of a submission to a job of this type.

    `files` are the submission's files as (role, mime type): role DELIVERABLE or PREVIEW. Error fields are
    those of the submit body: `artifactType`, `structuredPayloadJson.<path>`, `files`, `files.<index>`."""
    rules = requirements(job_type)
    errors: list[dict[str, Any]] = []
    if artifact_type not in rules.artifact_types:
        errors.append(
            {
                "field": "artifactType",
                "in": "body",
                "code": "artifact_type_not_allowed",
                "message": f"A {job_type.key} submission's artifactType must be one of: "
                f"{', '.join(rules.artifact_types)}; got '{artifact_type}'.",
            }
        )
    errors.extend(payload_errors(job_type, payload))
    if len(files) > rules.max_files:
        errors.append(
            {
                "field": "files",
                "in": "body",
                "code": "too_many_files",
                "message": f"At most {rules.max_files} files may be attached; got {len(files)}.",
            }
        )
    deliverables = sum(1 for role, _ in files if role == "DELIVERABLE")
    if deliverables < rules.min_deliverable_files:
        errors.append(
            {
                "field": "files",
                "in": "body",
                "code": "too_few_deliverable_files",
                "message": f"Attach at least {rules.min_deliverable_files} DELIVERABLE file(s); got {deliverables}.",
            }
        )
    if rules.allowed_mime_types is not None:
        for index, (_, mime_type) in enumerate(files):
            if not _mime_allowed(mime_type, rules.allowed_mime_types):
                errors.append(
                    {
                        "field": f"files.{index}",
                        "in": "body",
                        "code": "mime_type_not_allowed",
                        "message": f"Files of type '{mime_type}' are not accepted for {job_type.key}; "
                        f"allowed: {', '.join(rules.allowed_mime_types)}.",
                    }
                )
    if errors:
        fields = ", ".join(dict.fromkeys(e["field"] for e in errors))[:300]
        raise ValidationFailed(
            f"The submission does not meet the {job_type.key} job type's requirements: {fields}.",
            errors=errors,
        )


# --- review packet -------------------------------------------------------------------------------


def _cut(value: Any, policy: job_type_schemas.PreviewPolicy) -> Any:
    if isinstance(value, str):
        if len(value) <= policy.max_preview_chars:
            return value
        return value[: policy.max_preview_chars - 1] + ELLIPSIS
    if isinstance(value, list):
        return [_cut(v, policy) for v in value[: policy.max_preview_items]]
    if isinstance(value, dict):
        return {k: _cut(v, policy) for k, v in value.items()}
    return value


def review_packet_preview(job_type: JobType | JobTypeRules, payload: Any) -> dict[str, Any]:
    """What the requester may see of a submission's payload before the award: the policy's preview fields
    that are present, strings cut to maxPreviewChars (an ellipsis ends a cut string) and arrays to
    maxPreviewItems, at every depth. Everything else in the payload is withheld."""
    policy = preview_policy(job_type)
    if not isinstance(payload, dict):
        return {}
    return {name: _cut(payload[name], policy) for name in policy.preview_fields if name in payload}
