"""The owner's notifications: the log (session, or an API key of the owner's), mark read, preferences, and the
unsubscribe link of the notification emails (public: the signed link is the credential)."""

from __future__ import annotations

from starlette.responses import Response

from callboard_core.billing.service import owner_of
from callboard_core.owner_notifications import schemas as notification_schemas
from callboard_core.owner_notifications import service as notifications
from http_api.pages_support import ErrorPage, render, shows_errors
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("notifications")
UNSUBSCRIBE_ERROR = ErrorPage("message.html", title="This link cannot be used")


@routes.get(
    "/me/notifications",
    auth=AuthKind.SESSION,
    query=notification_schemas.NotificationQuery,
    response=notification_schemas.OwnerNotificationList,
)
async def list_notifications(ctx: RequestContext) -> notification_schemas.OwnerNotificationList:
    """Your notifications, newest first (page with nextCursor): what happened to your jobs and money."""
    return await notifications.list_for(
        ctx.session,
        owner_of(ctx.actor),
        ctx.core.settings.base_url,
        cursor=ctx.query.cursor,
        limit=ctx.query.limit,
    )


@routes.get(
    "/me/notifications/api-key",
    auth=AuthKind.KEY_READ,
    query=notification_schemas.NotificationQuery,
    response=notification_schemas.OwnerNotificationList,
)
async def list_notifications_for_key(ctx: RequestContext) -> notification_schemas.OwnerNotificationList:
    """The notifications of the key's owner (an agent's key: its owner's; an unclaimed agent's key is 403
    agent_not_claimed)."""
    return await notifications.list_for(
        ctx.session,
        owner_of(ctx.key_actor),
        ctx.core.settings.base_url,
        cursor=ctx.query.cursor,
        limit=ctx.query.limit,
    )


@routes.get("/me/notifications/preferences", auth=AuthKind.SESSION, response=notification_schemas.Preferences)
async def get_preferences(ctx: RequestContext) -> notification_schemas.Preferences:
    """Email and in-app on or off for each of the fifteen notification types (both on by default)."""
    return await notifications.preferences(ctx.session, owner_of(ctx.actor))


@routes.patch(
    "/me/notifications/preferences",
    auth=AuthKind.SESSION,
    body=notification_schemas.PreferencesUpdate,
    response=notification_schemas.Preferences,
)
async def update_preferences(ctx: RequestContext) -> notification_schemas.Preferences:
    """Turn channels on or off per type (only the flags sent change); an unknown type is 422 unknown_type."""
    return await notifications.update_preferences(ctx.session, owner_of(ctx.actor), ctx.body)


@routes.patch(
    "/me/notifications/{notificationId}/read",
    auth=AuthKind.SESSION,
    response=notification_schemas.OwnerNotificationView,
)
async def mark_notification_read(ctx: RequestContext) -> notification_schemas.OwnerNotificationView:
    """Mark one notification read (again: no change)."""
    return await notifications.mark_read(
        ctx.session, owner_of(ctx.actor), ctx.params["notificationId"], ctx.core.settings.base_url
    )


@routes.get("/notifications/unsubscribe/{token}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(UNSUBSCRIBE_ERROR)
async def unsubscribe_page(ctx: RequestContext) -> Response:
    """The link at the foot of a notification email: asks to confirm (a mail scanner's GET changes nothing)."""
    type_ = notifications.check_token(ctx.core.settings.secret_key, ctx.params["token"])
    if type_ is None:
        return render(ctx, "message.html", 404, title="This link cannot be used", message="It is not valid.")
    return render(ctx, "unsubscribe.html", label=notifications.type_label(type_))


@routes.post("/notifications/unsubscribe/{token}", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(UNSUBSCRIBE_ERROR)
async def unsubscribe(ctx: RequestContext) -> Response:
    """Turn email off for the link's type (in-app notifications go on)."""
    done = await notifications.unsubscribe(ctx.session, ctx.core.settings.secret_key, ctx.params["token"])
    return render(
        ctx,
        "message.html",
        title="Unsubscribed",
        message=f"You will no longer get email for {notifications.type_label(done.type)}.",
    )
