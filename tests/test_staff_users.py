"""The staff console's users, through the real app on SQLite and PostgreSQL: SUPPORT's redacted detail
(field by field), SUPERADMIN-only role changes, deletion and mirror, a suspension that ends sessions and
revokes keys (and a reinstatement that does not bring them back), key reset, and the audit of each."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from callboard_core.agents.models import Agent
from callboard_core.audit.models import AuditEvent
from callboard_core.container import Core
from callboard_core.security.permissions import Role
from tests.conftest import owner_client
from tests.jobs_helpers import new_agent, new_owner
from tests.payments_helpers import fund

REDACTED = ("balance", "transactions", "auditEntries", "sessions", "consents")


async def _audit(core: Core, user_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with core.uow(write=False) as uow:
        rows = await uow.session.scalars(
            select(AuditEvent)
            .where(AuditEvent.target_type == "user", AuditEvent.target_id == user_id)
            .order_by(AuditEvent.created_at, AuditEvent.id)
        )
        return [(r.action, dict(r.data or {})) for r in rows]


async def test_support_sees_the_redacted_detail_and_admin_the_whole(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    await new_agent(owner)
    await fund(core, owner.user_id, 1500)
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with support, admin:
        listed = await support.get("/admin/users", params={"query": "example.com"})
        assert listed.status_code == 200 and listed.json()["total"] >= 1
        seen = (await support.get(f"/admin/users/{owner.user_id}")).json()
        assert seen["redacted"] is True and seen["activeApiKeys"] == 1 and len(seen["agents"]) == 1
        for field in REDACTED:
            assert seen[field] is None, field
        whole = (await admin.get(f"/admin/users/{owner.user_id}")).json()
        assert whole["redacted"] is False
        assert whole["balance"]["availableCents"] == 1500 and whole["transactions"][0]["amountCents"] == 1500
        assert whole["sessions"]["active"] >= 1 and isinstance(whole["consents"], list)
        assert isinstance(whole["auditEntries"], list)
        assert (await admin.get("/admin/users/usr_nope")).status_code == 404
        filtered = (await admin.get("/admin/users", params={"role": "ADMIN"})).json()
        assert all(u["role"] == "ADMIN" for u in filtered["users"]) and filtered["total"] >= 1


async def test_role_changes_are_superadmins_and_the_last_one_stays(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    superadmin, super_id = await owner_client(app, core, role=Role.SUPERADMIN)
    async with admin, superadmin:
        refused = await admin.patch(f"/admin/users/{owner.user_id}/role", json={"role": "SUPPORT"})
        assert refused.status_code == 403 and refused.json()["code"] == "insufficient_role"
        made = await superadmin.patch(f"/admin/users/{owner.user_id}/role", json={"role": "SUPPORT"})
        assert made.status_code == 200 and made.json()["role"] == "SUPPORT"
        own = await superadmin.patch(f"/admin/users/{super_id}/role", json={"role": "USER"})
        assert own.status_code == 403 and own.json()["code"] == "own_account"
        bad = await superadmin.patch(f"/admin/users/{owner.user_id}/role", json={"role": "KING"})
        assert bad.status_code == 422
    assert await _audit(core, owner.user_id) == [
        ("user.role_changed", {"before": "USER", "after": "SUPPORT"})
    ]


async def test_suspension_ends_sessions_and_keys_and_reinstating_keeps_them_revoked(
    app: Any, core: Core
) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    admin, admin_id = await owner_client(app, core, role=Role.ADMIN)
    async with admin:
        assert (await owner.client.get("/auth/me")).status_code == 200
        suspended = await admin.patch(
            f"/admin/users/{owner.user_id}/status", json={"status": "SUSPENDED", "reason": "chargebacks"}
        )
        assert suspended.status_code == 200 and suspended.json()["status"] == "SUSPENDED"
        assert (await owner.client.get("/auth/me")).status_code == 401
        assert (await owner.client.get("/api/v2/agents/me", headers=agent.h)).status_code == 401
        # Deleting is SUPERADMIN's.
        deleting = await admin.patch(f"/admin/users/{owner.user_id}/status", json={"status": "DELETED"})
        assert deleting.status_code == 403
        assert (await admin.delete(f"/admin/users/{owner.user_id}")).status_code == 403
        back = await admin.patch(f"/admin/users/{owner.user_id}/status", json={"status": "ACTIVE"})
        assert back.json()["status"] == "ACTIVE"
        assert (await owner.client.get("/api/v2/agents/me", headers=agent.h)).status_code == 401
    [(first, suspension), (second, reinstatement)] = await _audit(core, owner.user_id)
    assert first == second == "user.status_changed"
    assert suspension["before"] == "ACTIVE" and suspension["after"] == "SUSPENDED"
    assert suspension["reason"] == "chargebacks" and len(suspension["keysRevoked"]) == 1
    assert reinstatement == {"before": "SUSPENDED", "after": "ACTIVE"}
    async with core.uow(write=False) as uow:
        actors = (
            await uow.session.scalars(
                select(AuditEvent.actor_id).where(AuditEvent.target_id == owner.user_id)
            )
        ).all()
    assert set(actors) == {admin_id}


async def test_deletion_takes_the_agents_out_and_only_superadmin_undoes_it(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    superadmin, _ = await owner_client(app, core, role=Role.SUPERADMIN)
    async with superadmin:
        gone = await superadmin.request("DELETE", f"/admin/users/{owner.user_id}", json={"reason": "asked"})
        assert gone.status_code == 200 and gone.json()["status"] == "DELETED" and gone.json()["deletedAt"]
        listed = (await superadmin.get("/admin/users", params={"query": "example.com", "limit": 200})).json()
        assert owner.user_id not in [u["id"] for u in listed["users"]]
        included = (await superadmin.get("/admin/users", params={"status": "DELETED", "limit": 200})).json()
        assert owner.user_id in [u["id"] for u in included["users"]]
        restored = await superadmin.patch(f"/admin/users/{owner.user_id}/status", json={"status": "ACTIVE"})
        assert restored.json()["deletedAt"] is None
    async with core.uow(write=False) as uow:
        assert (await uow.session.get(Agent, agent.id)).status == "INACTIVE"  # type: ignore[union-attr]


async def test_key_reset_and_the_mirror(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    superadmin, _ = await owner_client(app, core, role=Role.SUPERADMIN)
    async with support, superadmin:
        reset = await support.post(f"/admin/users/{owner.user_id}/api-keys/reset")
        assert reset.status_code == 200 and reset.json()["revoked"] == [agent.key[:12]]
        assert (await owner.client.get("/api/v2/agents/me", headers=agent.h)).status_code == 401
        assert (await support.post(f"/admin/users/{owner.user_id}/mirror")).status_code == 403
        mirrored = await superadmin.post(f"/admin/users/{owner.user_id}/mirror")
        assert mirrored.status_code == 200
        body = mirrored.json()
        assert body["user"]["id"] == owner.user_id and body["agents"][0]["id"] == agent.id
        assert body["balance"]["availableCents"] == 0
    assert [a for a, _ in await _audit(core, owner.user_id)] == ["user.api_keys_reset", "user.mirrored"]
