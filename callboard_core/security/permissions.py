"""Staff roles and the one policy table that says which role may do what."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    USER = "USER"
    SUPPORT = "SUPPORT"
    MODERATOR = "MODERATOR"
    ADMIN = "ADMIN"
    SUPERADMIN = "SUPERADMIN"


STAFF_ROLES = frozenset({Role.SUPPORT, Role.MODERATOR, Role.ADMIN, Role.SUPERADMIN})
ADMIN_ROLES = frozenset({Role.ADMIN, Role.SUPERADMIN})
SUPERADMIN_ONLY = frozenset({Role.SUPERADMIN})


class Permission(StrEnum):
    # Route-level gates (the St and A auth kinds of the spec).
    STAFF_CONSOLE = "staff.console"
    ADMIN_CONSOLE = "admin.console"
    # Financial surfaces are hidden from SUPPORT.
    VIEW_FINANCIALS = "staff.view_financials"
    VIEW_UNREDACTED = "staff.view_unredacted"
    # SUPERADMIN-only actions.
    CHANGE_USER_ROLE = "user.change_role"
    DELETE_USER = "user.delete"
    CHANGE_AGENT_HANDLE = "agent.change_handle"
    REVOKE_SINGLE_KEY = "api_key.revoke_single"
    CORRECT_REPUTATION = "agent.correct_reputation"
    MIRROR_USER = "user.mirror"
    # Moving an owner's money by hand (a balance adjustment): ADMIN and SUPERADMIN.
    ADJUST_BALANCE = "billing.adjust_balance"
    # Disputes: settled by ADMIN and SUPERADMIN only; staff who moderate may open one on a job, cancel,
    # archive or restore it; every staff member may add a note.
    RESOLVE_DISPUTE = "dispute.resolve"
    MANAGE_TASKS = "task.manage"


POLICY: dict[Permission, frozenset[Role]] = {
    Permission.STAFF_CONSOLE: STAFF_ROLES,
    Permission.ADMIN_CONSOLE: ADMIN_ROLES,
    Permission.VIEW_FINANCIALS: frozenset({Role.MODERATOR, Role.ADMIN, Role.SUPERADMIN}),
    Permission.VIEW_UNREDACTED: frozenset({Role.MODERATOR, Role.ADMIN, Role.SUPERADMIN}),
    Permission.CHANGE_USER_ROLE: SUPERADMIN_ONLY,
    Permission.DELETE_USER: SUPERADMIN_ONLY,
    Permission.CHANGE_AGENT_HANDLE: SUPERADMIN_ONLY,
    Permission.REVOKE_SINGLE_KEY: SUPERADMIN_ONLY,
    Permission.CORRECT_REPUTATION: SUPERADMIN_ONLY,
    Permission.MIRROR_USER: SUPERADMIN_ONLY,
    Permission.ADJUST_BALANCE: ADMIN_ROLES,
    Permission.RESOLVE_DISPUTE: ADMIN_ROLES,
    Permission.MANAGE_TASKS: frozenset({Role.MODERATOR, Role.ADMIN, Role.SUPERADMIN}),
}


def allows(role: str | Role, permission: Permission) -> bool:
    try:
        return Role(role) in POLICY[permission]
    except ValueError:
        return False
