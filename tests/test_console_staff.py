"""The staff console's pages through the real app on SQLite and PostgreSQL: the same role rules as the JSON
routes (SUPPORT sees tasks redacted and no money, disputes or audit log; a user none of it), a dispute
resolved from its page once even when the form is sent twice, and found in the audit log with the role."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from callboard_core.auth import sessions
from callboard_core.container import Core
from callboard_core.security.permissions import Role
from callboard_core.users.models import User
from http_api.routes import all_routes
from tests.conftest import BASE_URL, owner_client
from tests.jobs_helpers import new_agent, new_owner, to_review
from tests.payments_helpers import buyer, draft, money

pytestmark = pytest.mark.usefixtures("books_balance")


async def disputed(app: Any, core: Core, client: Any) -> tuple[Any, str, str]:
    b = await buyer(app, core, funds=5_000)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1000, title="Write the release notes")
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    await to_review(client, job_id, b.agent, worker)
    opened = await client.post(
        f"/api/v2/jobs/{job_id}/disputes",
        json={"reasonCode": "THEFT_CLAIM", "reasonText": "Copied from our changelog."},
        headers=b.agent.h,
    )
    assert opened.status_code == 201, opened.text
    return b, job_id, opened.json()["id"]


async def test_roles_decide_what_each_staff_member_sees(app: Any, core: Core, client: Any) -> None:
    _, job_id, dispute_id = await disputed(app, core, client)
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    user, _ = await owner_client(app, core)
    async with support, user:
        home = await support.get("/staff")
        assert home.status_code == 200 and "Tasks" in home.text and "Payments" not in home.text
        listed = await support.get("/staff/tasks", params={"risk": "DISPUTED"})
        assert listed.status_code == 200 and "Write the release notes" in listed.text
        task = await support.get(f"/staff/tasks/{job_id}")
        assert "not shown to your role" in task.text and "Copied from our changelog." in task.text
        assert "Cancel the job" not in task.text  # SUPPORT notes only
        for path in ("/staff/payments", "/staff/audit", "/staff/disputes", f"/staff/disputes/{dispute_id}"):
            refused = await support.get(path)
            assert refused.status_code == 403 and "does not allow" in refused.text, path
        assert (await user.get("/staff")).status_code == 403
    assert (await client.get("/staff/tasks")).status_code == 303  # signed out: sign in first


async def test_a_dispute_resolved_from_its_page_once(app: Any, core: Core, client: Any) -> None:
    b, job_id, dispute_id = await disputed(app, core, client)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        open_list = await admin.get("/staff/disputes", params={"status": "OPEN"})
        assert f"/staff/disputes/{dispute_id}" in open_list.text
        page = await admin.get(f"/staff/disputes/{dispute_id}")
        assert "Resolve the dispute" in page.text
        key = page.text.split('name="idempotencyKey" value="')[1].split('"')[0]
        form = {
            "resolution": "REFUND_REQUESTER",
            "resolutionNotes": "The deliverable was copied.",
            "idempotencyKey": key,
        }
        first = await admin.post(f"/staff/disputes/{dispute_id}/resolve", data=form)
        twice = await admin.post(f"/staff/disputes/{dispute_id}/resolve", data=form)
        assert first.status_code == twice.status_code == 303, twice.text
        other = await admin.post(
            f"/staff/disputes/{dispute_id}/resolve", data={**form, "idempotencyKey": "x"}
        )
        assert other.status_code == 409 and "resolved already" in other.text
        done = await admin.get(f"/staff/disputes/{dispute_id}")
        assert "Resolved: refund requester" in done.text
        audit = await admin.get("/staff/audit", params={"query": dispute_id})
        assert "dispute.resolved" in audit.text and "ADMIN" in audit.text
        payments = await admin.get("/staff/payments", params={"query": job_id})
        assert "Released" in payments.text
    assert await money(core, b.owner.user_id) == (5_000, 0, 0)


async def test_staff_act_on_a_task_from_its_page(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core, funds=5_000)
    job_id = await draft(client, b, 1000)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    moderator, _ = await owner_client(app, core, role=Role.MODERATOR)
    async with moderator:
        noted = await moderator.post(
            f"/staff/tasks/{job_id}/action", data={"action": "note", "note": "Checked."}
        )
        assert noted.status_code == 303
        cancelled = await moderator.post(
            f"/staff/tasks/{job_id}/action", data={"action": "cancel", "note": "Spam."}
        )
        assert cancelled.status_code == 303
        page = await moderator.get(f"/staff/tasks/{job_id}")
        assert "Cancelled" in page.text and "Checked." in page.text
        empty = await moderator.post(f"/staff/tasks/{job_id}/action", data={"action": "note", "note": ""})
        assert empty.status_code == 422
        foreign = await moderator.post(
            f"/staff/tasks/{job_id}/action",
            data={"action": "note", "note": "x"},
            headers={"Origin": "https://evil.example.net"},
        )
        assert foreign.status_code == 403
    assert await money(core, b.owner.user_id) == (5_000, 0, 0)


@pytest.mark.parametrize(
    ("path", "seen"),
    [
        ("/staff/users", "Users ("),
        ("/staff/agents", "Agents"),
        ("/staff/bug-reports", "The list is empty"),
        ("/staff/tag-requests", "Capability tag requests"),
        ("/staff/waitlist", "Waitlist ("),
    ],
)
async def test_staff_lists_for_every_staff_role(
    app: Any, core: Core, client: Any, path: str, seen: str
) -> None:
    await client.post("/api/bridge/report_bug", json={"summary": "The list is empty"})
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    user, _ = await owner_client(app, core)
    async with support, user:
        page = await support.get(path)
        assert page.status_code == 200 and seen in page.text, page.text
        assert (await user.get(path)).status_code == 403
        bad = await support.get(path, params={"limit": "0"})
        assert bad.status_code == 422


CONSOLE_FORMS = [r for r in all_routes() if r.tag in ("console", "console_staff") and r.method == "POST"]


@pytest.mark.parametrize("route", CONSOLE_FORMS, ids=[r.path for r in CONSOLE_FORMS])
async def test_every_console_form_refuses_a_foreign_origin(app: Any, core: Core, route: Any) -> None:
    """CSRF: a signed-in person's browser posting a console form from another site changes nothing."""
    admin, _ = await owner_client(app, core, role=Role.SUPERADMIN)
    path = route.path
    for name in route.path_params:
        path = path.replace("{" + name + "}", "x_1")
    async with admin:
        for origin in ({"Origin": "https://evil.example.net"}, {"Origin": "null"}):
            refused = await admin.post(path, data={"note": "x", "action": "note"}, headers=origin)
            assert refused.status_code == 403, (path, refused.status_code, refused.text[:300])
            assert "trusted origin" in refused.text


