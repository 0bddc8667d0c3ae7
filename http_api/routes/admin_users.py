"""The staff console: users (list, detail, role, status, soft delete, key reset, the mirror view)."""

from __future__ import annotations

from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff import users as staff_users
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("admin_users")


@routes.get(
    "/admin/users",
    auth=AuthKind.STAFF,
    query=staff_schemas.AdminUserQuery,
    response=staff_schemas.AdminUserList,
)
async def admin_list_users(ctx: RequestContext) -> staff_schemas.AdminUserList:
    """Users, newest first: search email, username or name (query), filter by role and status. DELETED users
    are left out unless includeDeleted (or status=DELETED)."""
    return await staff_users.list_users(ctx.session, ctx.query)


@routes.get("/admin/users/{userId}", auth=AuthKind.STAFF, response=staff_schemas.AdminUserDetail)
async def admin_get_user(ctx: RequestContext) -> staff_schemas.AdminUserDetail:
    """A user, their agents and live keys; for MODERATOR and above also their balance and recent ledger
    entries, the audit entries about them, session forensics and consents (SUPPORT: redacted, null)."""
    return await staff_users.detail(ctx.session, ctx.actor, ctx.params["userId"])


@routes.patch(
    "/admin/users/{userId}/role",
    auth=AuthKind.STAFF,
    body=staff_schemas.RoleUpdate,
    response=staff_schemas.AdminUser,
)
async def admin_change_role(ctx: RequestContext) -> staff_schemas.AdminUser:
    """Change a user's role (SUPERADMIN only; not your own; the last SUPERADMIN keeps it). Audited."""
    return await staff_users.change_role(ctx.session, ctx.actor, ctx.params["userId"], ctx.body)


@routes.patch(
    "/admin/users/{userId}/status",
    auth=AuthKind.STAFF,
    body=staff_schemas.StatusUpdate,
    response=staff_schemas.AdminUser,
)
async def admin_change_status(ctx: RequestContext) -> staff_schemas.AdminUser:
    """Suspend, reinstate or (SUPERADMIN) delete a user. Suspending or deleting ends their sessions and
    revokes their keys and tokens (their agents' too); deleting also takes their agents out of the
    directory. Audited with the reason."""
    return await staff_users.change_status(ctx.session, ctx.actor, ctx.params["userId"], ctx.body)


@routes.delete(
    "/admin/users/{userId}",
    auth=AuthKind.STAFF,
    body=staff_schemas.DeleteBody,
    body_optional=True,
    response=staff_schemas.AdminUser,
)
async def admin_delete_user(ctx: RequestContext) -> staff_schemas.AdminUser:
    """Soft-delete a user (SUPERADMIN only): status DELETED, as the status route does."""
    return await staff_users.delete(ctx.session, ctx.actor, ctx.params["userId"], ctx.body)


@routes.post("/admin/users/{userId}/api-keys/reset", auth=AuthKind.STAFF, response=staff_schemas.KeysReset)
async def admin_reset_user_keys(ctx: RequestContext) -> staff_schemas.KeysReset:
    """Revoke every live API key of the user and of their agents (they mint new ones). Audited."""
    return await staff_users.reset_keys(ctx.session, ctx.actor, ctx.params["userId"])


@routes.post("/admin/users/{userId}/mirror", auth=AuthKind.STAFF, response=staff_schemas.Mirror)
async def admin_mirror_user(ctx: RequestContext) -> staff_schemas.Mirror:
    """What the user sees, read-only (SUPERADMIN only): profile, agents, balance, recent entries. A snapshot,
    never a session as the user. Audited."""
    return await staff_users.mirror(ctx.session, ctx.actor, ctx.params["userId"])
