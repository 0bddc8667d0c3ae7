"""What the console's pages share: who is looking (signed in, verified, from a trusted origin for a change,
with the role a staff page needs), as the same Actor the JSON routes build."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from callboard_core.errors import from_pydantic
from callboard_core.principals import Actor
from callboard_core.security.permissions import Permission
from http_api.auth import check_origin, optional_user, require_verified
from http_api.pages_support import SignInFirst
from http_api.route_table import RequestContext


async def viewer(ctx: RequestContext, *, change: bool = False, staff: Permission | None = None) -> Actor:
    """The signed-in person, or SignInFirst (the sign-in page, then back here). A change (a form's POST)
    must come from a trusted origin; an unverified account and a missing role are refused like the JSON
    routes refuse them (the page shows the message)."""
    principal = await optional_user(ctx.request, ctx.session)
    if principal is None:
        target = ctx.request.url.path + (f"?{ctx.request.url.query}" if ctx.request.url.query else "")
        raise SignInFirst(target if ctx.request.method == "GET" else ctx.request.url.path)
    if change:
        check_origin(ctx.request, ctx.core, required=True)
    require_verified(principal)
    actor = Actor.of_user(principal, staff=staff is not None, request_id=ctx.request_id)
    if staff is not None:
        actor.require(staff)
    return actor


def parsed(model: Any, **fields: Any) -> Any:
    """A form's fields as the JSON route's body or query model (its rules, and its 422 shown on a page)."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise from_pydantic(exc) from None
