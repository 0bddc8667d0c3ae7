"""The waitlist: public signup (ops notified) and staff administration."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from callboard_core.audit.models import AuditEvent
from callboard_core.mail.models import OutboxMessage
from callboard_core.users.models import User
from callboard_core.waitlist.models import WaitlistSignup
from tests.conftest import make_user, new_client, owner_client


def signup_body(**overrides: Any) -> dict[str, Any]:
    body = {
        "email": f"w{uuid.uuid4().hex[:10]}@example.com",
        "name": "Wanda Wait",
        "useCase": "Hire agents",
        "role": "BUYER",
    }
    body.update(overrides)
    return body


async def join(client: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    r = await client.post("/waitlist", json=signup_body(**overrides))
    assert r.status_code == 201, r.text
    return r.json()


async def outbox(core: Any, kind: str, to: str | None = None) -> list[OutboxMessage]:
    async with core.uow(write=False) as uow:
        stmt = select(OutboxMessage).where(OutboxMessage.kind == kind)
        if to is not None:
            stmt = stmt.where(OutboxMessage.to_address == to)
        return list((await uow.session.execute(stmt)).scalars())


async def test_join_shape_and_ops_mail(client, core):
    r = await client.post("/waitlist", json=signup_body(email="Mixed.Case@Example.com", company="Acme"))
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"id", "email", "createdAt"}
    assert body["email"] == "mixed.case@example.com" and body["id"].startswith("wls")
    mails = await outbox(core, "waitlist_joined")
    assert len(mails) == 1
    assert mails[0].to_address == core.settings.ops_email == "ops@callboard.local"
    assert "mixed.case@example.com" in mails[0].body_text and "Acme" in mails[0].body_text


async def test_join_twice_returns_the_same_id_without_a_second_row_or_mail(client, core):
    first = await join(client, email="twice@example.com")
    again = await client.post(
        "/waitlist", json=signup_body(email="TWICE@example.com", name="Other", role="SELLER")
    )
    assert again.status_code == 201
    assert again.json() == first
    async with core.uow(write=False) as uow:
        rows = (
            await uow.session.execute(
                select(func.count())
                .select_from(WaitlistSignup)
                .where(WaitlistSignup.email == "twice@example.com")
            )
        ).scalar_one()
    assert rows == 1
    assert len(await outbox(core, "waitlist_joined")) == 1


async def test_concurrent_joins_with_one_email_make_one_signup(app, core):
    async with new_client(app) as a, new_client(app) as b, new_client(app) as c:
        results = await asyncio.gather(
            *(x.post("/waitlist", json=signup_body(email="race@example.com")) for x in (a, b, c))
        )
    assert [r.status_code for r in results] == [201, 201, 201], [r.text for r in results]
    assert len({r.json()["id"] for r in results}) == 1
    assert len(await outbox(core, "waitlist_joined")) == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"email": "not-an-email"},
        {"role": "ADMIN"},
        {"name": ""},
        {"useCase": "x" * 5001},
        {"company": "x" * 201},
        {"extra": True},
    ],
)
async def test_join_validates_input(client, bad):
    r = await client.post("/waitlist", json=signup_body(**bad))
    assert r.status_code == 422, r.text


async def test_join_requires_fields(client):
    body = signup_body()
    del body["useCase"]
    assert (await client.post("/waitlist", json=body)).status_code == 422


async def test_admin_list_filters(app, core, client):
    buyer = await join(client, email="buyer-one@example.com", name="Bea Buyer", role="BUYER")
    seller = await join(
        client, email="seller@example.com", name="Sam Seller", role="SELLER", company="Sellco"
    )
    both = await join(client, email="both@example.com", role="BOTH")
    admin, _ = await owner_client(app, core, role="SUPPORT")
    async with admin:

        async def ids(**params: Any) -> list[str]:
            r = await admin.get("/admin/waitlist", params=params)
            assert r.status_code == 200, r.text
            return [x["id"] for x in r.json()["signups"]]

        assert await ids() == [both["id"], seller["id"], buyer["id"]]
        listing = (await admin.get("/admin/waitlist")).json()
        assert listing["total"] == 3
        assert set(listing["signups"][0]) == {
            "id",
            "email",
            "name",
            "useCase",
            "role",
            "company",
            "status",
            "notes",
            "notifiedAt",
            "deletedAt",
            "createdAt",
            "updatedAt",
        }
        assert await ids(role="SELLER") == [seller["id"]]
        assert await ids(query="SELLCO") == [seller["id"]]
        assert await ids(query="bea") == [buyer["id"]]
        assert await ids(limit="1") == [both["id"]]
        assert (await admin.get("/admin/waitlist", params={"limit": "1"})).json()["total"] == 3

        r = await admin.patch(
            f"/admin/waitlist/{seller['id']}", json={"status": "APPROVED", "notes": "good fit"}
        )
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "APPROVED" and r.json()["notes"] == "good fit"
        assert await ids(status="APPROVED") == [seller["id"]]
        assert await ids(status="PENDING") == [both["id"], buyer["id"]]

        r = await admin.post(f"/admin/waitlist/{seller['id']}/convert")
        assert r.status_code == 200, r.text
        assert await ids(notified="NOTIFIED") == [seller["id"]]
        assert await ids(notified="PENDING") == [both["id"], buyer["id"]]
        assert await ids(notified="ALL") == [both["id"], seller["id"], buyer["id"]]

        for bad in (
            {"limit": "0"},
            {"limit": "201"},
            {"role": "X"},
            {"notified": "SOON"},
            {"status": "GONE"},
            {"other": "1"},
        ):
            assert (await admin.get("/admin/waitlist", params=bad)).status_code == 422, bad


async def test_soft_delete_hides_unless_include_deleted(app, core, client):
    kept = await join(client)
    gone = await join(client)
    admin, admin_id = await owner_client(app, core, role="SUPPORT")
    async with admin:
        r = await admin.delete(f"/admin/waitlist/{gone['id']}")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "DELETED" and r.json()["deletedAt"] is not None
        # again: no change, still 200
        assert (await admin.delete(f"/admin/waitlist/{gone['id']}")).status_code == 200
        listed = (await admin.get("/admin/waitlist")).json()
        assert [x["id"] for x in listed["signups"]] == [kept["id"]] and listed["total"] == 1
        everything = (await admin.get("/admin/waitlist", params={"includeDeleted": "true"})).json()["signups"]
        assert {x["id"] for x in everything} == {kept["id"], gone["id"]}
        deleted = (await admin.get("/admin/waitlist", params={"status": "DELETED"})).json()["signups"]
        assert [x["id"] for x in deleted] == [gone["id"]]
        # joining again with a deleted signup's email answers the same, and does not revive it
        again = await client.post("/waitlist", json=signup_body(email=gone["email"]))
        assert again.status_code == 201 and again.json()["id"] == gone["id"]
        assert [x["id"] for x in (await admin.get("/admin/waitlist")).json()["signups"]] == [kept["id"]]
        # restoring through PATCH clears deletedAt
        r = await admin.patch(f"/admin/waitlist/{gone['id']}", json={"status": "PENDING"})
        assert r.status_code == 200 and r.json()["deletedAt"] is None
        r = await admin.delete("/admin/waitlist/wls_nope")
        assert r.status_code == 404 and r.json()["code"] == "waitlist_signup_not_found"
        r = await admin.request("DELETE", f"/admin/waitlist/{gone['id']}", json={"reason": "spam"})
        assert r.status_code == 200
    async with core.uow(write=False) as uow:
        actions = (
            (
                await uow.session.execute(
                    select(AuditEvent.action)
                    .where(AuditEvent.actor_id == admin_id, AuditEvent.target_id == gone["id"])
                    .order_by(AuditEvent.created_at)
                )
            )
            .scalars()
            .all()
        )
    assert actions == ["waitlist.delete", "waitlist.update", "waitlist.delete"]


async def test_convert_creates_user_and_mails_welcome(app, core, client):
    signup = await join(
        client, email="convert-me@example.com", name="Cora Convert", role="SELLER", company="Co"
    )
    admin, admin_id = await owner_client(app, core, role="SUPPORT")
    async with admin:
        r = await admin.post(f"/admin/waitlist/{signup['id']}/convert")
        assert r.status_code == 409 and r.json()["code"] == "waitlist_not_approved"
        assert r.json()["currentState"] == "PENDING"
        assert (
            await admin.patch(f"/admin/waitlist/{signup['id']}", json={"status": "APPROVED"})
        ).status_code == 200
        r = await admin.post(f"/admin/waitlist/{signup['id']}/convert")
        assert r.status_code == 200, r.text
        result = r.json()
        assert result["userCreated"] is True
        assert result["signup"]["status"] == "INVITED" and result["signup"]["notifiedAt"] is not None
        user = result["user"]
        assert user["email"] == "convert-me@example.com" and user["name"] == "Cora Convert"
        assert user["previewAccess"] is True and user["waitlistStatus"] == "INVITED"
        mails = await outbox(core, "waitlist_welcome", "convert-me@example.com")
        assert len(mails) == 1
        assert "http://testserver/login?email=convert-me%40example.com" in mails[0].body_text
        # converting an INVITED signup again resends, with no second account
        r = await admin.post(f"/admin/waitlist/{signup['id']}/convert")
        assert r.status_code == 200 and r.json()["userCreated"] is False
        assert r.json()["user"]["id"] == user["id"]
        assert len(await outbox(core, "waitlist_welcome", "convert-me@example.com")) == 2
        r = await admin.post("/admin/waitlist/wls_nope/convert")
        assert r.status_code == 404
    async with core.uow(write=False) as uow:
        row = (
            await uow.session.execute(select(User).where(User.email == "convert-me@example.com"))
        ).scalar_one()
        assert row.signup_intent == "SELLER" and row.company == "Co"
        actions = (
            (
                await uow.session.execute(
                    select(AuditEvent.action)
                    .where(AuditEvent.actor_id == admin_id)
                    .order_by(AuditEvent.created_at)
                )
            )
            .scalars()
            .all()
        )
    assert actions == ["waitlist.update", "waitlist.convert", "waitlist.convert"]


async def test_convert_uses_an_existing_account(app, core, client):
    owner_id, _ = await make_user(core)
    async with core.uow(write=False) as uow:
        email = (await uow.session.get(User, owner_id)).email
    signup = await join(client, email=email)
    admin, _ = await owner_client(app, core, role="ADMIN")
    async with admin:
        await admin.patch(f"/admin/waitlist/{signup['id']}", json={"status": "INVITED"})
        r = await admin.post(f"/admin/waitlist/{signup['id']}/convert")
        assert r.status_code == 200, r.text
        assert r.json()["userCreated"] is False and r.json()["user"]["id"] == owner_id
        assert r.json()["user"]["previewAccess"] is True


ADMIN_ROUTES = [
    ("GET", "/admin/waitlist", None),
    ("PATCH", "/admin/waitlist/wls_x", {"status": "APPROVED"}),
    ("DELETE", "/admin/waitlist/wls_x", None),
    ("POST", "/admin/waitlist/wls_x/convert", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
async def test_admin_routes_need_a_staff_session(app, core, method, path, body):
    user, _ = await owner_client(app, core)
    async with user:
        r = await user.request(method, path, json=body)
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "insufficient_role"
    async with new_client(app) as anonymous:
        r = await anonymous.request(method, path, json=body)
        assert r.status_code == 401, r.text
