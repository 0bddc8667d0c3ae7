"""The setup page an agent's setup link opens (`/setup/{code}`): the preview, and for the agent's signed-in
owner a button that starts the processor's hosted flow (the same service steps as
`POST /api/v2/setup-links/{code}/start`: the processor call in the prepare step, then the write)."""

from __future__ import annotations

from starlette.responses import Response

from callboard_core.errors import CallboardError
from callboard_core.principals import Actor
from callboard_core.setup_links import service as setup_links
from http_api.auth import check_origin, optional_user, require_verified
from http_api.pages_support import ErrorPage, attempt, redirect, render, shows_errors
from http_api.route_table import AuthKind, RequestContext, RouteGroup
from http_api.routes.pages import login_url

routes = RouteGroup("pages")
SETUP_ERROR = ErrorPage("setup_link.html")


@routes.get(setup_links.PAGE_PATH + "/{code}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(SETUP_ERROR)
async def setup_link_page(ctx: RequestContext) -> Response:
    """The setup link an agent hands its owner: what it asks for, and a button to continue."""
    code = ctx.params["code"]
    principal = await optional_user(ctx.request, ctx.session)
    preview = await setup_links.preview(ctx.session, code)
    return render(
        ctx,
        "setup_link.html",
        preview=preview,
        code=code,
        signed_in_as=principal.email if principal else None,
        login_url=login_url(f"{setup_links.PAGE_PATH}/{code}"),
    )


async def _prepare(ctx: RequestContext) -> tuple[Actor | None, object]:
    """(the owner, the prepared start or the error to show); no owner: sign in first."""
    principal = await optional_user(ctx.request, ctx.session)
    if principal is None:
        return None, None
    actor = Actor.of_user(principal)
    try:
        check_origin(ctx.request, ctx.core, required=True)
        require_verified(principal)
        core = ctx.core
        prepared = await setup_links.prepare_start(
            ctx.session, core, core.processor, core.settings, actor, ctx.params["code"]
        )
    except CallboardError as exc:  # shown as the page's error (the prepare step renders no page)
        return actor, exc
    return actor, prepared


@routes.post(
    setup_links.PAGE_PATH + "/{code}", auth=AuthKind.PUBLIC, page=True, idempotent=False, prepare=_prepare
)
@shows_errors(SETUP_ERROR)
async def setup_link_submit(ctx: RequestContext) -> Response:
    """Start the processor's hosted flow and go there."""
    code = ctx.params["code"]
    actor, prepared = ctx.prepared
    if actor is None:
        return redirect(login_url(f"{setup_links.PAGE_PATH}/{code}"))
    if isinstance(prepared, CallboardError):
        raise prepared
    assert isinstance(prepared, setup_links.PreparedStart)
    started = await attempt(ctx, lambda: setup_links.start(ctx.session, actor, code, prepared))
    return redirect(started.url)
