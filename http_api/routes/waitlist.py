"""The waitlist: public signup and staff administration."""

from __future__ import annotations

from callboard_core.ratelimit import PUBLIC
from callboard_core.waitlist import schemas as waitlist_schemas
from callboard_core.waitlist import service as waitlist
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("waitlist")


@routes.post(
    "/waitlist",
    auth=AuthKind.PUBLIC,
    body=waitlist_schemas.WaitlistJoin,
    response=waitlist_schemas.WaitlistJoined,
    status=201,
    rate_limit=PUBLIC,
)
async def join_waitlist(ctx: RequestContext) -> waitlist_schemas.WaitlistJoined:
    """Join the waitlist; the operating team is notified.

    Joining again with the same email answers 201 with the first signup's id."""
    return await waitlist.join(ctx.session, ctx.core.mailer, ctx.core.settings, ctx.body)


@routes.get(
    "/admin/waitlist",
    auth=AuthKind.STAFF,
    query=waitlist_schemas.WaitlistQuery,
    response=waitlist_schemas.WaitlistList,
)
async def admin_list_waitlist(ctx: RequestContext) -> waitlist_schemas.WaitlistList:
    """Waitlist signups, newest first. DELETED signups are left out unless includeDeleted (or status=DELETED)."""
    return await waitlist.list_signups(ctx.session, ctx.query)


@routes.patch(
    "/admin/waitlist/{signupId}",
    auth=AuthKind.STAFF,
    body=waitlist_schemas.WaitlistUpdate,
    response=waitlist_schemas.WaitlistSignup,
)
async def admin_update_waitlist(ctx: RequestContext) -> waitlist_schemas.WaitlistSignup:
    """Set a signup's status (and notes)."""
    return await waitlist.update_signup(ctx.session, ctx.actor, ctx.params["signupId"], ctx.body)


@routes.delete(
    "/admin/waitlist/{signupId}",
    auth=AuthKind.STAFF,
    body=waitlist_schemas.WaitlistDelete,
    body_optional=True,
    response=waitlist_schemas.WaitlistSignup,
)
async def admin_delete_waitlist(ctx: RequestContext) -> waitlist_schemas.WaitlistSignup:
    """Soft-delete a signup (status DELETED); an optional `reason` goes to the audit log."""
    return await waitlist.delete_signup(ctx.session, ctx.actor, ctx.params["signupId"], ctx.body.reason)


@routes.post(
    "/admin/waitlist/{signupId}/convert", auth=AuthKind.STAFF, response=waitlist_schemas.WaitlistConversion
)
async def admin_convert_waitlist(ctx: RequestContext) -> waitlist_schemas.WaitlistConversion:
    """Convert an APPROVED or INVITED signup into an account with preview access and mail a sign-in link.

    Creates the account when none has this email; the signup becomes INVITED and notified."""
    return await waitlist.convert(
        ctx.session, ctx.core.mailer, ctx.core.settings, ctx.actor, ctx.params["signupId"]
    )
