"""The capability taxonomy: public reads, custom tag requests, staff administration.

The seeded taxonomy is shared by every test of a run, so tests that change tags work on tags they create
(the fixture removes them afterwards) and leave the seeded ones as they were.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from callboard_core.audit.models import AuditEvent
from tests.conftest import key_headers, new_client, owner_client, register_agent

TAG_FIELDS = {
    "id",
    "slug",
    "name",
    "description",
    "categoryId",
    "aliases",
    "sortOrder",
    "featured",
    "status",
    "mergedIntoTagId",
    "category",
}
REQUEST_FIELDS = {
    "id",
    "rawText",
    "normalizedText",
    "suggestedCategoryId",
    "explanation",
    "requestedByUserId",
    "agentId",
    "status",
    "reviewedByUserId",
    "resolvedTagId",
    "decisionReason",
    "createdAt",
    "updatedAt",
    "reviewedAt",
    "similarPendingCount",
}


def uniq(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def staff(app: Any, core: Any, role: str = "SUPPORT") -> tuple[httpx.AsyncClient, str]:
    return await owner_client(app, core, role=role)


async def make_category(admin: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "Category " + uniq())
    r = await admin.post("/admin/capabilities/categories", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def make_tag(admin: httpx.AsyncClient, category_id: str, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "Tag " + uniq())
    r = await admin.post("/admin/capabilities/tags", json={"categoryId": category_id, **body})
    assert r.status_code == 201, r.text
    return r.json()


async def slugs(client: httpx.AsyncClient, query: str, **params: str) -> list[str]:
    r = await client.get("/capabilities/tags", params={"query": query, **params})
    assert r.status_code == 200, r.text
    return [t["slug"] for t in r.json()["tags"]]


# --- public reads --------------------------------------------------------------------------------


async def test_tree_lists_active_categories_in_order(client):
    r = await client.get("/capabilities")
    assert r.status_code == 200, r.text
    categories = r.json()["categories"]
    assert categories and all(c["status"] == "ACTIVE" for c in categories)
    orders = [c["sortOrder"] for c in categories]
    assert orders == sorted(orders)
    software = next(c for c in categories if c["slug"] == "software")
    assert set(software) == {"id", "slug", "name", "description", "sortOrder", "status", "tags"}
    go = next(t for t in software["tags"] if t["slug"] == "go")
    assert set(go) == TAG_FIELDS
    assert go["aliases"] == ["golang"] and go["mergedIntoTagId"] is None
    assert go["category"] == {"id": software["id"], "slug": "software", "name": software["name"]}
    assert all(t["status"] == "ACTIVE" for c in categories for t in c["tags"])

    narrowed = (await client.get("/capabilities", params={"query": "golang"})).json()["categories"]
    assert [c["slug"] for c in narrowed] == ["software"]
    assert [t["slug"] for t in narrowed[0]["tags"]] == ["go"]


async def test_search_by_alias_name_and_category(client):
    assert (await slugs(client, "golang"))[0] == "go"
    assert (await slugs(client, "GoLang"))[0] == "go"
    assert "python" in await slugs(client, "PYTH")
    tree = (await client.get("/capabilities")).json()["categories"]
    software = next(c for c in tree if c["slug"] == "software")
    data = next(c for c in tree if c["slug"] == "data")
    assert "sql" in await slugs(client, "postgres", categoryId=software["id"])
    assert await slugs(client, "postgres", categoryId=data["id"]) == []
    everything = (await client.get("/capabilities/tags")).json()["tags"]
    assert len(everything) == sum(len(c["tags"]) for c in tree)
    assert all(t["category"] is not None for t in everything)


async def test_unknown_query_parameter_and_long_query_are_rejected(client):
    assert (await client.get("/capabilities/tags", params={"nope": "1"})).status_code == 422
    assert (await client.get("/capabilities/tags", params={"query": "x" * 201})).status_code == 422


async def test_hidden_tags_and_categories_are_not_public(app, core, client):
    admin, _ = await staff(app, core)
    async with admin:
        cat = await make_category(admin)
        hidden = await make_tag(admin, cat["id"], name="Hidden " + uniq(), status="HIDDEN")
        visible = await make_tag(admin, cat["id"], name="Visible " + uniq())
        assert await slugs(client, hidden["slug"]) == []
        assert await slugs(client, visible["slug"]) == [visible["slug"]]
        public_cat = next(
            c for c in (await client.get("/capabilities")).json()["categories"] if c["id"] == cat["id"]
        )
        assert [t["slug"] for t in public_cat["tags"]] == [visible["slug"]]
        # staff see everything
        r = await admin.get("/admin/capabilities/tags", params={"query": hidden["slug"]})
        assert [t["status"] for t in r.json()["tags"]] == ["HIDDEN"]

        r = await admin.patch(f"/admin/capabilities/categories/{cat['id']}", json={"status": "HIDDEN"})
        assert r.status_code == 200 and r.json()["status"] == "HIDDEN"
        assert cat["id"] not in [c["id"] for c in (await client.get("/capabilities")).json()["categories"]]
        assert await slugs(client, visible["slug"]) == []
        admin_tree = (await admin.get("/admin/capabilities")).json()["categories"]
        mine = next(c for c in admin_tree if c["id"] == cat["id"])
        assert {t["slug"] for t in mine["tags"]} == {hidden["slug"], visible["slug"]}


# --- custom tag requests -------------------------------------------------------------------------


async def test_tag_request_shape_and_similar_pending_count(app, core, client):
    alice, alice_id = await owner_client(app, core)
    bob, _ = await owner_client(app, core)
    text = "Quantum " + uniq()
    async with alice, bob:
        r = await alice.post(
            "/capabilities/requests", json={"rawText": f"  {text.upper()}  ", "explanation": "why"}
        )
        assert r.status_code == 201, r.text
        first = r.json()
        assert set(first) == REQUEST_FIELDS
        assert first["normalizedText"] == text.lower().replace(" ", "-")
        assert first["status"] == "PENDING" and first["requestedByUserId"] == alice_id
        assert first["reviewedAt"] is None and first["resolvedTagId"] is None and first["agentId"] is None
        assert first["similarPendingCount"] == 0
        # asking again returns the same pending request
        again = await alice.post("/capabilities/requests", json={"rawText": text})
        assert again.status_code == 201 and again.json()["id"] == first["id"]
        # someone else asking for it (other spelling) sees one similar request
        r = await bob.post("/capabilities/requests", json={"rawText": text.replace(" ", "--")})
        assert r.status_code == 201, r.text
        assert r.json()["id"] != first["id"] and r.json()["similarPendingCount"] == 1
    # no session: 401
    assert (await client.post("/capabilities/requests", json={"rawText": "x"})).status_code == 401


async def test_tag_request_for_existing_tag_is_409(app, core):
    owner, _ = await owner_client(app, core)
    async with owner:
        for text in ("golang", "Go", "GOLANG", "code review", "Code-Review"):
            r = await owner.post("/capabilities/requests", json={"rawText": text})
            assert r.status_code == 409, (text, r.text)
            assert r.json()["code"] == "tag_exists"
        r = await owner.post("/capabilities/requests", json={"rawText": "golang"})
        assert r.json()["slug"] == "go"


async def test_tag_request_checks_agent_and_category(app, core, client):
    owner, _ = await owner_client(app, core)
    other, _ = await owner_client(app, core)
    reg = await register_agent(client)
    code = reg["claimUrl"].rsplit("/", 1)[1]
    async with owner, other:
        assert (await owner.post(f"/api/v2/claim/{code}")).status_code == 200
        agent_id = reg["agent"]["id"]
        r = await other.post("/capabilities/requests", json={"rawText": uniq("x"), "agentId": agent_id})
        assert r.status_code == 404 and r.json()["code"] == "agent_not_found"
        r = await owner.post(
            "/capabilities/requests", json={"rawText": uniq("x"), "suggestedCategoryId": "cat_nope"}
        )
        assert r.status_code == 404 and r.json()["code"] == "category_not_found"
        cat_id = (await client.get("/capabilities")).json()["categories"][0]["id"]
        r = await owner.post(
            "/capabilities/requests",
            json={"rawText": uniq("x"), "agentId": agent_id, "suggestedCategoryId": cat_id},
        )
        assert r.status_code == 201, r.text
        assert r.json()["agentId"] == agent_id and r.json()["suggestedCategoryId"] == cat_id
        r = await owner.post("/capabilities/requests", json={"rawText": "x" * 101})
        assert r.status_code == 422
        r = await owner.post("/capabilities/requests", json={"rawText": "x", "extra": 1})
        assert r.status_code == 422


# --- staff: review -------------------------------------------------------------------------------


async def test_approve_new_makes_the_tag_public(app, core, client):
    owner, _ = await owner_client(app, core)
    admin, admin_id = await staff(app, core, role="MODERATOR")
    text = "Haskell " + uniq()
    async with owner, admin:
        req = (await owner.post("/capabilities/requests", json={"rawText": text})).json()
        assert await slugs(client, text) == []
        software = next(
            c for c in (await client.get("/capabilities")).json()["categories"] if c["slug"] == "software"
        )
        # APPROVE_NEW needs a category
        r = await admin.post(
            f"/admin/capabilities/requests/{req['id']}/review", json={"action": "APPROVE_NEW"}
        )
        assert r.status_code == 422, r.text
        r = await admin.post(
            f"/admin/capabilities/requests/{req['id']}/review",
            json={
                "action": "APPROVE_NEW",
                "categoryId": software["id"],
                "aliases": ["hs-x"],
                "decisionReason": "useful",
            },
        )
        assert r.status_code == 200, r.text
        reviewed = r.json()
        assert reviewed["status"] == "APPROVED" and reviewed["reviewedByUserId"] == admin_id
        assert reviewed["resolvedTagId"] and reviewed["reviewedAt"] and reviewed["decisionReason"] == "useful"
        found = (await client.get("/capabilities/tags", params={"query": text})).json()["tags"]
        assert [t["id"] for t in found] == [reviewed["resolvedTagId"]]
        assert found[0]["slug"] == req["normalizedText"] and found[0]["name"] == text
        assert found[0]["categoryId"] == software["id"] and found[0]["aliases"] == ["hs-x"]
        # the tag can be used at once
        reg = await register_agent(client, capabilities=[found[0]["slug"]])
        assert reg["agent"]["capabilities"] == [found[0]["slug"]]
        # a reviewed request cannot be reviewed again
        r = await admin.post(f"/admin/capabilities/requests/{req['id']}/review", json={"action": "REJECT"})
        assert r.status_code == 409 and r.json()["code"] == "tag_request_already_reviewed"
        assert r.json()["currentState"] == "APPROVED"
        # and the text now names an existing tag
        r = await owner.post("/capabilities/requests", json={"rawText": text})
        assert r.status_code == 409 and r.json()["code"] == "tag_exists"
    async with core.uow() as uow:
        actions = (
            (
                await uow.session.execute(
                    select(AuditEvent.action).where(
                        AuditEvent.actor_id == admin_id, AuditEvent.target_id == req["id"]
                    )
                )
            )
            .scalars()
            .all()
        )
    assert actions == ["capability_request.review"]


async def test_map_existing_adds_alias_and_apply_to_similar(app, core, client):
    alice, _ = await owner_client(app, core)
    bob, _ = await owner_client(app, core)
    carol, _ = await owner_client(app, core)
    admin, _ = await staff(app, core)
    async with alice, bob, carol, admin:
        cat = await make_category(admin)
        tag = await make_tag(admin, cat["id"])
        text = "Zig Lang " + uniq()
        first = (await alice.post("/capabilities/requests", json={"rawText": text})).json()
        second = (await bob.post("/capabilities/requests", json={"rawText": text.lower()})).json()
        third = (await carol.post("/capabilities/requests", json={"rawText": text.upper()})).json()
        assert third["similarPendingCount"] == 2
        # MAP_EXISTING needs a tag
        r = await admin.post(
            f"/admin/capabilities/requests/{first['id']}/review", json={"action": "MAP_EXISTING"}
        )
        assert r.status_code == 422
        r = await admin.post(
            f"/admin/capabilities/requests/{first['id']}/review",
            json={"action": "MAP_EXISTING", "resolvedTagId": "tag_nope"},
        )
        assert r.status_code == 404 and r.json()["code"] == "tag_not_found"
        r = await admin.post(
            f"/admin/capabilities/requests/{first['id']}/review",
            json={"action": "MAP_EXISTING", "resolvedTagId": tag["id"], "applyToSimilar": True},
        )
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "MAPPED" and r.json()["resolvedTagId"] == tag["id"]
        assert r.json()["similarPendingCount"] == 0
        # the text is now an alias: searchable, and a new request for it is refused
        assert await slugs(client, text) == [tag["slug"]]
        updated = (await admin.get("/admin/capabilities/tags", params={"query": tag["slug"]})).json()["tags"][
            0
        ]
        assert first["normalizedText"] in updated["aliases"]
        r = await alice.post("/capabilities/requests", json={"rawText": text})
        assert r.status_code == 409 and r.json()["slug"] == tag["slug"]
        # the similar requests got the same decision
        listed = (await admin.get("/admin/capabilities/requests", params={"query": text})).json()["requests"]
        assert {x["id"]: x["status"] for x in listed} == {
            first["id"]: "MAPPED",
            second["id"]: "MAPPED",
            third["id"]: "MAPPED",
        }
        assert all(x["resolvedTagId"] == tag["id"] for x in listed)


async def test_reject_needs_clarification_and_request_listing(app, core):
    owner, _ = await owner_client(app, core)
    admin, _ = await staff(app, core)
    async with owner, admin:
        a = (await owner.post("/capabilities/requests", json={"rawText": "alpha " + uniq()})).json()
        b = (await owner.post("/capabilities/requests", json={"rawText": "beta " + uniq()})).json()
        r = await admin.post(
            f"/admin/capabilities/requests/{a['id']}/review",
            json={"action": "NEEDS_CLARIFICATION", "decisionReason": "what is it?"},
        )
        assert r.status_code == 200 and r.json()["status"] == "NEEDS_CLARIFICATION"
        # a request waiting for clarification can still be decided
        r = await admin.post(f"/admin/capabilities/requests/{a['id']}/review", json={"action": "REJECT"})
        assert r.status_code == 200 and r.json()["status"] == "REJECTED"

        pending = (await admin.get("/admin/capabilities/requests", params={"status": "PENDING"})).json()[
            "requests"
        ]
        assert [x["id"] for x in pending] == [b["id"]]
        rejected = (await admin.get("/admin/capabilities/requests", params={"status": "REJECTED"})).json()
        assert [x["id"] for x in rejected["requests"]] == [a["id"]]
        everything = (await admin.get("/admin/capabilities/requests", params={"limit": "1"})).json()[
            "requests"
        ]
        assert len(everything) == 1
        assert (await admin.get("/admin/capabilities/requests", params={"limit": "201"})).status_code == 422
        assert (await admin.get("/admin/capabilities/requests", params={"status": "NOPE"})).status_code == 422
        r = await admin.post("/admin/capabilities/requests/ctr_nope/review", json={"action": "REJECT"})
        assert r.status_code == 404 and r.json()["code"] == "tag_request_not_found"


# --- staff: categories and tags ------------------------------------------------------------------


async def test_category_and_tag_administration(app, core, client):
    admin, admin_id = await staff(app, core, role="ADMIN")
    async with admin:
        name = "Robotics " + uniq()
        cat = await make_category(admin, name=name, description="Machines")
        assert (
            cat["slug"] == name.lower().replace(" ", "-") and cat["status"] == "ACTIVE" and cat["tags"] == []
        )
        r = await admin.post("/admin/capabilities/categories", json={"name": "Other", "slug": cat["slug"]})
        assert r.status_code == 409 and r.json()["code"] == "category_slug_taken"
        r = await admin.post("/admin/capabilities/categories", json={"name": "x", "slug": "Not A Slug"})
        assert r.status_code == 422
        r = await admin.patch(
            f"/admin/capabilities/categories/{cat['id']}", json={"description": None, "sortOrder": -5}
        )
        assert r.status_code == 200 and r.json()["description"] is None and r.json()["sortOrder"] == -5
        r = await admin.patch(f"/admin/capabilities/categories/{cat['id']}", json={"name": None})
        assert r.status_code == 422
        r = await admin.patch(f"/admin/capabilities/categories/{cat['id']}", json={"slug": "software"})
        assert r.status_code == 409
        r = await admin.patch("/admin/capabilities/categories/cat_nope", json={"name": "x"})
        assert r.status_code == 404 and r.json()["code"] == "category_not_found"
        # the lowest sortOrder comes first
        assert (await client.get("/capabilities")).json()["categories"][0]["id"] == cat["id"]

        tag = await make_tag(
            admin,
            cat["id"],
            name="Arm Control " + uniq(),
            aliases=["Servo Tuning", "servo-tuning"],
            featured=True,
        )
        assert tag["aliases"] == ["servo-tuning"] and tag["featured"] is True
        assert tag["category"] == {"id": cat["id"], "slug": cat["slug"], "name": name}
        r = await admin.post("/admin/capabilities/tags", json={"name": "Go", "categoryId": cat["id"]})
        assert r.status_code == 409 and r.json()["code"] == "tag_slug_taken"
        r = await admin.post("/admin/capabilities/tags", json={"name": "x", "categoryId": "cat_nope"})
        assert r.status_code == 404

        # a new slug follows the tag onto the agents holding it
        reg = await register_agent(client, capabilities=[tag["slug"]])
        new_slug = uniq("renamed-")
        r = await admin.patch(
            f"/admin/capabilities/tags/{tag['id']}", json={"slug": new_slug, "description": "d"}
        )
        assert r.status_code == 200, r.text
        assert r.json()["slug"] == new_slug and r.json()["description"] == "d"
        me = await client.get("/api/v2/agents/me", headers=key_headers(reg["apiKey"]))
        assert me.json()["capabilities"] == [new_slug]
        r = await admin.patch("/admin/capabilities/tags/tag_nope", json={"name": "x"})
        assert r.status_code == 404 and r.json()["code"] == "tag_not_found"
    async with core.uow() as uow:
        actions = (
            (await uow.session.execute(select(AuditEvent.action).where(AuditEvent.actor_id == admin_id)))
            .scalars()
            .all()
        )
    assert {
        "capability_category.create",
        "capability_category.update",
        "capability_tag.create",
        "capability_tag.update",
    } <= set(actions)


async def test_merge_repoints_agent_capabilities(app, core, client):
    admin, _ = await staff(app, core)
    async with admin:
        cat = await make_category(admin)
        old = await make_tag(
            admin, cat["id"], name="Golang Legacy " + uniq(), aliases=["old-alias-" + uniq()]
        )
        target = await make_tag(admin, cat["id"], name="Go Modern " + uniq())
        lone = await register_agent(client, capabilities=["python", old["slug"]])
        both = await register_agent(client, capabilities=[old["slug"], target["slug"]])

        r = await admin.post(f"/admin/capabilities/tags/{old['id']}/merge", json={"intoTagId": old["id"]})
        assert r.status_code == 422
        r = await admin.post(f"/admin/capabilities/tags/{old['id']}/merge", json={"intoTagId": "tag_nope"})
        assert r.status_code == 404
        r = await admin.post(f"/admin/capabilities/tags/{old['id']}/merge", json={"intoTagId": target["id"]})
        assert r.status_code == 200, r.text
        merged_target = r.json()
        assert merged_target["id"] == target["id"]
        assert set(merged_target["aliases"]) == {old["slug"], *old["aliases"]}

        me = (await client.get("/api/v2/agents/me", headers=key_headers(lone["apiKey"]))).json()
        assert me["capabilities"] == ["python", target["slug"]]
        me = (await client.get("/api/v2/agents/me", headers=key_headers(both["apiKey"]))).json()
        assert me["capabilities"] == [target["slug"]]

        merged = (await admin.get("/admin/capabilities/tags", params={"query": old["slug"]})).json()["tags"]
        old_now = next(t for t in merged if t["id"] == old["id"])
        assert old_now["status"] == "DEPRECATED" and old_now["mergedIntoTagId"] == target["id"]
        assert old_now["aliases"] == []
        # the old slug now finds the target publicly, and a request for it is refused
        assert await slugs(client, old["slug"]) == [target["slug"]]
        r = await admin.post(f"/admin/capabilities/tags/{old['id']}/merge", json={"intoTagId": target["id"]})
        assert r.status_code == 409 and r.json()["code"] == "tag_already_merged"
        other = await make_tag(admin, cat["id"])
        r = await admin.post(f"/admin/capabilities/tags/{other['id']}/merge", json={"intoTagId": old["id"]})
        assert r.status_code == 409 and r.json()["code"] == "merge_target_deprecated"


# --- access --------------------------------------------------------------------------------------

ADMIN_ROUTES = [
    ("GET", "/admin/capabilities", None),
    ("POST", "/admin/capabilities/categories", {"name": "x"}),
    ("PATCH", "/admin/capabilities/categories/cat_x", {"name": "x"}),
    ("GET", "/admin/capabilities/tags", None),
    ("POST", "/admin/capabilities/tags", {"name": "x", "categoryId": "cat_x"}),
    ("PATCH", "/admin/capabilities/tags/tag_x", {"name": "x"}),
    ("POST", "/admin/capabilities/tags/tag_x/merge", {"intoTagId": "tag_y"}),
    ("GET", "/admin/capabilities/requests", None),
    ("POST", "/admin/capabilities/requests/ctr_x/review", {"action": "REJECT"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
async def test_admin_routes_need_a_staff_session(app, core, method, path, body):
    user, _ = await owner_client(app, core)
    async with user:
        r = await user.request(method, path, json=body)
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "insufficient_role"
    async with new_client(app) as anonymous:
        r = await anonymous.request(method, path, json=body, headers={"Origin": "http://testserver"})
        assert r.status_code == 401, r.text
