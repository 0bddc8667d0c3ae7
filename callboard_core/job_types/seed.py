"""The seeded job types (job_types/job_types.json), applied by key: safe to run again.

The file is the source of truth for the types it lists: a changed definition updates the row (a row that
already matches is left alone, so a second run writes nothing). Retire a type with `"active": false`; a key
dropped from the file is left as it is, since jobs refer to it. Every definition is checked before anything
is written, so a bad file fails `callboard migrate` loudly instead of rejecting submissions later.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.capabilities.models import CapabilityTag
from callboard_core.job_types import schemas as job_type_schemas
from callboard_core.job_types.models import JobType
from callboard_core.job_types.service import review_packet_preview

JOB_TYPES = Path(__file__).with_name("job_types.json")
KEY = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
FIELDS = ("artifactSchemaJson", "reviewPacketSchemaJson", "submissionRequirementsJson", "previewPolicyJson")


class SeedError(ValueError):
    """job_types.json is wrong; the message names the type and the problem."""


def _check_schema(key: str, name: str, schema: Any) -> None:
    if not isinstance(schema, dict):
        raise SeedError(f"job type {key!r}: {name} must be a JSON object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise SeedError(
            f"job type {key!r}: {name} is not a valid JSON Schema (draft 2020-12): {exc.message}"
        ) from exc


def check_definition(entry: dict[str, Any]) -> None:
    """Raise SeedError unless this definition is coherent: valid schemas, parseable requirements and policy,
    preview fields that exist in the artifact schema and are exactly what the review packet schema describes,
    and examples that pass the artifact schema with previews that pass the review packet schema."""
    key = entry.get("key")
    if not isinstance(key, str) or not KEY.match(key) or len(key) > 64:
        raise SeedError(
            f"job type key {key!r} must be a lowercase slug (a-z, 0-9, single hyphens), at most 64"
        )
    for name in FIELDS:
        if name not in entry:
            raise SeedError(f"job type {key!r}: {name} is missing")
    artifact, packet = entry["artifactSchemaJson"], entry["reviewPacketSchemaJson"]
    _check_schema(key, "artifactSchemaJson", artifact)
    _check_schema(key, "reviewPacketSchemaJson", packet)
    try:
        job_type_schemas.SubmissionRequirements.model_validate(entry["submissionRequirementsJson"])
        policy = job_type_schemas.PreviewPolicy.model_validate(entry["previewPolicyJson"])
    except ValidationError as exc:
        raise SeedError(f"job type {key!r}: {exc}") from exc
    unknown = set(policy.preview_fields) - set(artifact.get("properties", {}))
    if unknown:
        raise SeedError(f"job type {key!r}: previewFields {sorted(unknown)} are not in artifactSchemaJson")
    if set(packet.get("properties", {})) != set(policy.preview_fields):
        raise SeedError(f"job type {key!r}: reviewPacketSchemaJson must describe exactly the previewFields")
    draft = JobType(key=key, **{_column(n): entry[n] for n in FIELDS})
    for example in artifact.get("examples", []):
        for schema_name, schema, instance in (
            ("artifactSchemaJson", artifact, example),
            ("reviewPacketSchemaJson", packet, review_packet_preview(draft, example)),
        ):
            problems = [e.message for e in Draft202012Validator(schema).iter_errors(instance)]
            if problems:
                raise SeedError(f"job type {key!r}: an example breaks {schema_name}: {problems[0]}")


def _column(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def load_definitions(path: Path = JOB_TYPES) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(path.read_text())["jobTypes"]
    keys = [str(e.get("key")) for e in entries]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise SeedError(f"job type keys appear twice: {duplicates}")
    for entry in entries:
        check_definition(entry)
    return entries


async def seed_job_types(session: AsyncSession, path: Path = JOB_TYPES) -> None:
    entries = load_definitions(path)
    rows = await session.execute(select(CapabilityTag.slug, CapabilityTag.id))
    tags = {slug: tag_id for slug, tag_id in rows.all()}
    existing = {t.key: t for t in (await session.execute(select(JobType))).scalars()}
    for entry in entries:
        slug = entry.get("capabilityTagSlug")
        if slug is not None and slug not in tags:
            raise SeedError(f"job type {entry['key']!r}: no capability tag with the slug {slug!r}")
        values: dict[str, Any] = {
            "display_name": entry["displayName"],
            "description": entry.get("description"),
            "capability_tag_id": tags[slug] if slug is not None else None,
            "active": entry.get("active", True),
            **{_column(n): entry[n] for n in FIELDS},
        }
        row = existing.get(entry["key"])
        if row is None:
            session.add(JobType(key=entry["key"], **values))
            continue
        changed = {k: v for k, v in values.items() if getattr(row, k) != v}
        for name, value in changed.items():
            setattr(row, name, value)
        if changed:
            row.updated_at = clock.now()
    await session.flush()
