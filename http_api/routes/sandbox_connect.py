"""The sandbox processor's hosted Connect onboarding page (`/sandbox/processor/onboarding/{linkSecret}`,
the URL `SandboxProcessor.create_account_link` hands out). Served only with `CALLBOARD_PROCESSOR=sandbox`
(404 otherwise). Like the processor's real page it is public: the link is the capability, so its URL holds a
single-use secret that expires in minutes, never the account id.

Submitting calls the sandbox's `complete_onboarding` (which writes `account.updated` to its outbox) in the
route's prepare step (the sandbox writes in its own transaction, so never inside ours), then redirects to
the link's return URL."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.responses import Response

from callboard_core.errors import CallboardError, NotFound
from callboard_core.processor.sandbox import PAGE_PREFIX, SandboxProcessor
from http_api.pages_support import ErrorPage, redirect, render, shows_errors
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("sandbox")
PATH = PAGE_PREFIX + "/onboarding/{linkSecret}"
ONBOARDING_ERROR = ErrorPage("sandbox_onboarding.html")


def _sandbox(ctx: RequestContext) -> SandboxProcessor:
    if not isinstance(ctx.core.processor, SandboxProcessor):
        raise NotFound("No such page.", code="not_found")
    return ctx.core.processor


def _back(ctx: RequestContext, name: str) -> str:
    url = ctx.request.query_params.get(name) or "/"
    return url if url.startswith(("http://", "https://", "/")) and not url.startswith("//") else "/"


@routes.get(PATH, auth=AuthKind.PUBLIC, page=True)
@shows_errors(ONBOARDING_ERROR)
async def sandbox_onboarding_page(ctx: RequestContext) -> Response:
    """The sandbox's hosted payout onboarding form."""
    processor = _sandbox(ctx)
    account_id = await processor.account_link(ctx.params["linkSecret"])  # 404: unknown, used or expired
    query = urlencode(
        {k: v for k, v in ctx.request.query_params.items() if k in ("return_url", "refresh_url")}
    )
    action = ctx.request.url.path + (f"?{query}" if query else "")
    return render(ctx, "sandbox_onboarding.html", account_id=account_id, action=action)


async def _complete(ctx: RequestContext) -> CallboardError | None:
    try:
        await _sandbox(ctx).complete_account_link(ctx.params["linkSecret"])
    except CallboardError as exc:  # shown as the page's error (the prepare step renders no page)
        return exc
    return None


@routes.post(PATH, auth=AuthKind.PUBLIC, page=True, idempotent=False, prepare=_complete)
@shows_errors(ONBOARDING_ERROR)
async def sandbox_onboarding_submit(ctx: RequestContext) -> Response:
    """Submit the sandbox onboarding: payouts are enabled; back to the return URL."""
    if ctx.prepared is not None:
        raise ctx.prepared
    return redirect(_back(ctx, "return_url"))