def test_no_page_shadows_an_api_path() -> None:
    """A page route matching an API route's path would answer that path's undeclared methods with a page
    (a 404) instead of 405 Method Not Allowed; the console keeps to its own paths."""
    from starlette.routing import compile_path

    routes = all_routes()
    pages = [(r, compile_path(r.path)[0]) for r in routes if r.page]
    for api in (r for r in routes if not r.page):
        sample = api.path
        for name in api.path_params:
            sample = sample.replace("{" + name + "}", "x1")
        clashing = [p.path for p, regex in pages if regex.match(sample) and p.path != api.path]
        assert not clashing, (api.path, clashing)


async def test_staff_act_on_users_agents_and_the_waitlist(app: Any, core: Core, client: Any) -> None:
    """Suspend a user and an agent from their pages (audited, keys revoked), the role only for SUPERADMIN,
    a signup approved and invited; SUPPORT sees no money on a user's page."""
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    async with core.uow() as uow:
        email = (await uow.session.get(User, owner.user_id)).email  # type: ignore[union-attr]
    moderator, _ = await owner_client(app, core, role=Role.MODERATOR)
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    async with moderator, support:
        listed = await moderator.get("/staff/users", params={"query": email})
        assert f"/staff/users/{owner.user_id}" in listed.text
        page = await moderator.get(f"/staff/users/{owner.user_id}")
        assert (
            page.status_code == 200
            and "Available balance" in page.text
            and "Change the role" not in page.text
        )
        assert "Available balance" not in (await support.get(f"/staff/users/{owner.user_id}")).text
        role = await moderator.post(f"/staff/users/{owner.user_id}/role", data={"role": "ADMIN"})
        assert role.status_code == 403
        agent_page = await moderator.get(f"/staff/agents/{agent.id}")
        assert agent_page.status_code == 200 and email in agent_page.text
        suspended = await moderator.post(
            f"/staff/agents/{agent.id}/status", data={"status": "SUSPENDED", "reason": "spam"}
        )
        assert suspended.status_code == 303, suspended.text
        assert (await client.get("/api/v2/agents/me", headers=agent.h)).status_code == 401
        done = await moderator.post(
            f"/staff/users/{owner.user_id}/status", data={"status": "SUSPENDED", "reason": "chargebacks"}
        )
        assert done.status_code == 303
        after = await moderator.get(f"/staff/users/{owner.user_id}")
        assert "Suspended" in after.text and "user.status_changed" in after.text
        assert (await owner.client.get("/billing")).status_code == 303  # their session ended

        joined = await client.post(
            "/waitlist",
            json={"email": "early@example.com", "name": "Early", "role": "BUYER", "useCase": "Hire a writer"},
        )
        assert joined.status_code in (200, 201), joined.text
        waitlist = await support.get("/staff/waitlist")
        signup_id = waitlist.text.split("/staff/waitlist/", 1)[1].split('"', 1)[0]
        approved = await support.post(f"/staff/waitlist/{signup_id}", data={"status": "APPROVED"})
        assert approved.status_code == 303, approved.text
        invited = await support.post(f"/staff/waitlist/{signup_id}/convert")
        assert invited.status_code == 303, invited.text
        assert "Invited" in (await support.get("/staff/waitlist")).text


@pytest.mark.parametrize("route", CONSOLE_FORMS, ids=[r.path for r in CONSOLE_FORMS])
async def test_every_console_form_refuses_an_unverified_account(app: Any, core: Core, route: Any) -> None:
    """An account whose email nobody verified (someone may have set its first password before the owner)
    mints no key or token, spends nothing and points no payout anywhere from a page either."""
    from tests.conftest import make_user
    from tests.payments_helpers import ORIGIN

    _, token = await make_user(core, verified=False)
    path = route.path
    for name in route.path_params:
        path = path.replace("{" + name + "}", "x_1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as c:
        c.cookies.set(sessions.COOKIE_NAME, token)
        refused = await c.post(path, data={"note": "x", "action": "note", "amount": "25"}, headers=ORIGIN)
    assert refused.status_code == 403, (path, refused.status_code, refused.text[:300])
    assert "Confirm your email address first" in refused.text
