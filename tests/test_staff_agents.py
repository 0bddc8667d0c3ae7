"""The staff console's agents, through the real app on SQLite and PostgreSQL: SUPPORT's redacted detail, a
suspension that revokes keys and survives the owner's moves, a soft delete refused while work is in flight,
metadata with a reason, SUPERADMIN-only handle, key and reputation changes, the ADMIN house flag, and the
audit of each."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from callboard_core.audit.models import AuditEvent
from callboard_core.container import Core
from callboard_core.security.permissions import Role
from tests.conftest import owner_client
from tests.jobs_helpers import new_agent, new_owner


async def _actions(core: Core, agent_id: str) -> list[str]:
    async with core.uow(write=False) as uow:
        rows = await uow.session.scalars(
            select(AuditEvent.action)
            .where(AuditEvent.target_type == "agent", AuditEvent.target_id == agent_id)
            .order_by(AuditEvent.created_at, AuditEvent.id)
        )
        return list(rows)


async def test_detail_list_and_a_suspension_that_revokes_keys(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    moderator, _ = await owner_client(app, core, role=Role.MODERATOR)
    async with support, moderator:
        seen = (await support.get(f"/admin/agents/{agent.id}")).json()
        assert seen["redacted"] is True and seen["auditEntries"] is None
        assert seen["owner"]["id"] == owner.user_id and [k["revoked"] for k in seen["apiKeys"]] == [False]
        whole = (await moderator.get(f"/admin/agents/{agent.id}")).json()
        assert whole["redacted"] is False and isinstance(whole["auditEntries"], list)
        found = (await support.get("/admin/agents", params={"query": whole["agent"]["handle"]})).json()
        assert [a["id"] for a in found["agents"]] == [agent.id]
        suspended = await support.patch(
            f"/admin/agents/{agent.id}/status", json={"status": "SUSPENDED", "reason": "spam offers"}
        )
        assert suspended.status_code == 200 and suspended.json()["status"] == "SUSPENDED"
        assert (await owner.client.get("/api/v2/agents/me", headers=agent.h)).status_code == 401
        # The owner cannot lift a suspension.
        assert (await owner.client.post(f"/agents/dashboard/{agent.id}/reactivate")).status_code == 409
        only = (await support.get("/admin/agents", params={"status": "SUSPENDED", "limit": 200})).json()
        assert agent.id in [a["id"] for a in only["agents"]]
        lifted = await support.patch(f"/admin/agents/{agent.id}/status", json={"status": "ACTIVE"})
        assert lifted.json()["status"] == "ACTIVE"
        assert (
            await owner.client.get("/api/v2/agents/me", headers=agent.h)
        ).status_code == 401  # stays revoked
    assert await _actions(core, agent.id) == ["agent.status_changed", "agent.status_changed"]


async def test_soft_delete_waits_for_work_in_flight(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    busy, idle = await new_agent(owner), await new_agent(owner)
    started = await owner.client.post("/api/v2/agents/me/starter-job", headers=busy.h)
    assert started.status_code == 200, started.text
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    async with support:
        refused = await support.request("DELETE", f"/admin/agents/{busy.id}", json={"reason": "abuse"})
        assert refused.status_code == 409 and refused.json()["code"] == "agent_lifecycle_blocked"
        assert refused.json()["blockers"][0]["kind"] == "LIVE_SLOTS"
        gone = await support.request("DELETE", f"/admin/agents/{idle.id}", json={"reason": "abuse"})
        assert gone.status_code == 200 and gone.json()["deletedAt"] and gone.json()["status"] == "INACTIVE"
        again = await support.delete(f"/admin/agents/{idle.id}")
        assert again.status_code == 200 and again.json()["deletedAt"] == gone.json()["deletedAt"]
        hidden = (await support.get("/admin/agents", params={"limit": 200})).json()
        assert idle.id not in [a["id"] for a in hidden["agents"]]
        shown = (await support.get("/admin/agents", params={"includeDeleted": True, "limit": 200})).json()
        assert idle.id in [a["id"] for a in shown["agents"]]
    assert (await owner.client.get("/api/v2/agents/me", headers=idle.h)).status_code == 401
    assert await _actions(core, idle.id) == ["agent.deleted_by_staff"]


async def test_metadata_house_handle_key_and_reputation_by_role(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    other = await new_agent(owner)
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    superadmin, _ = await owner_client(app, core, role=Role.SUPERADMIN)
    path = f"/admin/agents/{agent.id}"
    async with support, admin, superadmin:
        no_reason = await support.patch(path + "/admin-metadata", json={"featured": True})
        assert no_reason.status_code == 422
        meta = await support.patch(
            path + "/admin-metadata", json={"featured": True, "trustTier": "gold", "reason": "top worker"}
        )
        assert meta.status_code == 200 and (meta.json()["featured"], meta.json()["trustTier"]) == (
            True,
            "gold",
        )
        assert (await support.patch(path + "/house", json={"isHouse": True})).status_code == 403
        house = await admin.patch(path + "/house", json={"isHouse": True, "reason": "platform's own"})
        assert house.status_code == 200 and house.json()["isHouse"] is True
        body = {"handle": "renamed-by-staff", "reason": "trademark"}
        assert (await admin.patch(path + "/handle", json=body)).status_code == 403
        renamed = await superadmin.patch(path + "/handle", json=body)
        assert renamed.status_code == 200 and renamed.json()["handle"] == "renamed-by-staff"
        taken = await superadmin.patch(
            f"/admin/agents/{other.id}/handle", json={"handle": "renamed-by-staff", "reason": "x"}
        )
        assert taken.status_code == 409 and taken.json()["code"] == "handle_taken"
        reserved = await superadmin.patch(path + "/handle", json={"handle": "callboard-admin", "reason": "x"})
        assert reserved.status_code == 422
        keys = (await superadmin.get(path)).json()["apiKeys"]
        key_path = f"{path}/api-keys/{keys[0]['id']}/revoke"
        assert (await admin.post(key_path)).status_code == 403
        wrong_agent = await superadmin.post(f"/admin/agents/{other.id}/api-keys/{keys[0]['id']}/revoke")
        assert wrong_agent.status_code == 404
        revoked = await superadmin.post(key_path)
        assert revoked.status_code == 200 and revoked.json()["revoked"] is True
        assert (await superadmin.post(key_path)).json()["revoked"] is False
        assert (await owner.client.get("/api/v2/agents/me", headers=agent.h)).status_code == 401
        correction = {"metricType": "QUALITY_SCORE", "score": 5, "weight": 2, "reason": "verified complaint"}
        assert (await admin.post(path + "/reputation-corrections", json=correction)).status_code == 403
        corrected = await superadmin.post(path + "/reputation-corrections", json=correction)
        assert corrected.status_code == 200 and corrected.json()["delta"] == 10
        assert corrected.json()["agent"]["reputationScore"] > 0
    assert await _actions(core, agent.id) == [
        "agent.admin_metadata",
        "agent.house",
        "agent.handle_changed",
        "api_key.revoked_by_staff",
        "api_key.revoked_by_staff",
        "agent.reputation_corrected",
    ]
