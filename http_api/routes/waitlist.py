"""The waitlist: public signup and staff administration."""

from __future__ import annotations

from callboard_core.ratelimit import PUBLIC
from callboard_core.waitlist import schemas as s
from callboard_core.waitlist import service as waitlist
from http_api.routing import AuthKind, RequestContext, Router

router = Router("waitlist")


@router.post(
    "/waitlist",
    auth=AuthKind.PUBLIC,
    body=s.WaitlistJoin,
    response=s.WaitlistJoined,
    status=201,
    rate_limit=PUBLIC,
)
async def join_waitlist(ctx: RequestContext) -> s.WaitlistJoined:
    """Join the waitlist; the operating team is notified.

    Joining again with the same email answers 201 with the first signup's id."""
    return await waitlist.join(ctx.session, ctx.core.mailer, ctx.core.settings, ctx.body)


@router.get("/admin/waitlist", auth=AuthKind.STAFF, query=s.WaitlistQuery, response=s.WaitlistList)
async def admin_list_waitlist(ctx: RequestContext) -> s.WaitlistList:
    """Waitlist signups, newest first. DELETED signups are left out unless includeDeleted (or status=DELETED)."""
    return await waitlist.list_signups(ctx.session, ctx.query)


@router.patch(
    "/admin/waitlist/{signupId}", auth=AuthKind.STAFF, body=s.WaitlistUpdate, response=s.WaitlistSignup
)
async def admin_update_waitlist(ctx: RequestContext) -> s.WaitlistSignup:
    """Set a signup's status (and notes)."""
    return await waitlist.update_signup(ctx.session, ctx.user, ctx.params["signupId"], ctx.body)


@router.delete(
    "/admin/waitlist/{signupId}",
    auth=AuthKind.STAFF,
    body=s.WaitlistDelete,
    body_optional=True,
    response=s.WaitlistSignup,
)
async def admin_delete_waitlist(ctx: RequestContext) -> s.WaitlistSignup:
    """Soft-delete a signup (status DELETED); an optional `reason` goes to the audit log."""
    return await waitlist.delete_signup(ctx.session, ctx.user, ctx.params["signupId"], ctx.body.reason)


@router.post("/admin/waitlist/{signupId}/convert", auth=AuthKind.STAFF, response=s.WaitlistConversion)
async def admin_convert_waitlist(ctx: RequestContext) -> s.WaitlistConversion:
    """Convert an APPROVED or INVITED signup into an account with preview access and mail a sign-in link.

    Creates the account when none has this email; the signup becomes INVITED and notified."""
    return await waitlist.convert(
        ctx.session, ctx.core.mailer, ctx.core.settings, ctx.user, ctx.params["signupId"]
    )
