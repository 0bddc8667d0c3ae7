"""The OpenAPI document as a generator reads it: every operation named once, every `$ref` pointing at a
schema the document holds."""

from __future__ import annotations

import collections
import json
import re
from typing import Any

import pytest

from http_api.openapi import build_openapi
from http_api.routes import all_routes


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return build_openapi(all_routes(), base_url="http://callboard.test")


def test_every_operation_id_names_one_operation(document: dict[str, Any]) -> None:
    named = collections.Counter(
        op["operationId"]
        for item in document["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    )
    assert [name for name, count in named.items() if count > 1] == []


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    refs = set(re.findall(r'"\$ref": "([^"]+)"', json.dumps(document)))
    dangling = [
        r for r in refs if not r.startswith("#/components/schemas/") or r.rsplit("/", 1)[1] not in schemas
    ]
    assert dangling == []
    kind = next(
        p for p in document["paths"]["/me/billing/documents"]["get"]["parameters"] if p["name"] == "kind"
    )
    assert "RECEIPT" in json.dumps(kind["schema"])  # the enum written in place


def test_the_draft_routes_declare_the_drafts_token(document: dict[str, Any]) -> None:
    for path, method in (
        ("/api/agent/register/{slug}/presence", "post"),
        ("/api/agent/register/{slug}/setup", "get"),
        ("/api/agent/register/{slug}/setup", "post"),
        ("/api/agent/register/{slug}/status", "get"),
    ):
        assert document["paths"][path][method]["security"] == [{"draftToken": []}], (path, method)
    assert document["components"]["securitySchemes"]["draftToken"]["scheme"] == "bearer"


async def test_the_caller_is_checked_before_the_request_shape(app: Any, core: Any, client: Any) -> None:
    """401 without a credential and 403 without the role come before 422 for the body, the query or the
    path: a schema-valid client never learns a rule it may not use, and a generated one sees the status its
    credential explains."""
    from tests.conftest import owner_client

    bad_body = {"status": 12, "reason": ["x"]}
    refused = await client.patch("/admin/users/usr_x/status", json=bad_body)
    assert refused.status_code == 401, refused.text
    user, _ = await owner_client(app, core)
    async with user:
        forbidden = await user.patch("/admin/users/usr_x/status", json=bad_body)
        assert forbidden.status_code == 403 and forbidden.json()["code"] == "insufficient_role", (
            forbidden.text
        )
        listing = await user.get("/admin/users", params={"limit": "zero"})
        assert listing.status_code == 403, listing.text
    no_key = await client.post("/api/v2/jobs", json={"title": 7})
    assert no_key.status_code == 401, no_key.text


async def test_a_field_that_may_be_left_out_takes_a_value_and_refuses_null(
    app: Any, core: Any, client: Any
) -> None:
    """The document says such a field is not nullable (no `null` branch) and the server agrees: a value is
    taken (a date as the string JSON has), a null is refused with the field's wire name."""
    from datetime import timedelta

    from callboard_core import clock
    from tests.jobs_helpers import job_body, new_agent, new_owner

    agent = await new_agent(await new_owner(app, core))
    draft = (await client.post("/api/v2/jobs", json=job_body(), headers=agent.h)).json()
    later = (clock.now() + timedelta(hours=2)).isoformat()
    moved = await client.patch(
        f"/api/v2/jobs/{draft['id']}", json={"admissionClosesAt": later}, headers=agent.h
    )
    assert moved.status_code == 200, moved.text
    for path, body, field in (
        (f"/api/v2/jobs/{draft['id']}", {"applicationCap": None}, "applicationCap"),
        ("/api/v2/agents/me", {"name": None}, "name"),
    ):
        refused = await client.patch(path, json=body, headers=agent.h)
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == field and refused.json()["errors"][0]["code"] == "null"
    document = (await client.get("/openapi.json")).json()
    update = document["components"]["schemas"]["JobUpdate"]["properties"]
    assert update["applicationCap"]["type"] == "integer" and "anyOf" not in update["applicationCap"]
    assert {"type": "null"} in update["description"]["anyOf"]  # a field null clears stays nullable
