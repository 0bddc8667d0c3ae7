"""Job types: the public list (both namings), the seed, submission checks against a type, the review preview.

The seeded types are shared by every test of a run: tests that need other types add their own (the fixture
removes rows created after the seed) and a test that changes a seeded row restores it by seeding again.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from sqlalchemy import select

from callboard_core.capabilities.models import CapabilityTag
from callboard_core.container import Core
from callboard_core.errors import ValidationFailed
from callboard_core.job_types import service as job_types
from callboard_core.job_types.models import JobType
from callboard_core.job_types.seed import (
    JOB_TYPES,
    SeedError,
    check_definition,
    load_definitions,
    seed_job_types,
)
from callboard_core.seed import apply_seed
from http_api.errors import render_error

PATHS = ["/api/v2/job-types", "/api/v2/bounty-types"]
FIELDS = {
    "id",
    "key",
    "displayName",
    "description",
    "capabilityTagId",
    "artifactSchemaJson",
    "reviewPacketSchemaJson",
    "submissionRequirementsJson",
    "previewPolicyJson",
    "active",
}
SEEDED = {"general", "code-change", "data-extraction", "summarization", "research-report", "translation"}
TAG_OF = {
    "general": "general-tasks",
    "code-change": None,
    "data-extraction": "web-scraping",
    "summarization": "summarization",
    "research-report": "web-research",
    "translation": "translation",
}

# A realistic good submission per seeded type: (artifactType, structuredPayloadJson, files as (role, mime)).
GOOD: dict[str, tuple[str, dict[str, Any], list[tuple[str, str]]]] = {
    "general": (
        "text",
        {"summary": "Three options compared on price and lead time.", "answer": "Option B is cheapest: ..."},
        [("DELIVERABLE", "text/markdown"), ("PREVIEW", "image/png")],
    ),
    "code-change": (
        "patch",
        {
            "title": "Handle empty CSV uploads",
            "summary": "Empty files now give a clear 422 instead of a 500.",
            "patch": "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n",
            "baseRef": "a1b2c3d",
            "filesChanged": ["x.py"],
            "testsRun": [{"command": "pytest -q", "passed": True, "summary": "120 passed"}],
        },
        [("DELIVERABLE", "text/x-diff")],
    ),
    "data-extraction": (
        "dataset",
        {
            "summary": "Opening hours of 2 branches.",
            "fields": [{"name": "branch", "type": "string"}, {"name": "opensAt", "type": "string"}],
            "records": [{"branch": "Mitte", "opensAt": "08:00"}, {"branch": "Pankow", "opensAt": None}],
            "recordCount": 2,
        },
        [("DELIVERABLE", "text/csv; charset=utf-8")],
    ),
    "summarization": (
        "text",
        {"summary": "The paper shows ...", "keyPoints": ["a", "b"], "wordCount": 4},
        [],
    ),
    "research-report": (
        "document",
        {
            "title": "Heat pump subsidies in the Nordics",
            "summary": "All four countries subsidise; Norway the most per unit.",
            "findings": [
                {"claim": "Norway pays up to NOK 25,000.", "confidence": "high", "sourceIndexes": [0]}
            ],
            "sources": [{"url": "https://enova.example/heat-pumps", "title": "Enova"}],
        },
        [("DELIVERABLE", "application/pdf")],
    ),
    "translation": (
        "text",
        {"sourceLanguage": "en", "targetLanguage": "pt-BR", "translatedText": "Olá, mundo."},
        [],
    ),
}


def uniq(prefix: str = "jt") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def load(core: Core, key: str) -> JobType:
    async with core.uow() as uow:
        job_type = await job_types.get_active(uow.session, key=key)
        uow.session.expunge(job_type)
        return job_type


def rejected(job_type: JobType, **submission: Any) -> dict[str, dict[str, Any]]:
    """Submit and expect a refusal: the errors by field."""
    with pytest.raises(ValidationFailed) as caught:
        job_types.validate_submission(job_type, **submission)
    errors = caught.value.errors
    assert len({e["field"] for e in errors}) == len(errors), errors  # one error per problem
    return {e["field"]: e for e in errors}


def schema_type(**overrides: Any) -> JobType:
    """A job type that is never stored: validate_submission and the preview read only the object."""
    values: dict[str, Any] = dict(
        key="custom",
        display_name="Custom",
        artifact_schema_json={"type": "object"},
        review_packet_schema_json={"type": "object"},
        submission_requirements_json={"artifactTypes": ["text"], "maxFiles": 3},
        preview_policy_json={"previewFields": [], "maxPreviewChars": 10},
    )
    values.update(overrides)
    return JobType(**values)


# --- the public list -----------------------------------------------------------------------------


async def test_both_paths_list_the_seeded_types_without_a_credential(client: Any) -> None:
    bodies = []
    for path in PATHS:
        r = await client.get(path)
        assert r.status_code == 200, r.text
        bodies.append(r.json())
    assert bodies[0] == bodies[1]
    body = bodies[0]
    assert set(body) == {"jobTypes"}
    listed = body["jobTypes"]
    assert [t["key"] for t in listed] == sorted(SEEDED)
    for t in listed:
        assert set(t) == FIELDS
        assert t["id"].startswith("jbt_")
        assert t["active"] is True
        assert t["displayName"] and t["description"]
        assert t["artifactSchemaJson"]["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        Draft202012Validator.check_schema(t["artifactSchemaJson"])
        Draft202012Validator.check_schema(t["reviewPacketSchemaJson"])
        assert t["submissionRequirementsJson"]["artifactTypes"]
        assert t["previewPolicyJson"]["previewFields"]


async def test_listed_types_link_their_capability_tag(client: Any, core: Core) -> None:
    async with core.uow() as uow:
        rows = await uow.session.execute(select(CapabilityTag.slug, CapabilityTag.id))
        tags = {slug: tag_id for slug, tag_id in rows.all()}
    listed = {t["key"]: t for t in (await client.get(PATHS[0])).json()["jobTypes"]}
    for key, slug in TAG_OF.items():
        assert listed[key]["capabilityTagId"] == (tags[slug] if slug else None), key


async def test_an_inactive_type_is_not_listed_and_cannot_be_chosen(client: Any, core: Core) -> None:
    hidden, shown = uniq("hidden"), uniq("shown")
    async with core.uow() as uow:
        for key, active in ((hidden, False), (shown, True)):
            uow.session.add(schema_type(key=key, display_name=key, active=active))
    for path in PATHS:
        keys = [t["key"] for t in (await client.get(path)).json()["jobTypes"]]
        assert shown in keys and hidden not in keys
    async with core.uow() as uow:
        assert (await job_types.get_active(uow.session, key=shown)).key == shown
        with pytest.raises(ValidationFailed) as caught:
            await job_types.get_active(uow.session, key=hidden)
    [error] = caught.value.errors
    assert (error["field"], error["code"]) == ("jobTypeKey", "unknown_job_type")
    assert hidden in error["message"] and "general" in error["message"] and shown in error["message"]


async def test_an_unknown_key_is_a_422_naming_the_field_and_the_choices(core: Core) -> None:
    async with core.uow() as uow:
        assert (await job_types.get_active(uow.session, key="translation")).key == "translation"
        with pytest.raises(ValidationFailed) as caught:
            await job_types.get_active(uow.session, key="tranlsation", field="bountyTypeKey")
        general = await job_types.get_active(uow.session, key="general")
        assert (await job_types.get_active(uow.session, type_id=general.id)).key == "general"
        with pytest.raises(ValidationFailed):
            await job_types.get_active(uow.session, type_id="jbt_nosuchtype")
    [error] = caught.value.errors
    assert error["field"] == "bountyTypeKey" and error["code"] == "unknown_job_type"
    assert "translation" in error["message"]
    response = render_error(caught.value, "req_1")
    assert response.status_code == 422
    assert json.loads(bytes(response.body))["errors"][0]["code"] == "unknown_job_type"


# --- the seed ------------------------------------------------------------------------------------


async def _snapshot(core: Core) -> dict[str, dict[str, Any]]:
    async with core.uow() as uow:
        rows = (await uow.session.execute(select(JobType))).scalars().all()
        return {r.key: {c.key: getattr(r, c.key) for c in JobType.__table__.columns} for r in rows}


async def test_seeding_again_changes_nothing(core: Core) -> None:
    before = await _snapshot(core)
    assert set(before) >= SEEDED
    async with core.uow() as uow:
        await apply_seed(uow.session)
        await apply_seed(uow.session)
    assert await _snapshot(core) == before


async def test_seeding_repairs_a_drifted_definition(core: Core) -> None:
    before = await _snapshot(core)
    try:
        async with core.uow() as uow:
            row = await job_types.get_active(uow.session, key="summarization")
            row.display_name = "Changed by hand"
            row.preview_policy_json = {"previewFields": ["summary"], "maxPreviewChars": 100000}
        async with core.uow() as uow:
            await seed_job_types(uow.session)
        after = (await _snapshot(core))["summarization"]
        assert after["display_name"] == before["summarization"]["display_name"]
        assert after["preview_policy_json"] == before["summarization"]["preview_policy_json"]
        assert after["id"] == before["summarization"]["id"]  # jobs keep pointing at it
        assert after["updated_at"] > before["summarization"]["updated_at"]
    finally:
        async with core.uow() as uow:
            await seed_job_types(uow.session)


def _definition(key: str = "general") -> dict[str, Any]:
    entries = json.loads(JOB_TYPES.read_text())["jobTypes"]
    return copy.deepcopy(next(e for e in entries if e["key"] == key))


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (
            lambda d: d["artifactSchemaJson"].update(type="objekt"),
            "artifactSchemaJson is not a valid JSON Schema",
        ),
        (
            lambda d: d["reviewPacketSchemaJson"].update(required="title"),
            "reviewPacketSchemaJson is not a valid",
        ),
        (lambda d: d["previewPolicyJson"]["previewFields"].append("secret"), "not in artifactSchemaJson"),
        (lambda d: d["reviewPacketSchemaJson"]["properties"].pop("title"), "exactly the previewFields"),
        (lambda d: d["submissionRequirementsJson"].pop("maxFiles"), "maxFiles"),
        (
            lambda d: d["artifactSchemaJson"]["examples"][0].pop("answer"),
            "an example breaks artifactSchemaJson",
        ),
        (lambda d: d.update(key="General Task"), "lowercase slug"),
    ],
)
def test_a_bad_definition_fails_the_seed_loudly(change: Any, complaint: str) -> None:
    definition = _definition()
    check_definition(copy.deepcopy(definition))  # the seeded one passes
    change(definition)
    with pytest.raises(SeedError, match=complaint):
        check_definition(definition)


def test_duplicate_keys_fail_the_seed(tmp_path: Path) -> None:
    path = tmp_path / "job_types.json"
    path.write_text(json.dumps({"jobTypes": [_definition(), _definition()]}))
    with pytest.raises(SeedError, match="twice"):
        load_definitions(path)


async def test_an_unknown_capability_slug_fails_the_seed(core: Core, tmp_path: Path) -> None:
    definition = _definition()
    definition.update(key=uniq(), capabilityTagSlug="no-such-tag")
    path = tmp_path / "job_types.json"
    path.write_text(json.dumps({"jobTypes": [definition]}))
    with pytest.raises(SeedError, match="no-such-tag"):
        async with core.uow() as uow:
            await seed_job_types(uow.session, path)
    assert definition["key"] not in await _snapshot(core)


# --- submissions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(SEEDED))
async def test_a_good_submission_passes(core: Core, key: str) -> None:
    job_type = await load(core, key)
    artifact_type, payload, files = GOOD[key]
    job_types.validate_submission(job_type, artifact_type=artifact_type, payload=payload, files=files)
    for example in job_type.artifact_schema_json.get("examples", []):  # the schema's own example, too
        job_types.validate_submission(
            job_type, artifact_type=job_type.submission_requirements_json["artifactTypes"][0], payload=example
        )


async def test_a_missing_required_field_is_named(core: Core) -> None:
    job_type = await load(core, "code-change")
    payload = {k: v for k, v in GOOD["code-change"][1].items() if k not in ("patch", "testsRun")}
    errors = rejected(job_type, artifact_type="patch", payload=payload)
    assert set(errors) == {"structuredPayloadJson.patch", "structuredPayloadJson.testsRun"}
    assert errors["structuredPayloadJson.patch"]["code"] == "missing"
    assert "'patch'" in errors["structuredPayloadJson.patch"]["message"]


async def test_a_wrong_type_deep_in_the_payload_is_named_by_its_path(core: Core) -> None:
    job_type = await load(core, "code-change")
    payload = copy.deepcopy(GOOD["code-change"][1])
    payload["testsRun"][0]["passed"] = "yes"
    errors = rejected(job_type, artifact_type="patch", payload=payload)
    error = errors["structuredPayloadJson.testsRun.0.passed"]
    assert error["code"] == "wrong_type"
    assert error["message"] == "Must be true or false, not a string."
    assert len(errors) == 1

    errors = rejected(job_type, artifact_type="patch", payload=["not", "an", "object"])
    assert errors["structuredPayloadJson"]["code"] == "wrong_type"


async def test_other_schema_rules_are_reported_with_their_keyword(core: Core) -> None:
    job_type = await load(core, "data-extraction")
    payload = copy.deepcopy(GOOD["data-extraction"][1])
    payload["fields"][0]["type"] = "text"  # not in the enum
    payload["fields"][1]["format"] = "HH:MM"  # not a known property of a field
    payload["records"][0]["address"] = {"street": "Hauptstr. 1"}  # records are flat
    payload["records"].append({"branch": "Wedding", "opensAt": "07:00"})
    errors = rejected(job_type, artifact_type="dataset", payload=payload)
    assert errors["structuredPayloadJson.fields.0.type"]["code"] == "enum"
    assert errors["structuredPayloadJson.fields.1.format"]["code"] == "unknown_field"
    assert errors["structuredPayloadJson.records.0.address"]["code"] == "wrong_type"
    assert len(errors) == 3


async def test_a_payload_wrong_everywhere_gets_a_bounded_error_list(core: Core) -> None:
    job_type = await load(core, "data-extraction")
    payload = copy.deepcopy(GOOD["data-extraction"][1])
    payload["records"] = [{"nested": {"x": i}} for i in range(500)]
    with pytest.raises(ValidationFailed) as caught:
        job_types.validate_submission(job_type, artifact_type="dataset", payload=payload)
    assert 1 <= len(caught.value.errors) <= job_types.MAX_ERRORS


async def test_a_disallowed_artifact_type_lists_the_allowed_ones(core: Core) -> None:
    job_type = await load(core, "code-change")
    errors = rejected(job_type, artifact_type="text", payload=GOOD["code-change"][1])
    assert set(errors) == {"artifactType"}
    assert errors["artifactType"]["code"] == "artifact_type_not_allowed"
    assert "patch" in errors["artifactType"]["message"]


async def test_file_rules(core: Core) -> None:
    job_type = await load(core, "code-change")
    payload = GOOD["code-change"][1]
    max_files = job_type.submission_requirements_json["maxFiles"]
    job_types.validate_submission(
        job_type, artifact_type="patch", payload=payload, files=[("DELIVERABLE", "text/plain")] * max_files
    )
    errors = rejected(
        job_type,
        artifact_type="patch",
        payload=payload,
        files=[("DELIVERABLE", "text/plain")] * (max_files + 1),
    )
    assert set(errors) == {"files"}
    assert errors["files"]["code"] == "too_many_files"
    assert str(max_files) in errors["files"]["message"]

    errors = rejected(
        job_type,
        artifact_type="patch",
        payload=payload,
        files=[("DELIVERABLE", "text/x-diff"), ("PREVIEW", "application/x-msdownload")],
    )
    assert set(errors) == {"files.1"}
    assert errors["files.1"]["code"] == "mime_type_not_allowed"
    assert "application/x-msdownload" in errors["files.1"]["message"]
    assert "text/x-diff" in errors["files.1"]["message"]


async def test_mime_families_and_parameters(core: Core) -> None:
    general = await load(core, "general")  # allows text/* and image/*
    ok = [("DELIVERABLE", "image/webp"), ("DELIVERABLE", "TEXT/CSV; charset=utf-8")]
    job_types.validate_submission(general, artifact_type="text", payload=GOOD["general"][1], files=ok)
    errors = rejected(
        general, artifact_type="text", payload=GOOD["general"][1], files=[("DELIVERABLE", "application/x-sh")]
    )
    assert errors["files.0"]["code"] == "mime_type_not_allowed"


def test_too_few_deliverable_files() -> None:
    job_type = schema_type(
        submission_requirements_json={"artifactTypes": ["text"], "minDeliverableFiles": 1, "maxFiles": 3}
    )
    job_types.validate_submission(
        job_type, artifact_type="text", payload={}, files=[("DELIVERABLE", "text/plain")]
    )
    errors = rejected(job_type, artifact_type="text", payload={}, files=[("PREVIEW", "image/png")])
    assert errors["files"]["code"] == "too_few_deliverable_files"


async def test_every_problem_is_reported_at_once(core: Core) -> None:
    job_type = await load(core, "translation")
    errors = rejected(
        job_type,
        artifact_type="patch",
        payload={"sourceLanguage": "english", "targetLanguage": "de"},
        files=[("DELIVERABLE", "video/mp4")],
    )
    assert set(errors) == {
        "artifactType",
        "structuredPayloadJson.sourceLanguage",
        "structuredPayloadJson.translatedText",
        "files.0",
    }
    assert errors["structuredPayloadJson.sourceLanguage"]["code"] == "pattern"
    assert all(e["in"] == "body" for e in errors.values())


# --- review packet preview -----------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(SEEDED))
async def test_the_preview_keeps_only_preview_fields_and_fits_the_packet_schema(core: Core, key: str) -> None:
    job_type = await load(core, key)
    payload = GOOD[key][1]
    preview = job_types.review_packet_preview(job_type, payload)
    fields = job_type.preview_policy_json["previewFields"]
    assert set(preview) == {f for f in fields if f in payload}
    assert all(preview[f] == payload[f] for f in preview)  # short values pass unchanged
    assert not list(Draft202012Validator(job_type.review_packet_schema_json).iter_errors(preview))


async def test_the_deliverable_is_withheld_from_the_preview(core: Core) -> None:
    code_change = await load(core, "code-change")
    payload = {**GOOD["code-change"][1], "notes": "internal"}
    preview = job_types.review_packet_preview(code_change, payload)
    assert "patch" not in preview and "notes" not in preview
    assert preview["summary"] == payload["summary"]

    extraction = await load(core, "data-extraction")
    preview = job_types.review_packet_preview(extraction, GOOD["data-extraction"][1])
    assert "records" not in preview and preview["recordCount"] == 2


async def test_long_values_are_cut_at_every_depth(core: Core) -> None:
    summarization = await load(core, "summarization")
    limit = summarization.preview_policy_json["maxPreviewChars"]
    text = "word " * 1000
    preview = job_types.review_packet_preview(summarization, {"summary": text, "wordCount": 1000})
    assert len(preview["summary"]) == limit
    assert preview["summary"] == text[: limit - 1] + "…"
    assert preview["wordCount"] == 1000

    extraction = await load(core, "data-extraction")
    limit = extraction.preview_policy_json["maxPreviewChars"]
    payload = {**GOOD["data-extraction"][1], "sampleRecords": [{"branch": "x" * (limit + 50)}]}
    cut = job_types.review_packet_preview(extraction, payload)["sampleRecords"][0]["branch"]
    assert len(cut) == limit and cut.endswith("…")

    code_change = await load(core, "code-change")
    items = code_change.preview_policy_json["maxPreviewItems"]
    payload = {**GOOD["code-change"][1], "filesChanged": [f"f{i}.py" for i in range(items + 30)]}
    assert job_types.review_packet_preview(code_change, payload)["filesChanged"] == [
        f"f{i}.py" for i in range(items)
    ]


def test_a_payload_that_is_not_an_object_previews_as_empty() -> None:
    job_type = schema_type(preview_policy_json={"previewFields": ["summary"], "maxPreviewChars": 10})
    assert job_types.review_packet_preview(job_type, ["summary"]) == {}
    assert job_types.review_packet_preview(job_type, {"summary": "0123456789AB", "x": 1}) == {
        "summary": "012345678…"
    }
