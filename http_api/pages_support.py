"""What the server-rendered pages share: the template environment, page rendering with the pages' security
headers, form reading, and the one error-to-page map.

A `CallboardError` a page handler raises becomes the route's `ErrorPage` (its template, the error's
message, the status from `http_api.errors.status_for`) instead of problem+json; what the endpoint refuses
before the handler runs (rate limit, path checks) stays problem+json.
Its own module so that `http_api.app` (the docs page) and `http_api.routes.pages` both import it without
the routes importing the app.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from callboard_core.db import uow
from callboard_core.errors import CallboardError
from http_api.errors import status_for
from http_api.route_table import RequestContext

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def money(cents: int | None) -> str:
    """Cents as dollars for people: 123456 -> "$1,234.56" (negative amounts with a minus sign)."""
    if cents is None:
        return "—"
    sign = "-" if cents < 0 else ""
    return f"{sign}${abs(cents) // 100:,}.{abs(cents) % 100:02d}"


TEMPLATES.env.filters["money"] = money

PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        # form-action: our own pages, and the processor's hosted checkout a top-up form is sent on to.
        "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self'; "
        "form-action 'self' https://checkout.stripe.com https://connect.stripe.com; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    # same-origin keeps the Origin/Referer our own form posts need; the token in /auth/magic never leaks.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
MAX_FORM_BYTES = 16_384

T = TypeVar("T")
PageHandler = Callable[[RequestContext], Awaitable[Response]]


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A template rendered as an HTML response (no page headers: the docs page uses it too)."""
    response = TEMPLATES.TemplateResponse(request, template, context, status_code=status)
    assert isinstance(response, HTMLResponse)
    return response


def render(ctx: RequestContext, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    response = page(ctx.request, template, status, **context)
    response.headers.update(PAGE_HEADERS)
    return response


def redirect(url: str) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    response.headers.update(PAGE_HEADERS)
    return response


async def read_form(ctx: RequestContext) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (the HTML default) as a flat dict."""
    raw = await ctx.request.body()  # Starlette keeps the body: reading the form twice reads it once
    if len(raw) > MAX_FORM_BYTES:
        return {}
    parsed = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=64)
    return {key: values[0] for key, values in parsed.items()}


# --- the error-to-page map -----------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorPage:
    """How one page shows a refused request: its template with the error's message at the error's status.

    `title` set: a title-and-message page (message.html) instead of the template's own error box.
    `context`: what else the template needs to render (the sign-in page's versions and next URL)."""

    template: str
    title: str | None = None
    context: Callable[[RequestContext], Awaitable[dict[str, Any]]] | None = None


class SignInFirst(Exception):
    """A console page opened signed out: the sign-in page, then back to `next_url`."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


def login_url(next_url: str) -> str:
    return "/login" + ("?" + urlencode({"next": next_url}) if next_url != "/" else "")


class FormRefused(Exception):
    """A form's action was refused; the form is shown again with its message and the values it keeps."""

    def __init__(self, error: CallboardError, values: dict[str, Any]) -> None:
        super().__init__(error.message)
        self.error = error
        self.values = values


async def error_page(
    ctx: RequestContext, exc: CallboardError, spec: ErrorPage, values: dict[str, Any] | None = None
) -> HTMLResponse:
    """The one place a core error becomes a page."""
    context = await spec.context(ctx) if spec.context is not None else {}
    context.update(values or {})
    if spec.title is not None:
        return render(
            ctx,
            spec.template,
            status_for(exc),
            title=spec.title,
            message=exc.message,
            items=_what_to_fix(exc),
            **context,
        )
    return render(ctx, spec.template, status_for(exc), error=exc.message, **context)


def _what_to_fix(exc: CallboardError) -> list[str]:
    """The refusal's parts a person acts on, one line each: the fields a form got wrong, what a paid
    publish still needs, what blocks an agent's archive or delete."""
    lines = [f"{e.get('field') or 'form'}: {e.get('message')}" for e in getattr(exc, "errors", None) or []]
    for key in ("requirements", "blockers"):
        for part in exc.details.get(key) or []:
            message = part.get("message") if isinstance(part, dict) else getattr(part, "message", None)
            if message:
                lines.append(str(message))
    return lines


def shows_errors(spec: ErrorPage) -> Callable[[PageHandler], PageHandler]:
    """Declare a page handler's error page: a CallboardError it raises is rendered with `spec`.

    Put it under the route decorator; the handler keeps its name and docstring (operation id, summary)."""

    def wrap(handler: PageHandler) -> PageHandler:
        @functools.wraps(handler)
        async def run(ctx: RequestContext) -> Response:
            try:
                return await handler(ctx)
            except SignInFirst as signed_out:
                return redirect(login_url(signed_out.next_url))
            except FormRefused as refused:
                await uow.discard(ctx.session)
                return await error_page(ctx, refused.error, spec, refused.values)
            except CallboardError as exc:
                # Like the JSON route's rollback: the refused action leaves no partial writes behind.
                await uow.discard(ctx.session)
                return await error_page(ctx, exc, spec)

        return run

    return wrap


async def attempt(ctx: RequestContext, action: Callable[[], Awaitable[T]], **keep: Any) -> T:
    """Run a service call that writes in a savepoint. The error page of a refused call is a successful
    response whose unit of work commits, so the call must leave no partial writes behind. `keep`: the
    form values a page shown again keeps (raised as FormRefused)."""
    try:
        async with ctx.session.begin_nested():
            return await action()
    except CallboardError as exc:
        if keep:
            raise FormRefused(exc, keep) from exc
        raise
