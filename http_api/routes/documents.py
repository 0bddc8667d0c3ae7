"""The owner's commercial documents: receipts, invoices and credit notes ("me" routes: always the caller's own).

`GET /me/billing/documents/api-key` acts as `ctx.key_actor`, as `/me/billing/api-key` does: an agent's key
lists its owner's documents, an owner-level key its owner's; an unclaimed agent's key is 403
agent_not_claimed. It is declared before `/me/billing/documents/{documentId}` so the literal path wins.

`GET /me/billing/documents/{documentId}` answers JSON, or a printable HTML page when the caller's Accept
header asks for text/html first (a browser following a link)."""

from __future__ import annotations

from starlette.responses import Response

from callboard_core.documents import schemas as document_schemas
from callboard_core.documents import service as documents
from http_api.pages_support import render
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("billing")


@routes.get(
    "/me/billing/documents",
    auth=AuthKind.SESSION,
    query=document_schemas.DocumentQuery,
    response=document_schemas.DocumentPage,
)
async def list_documents(ctx: RequestContext) -> document_schemas.DocumentPage:
    """Your receipts, invoices and credit notes, newest first; filter with kind, page with nextCursor."""
    q = ctx.query
    return await documents.list_documents(ctx.session, ctx.actor, cursor=q.cursor, limit=q.limit, kind=q.kind)


@routes.get(
    "/me/billing/documents/api-key",
    auth=AuthKind.KEY_READ,
    query=document_schemas.DocumentQuery,
    response=document_schemas.DocumentPage,
)
async def list_documents_for_key(ctx: RequestContext) -> document_schemas.DocumentPage:
    """The documents of the key's owner, newest first (the same list as GET /me/billing/documents).

    An agent's key lists its owner's documents, an owner-level key its owner's; an agent nobody has claimed
    yet has no owner and gets 403 agent_not_claimed."""
    q = ctx.query
    return await documents.list_documents(
        ctx.session, ctx.key_actor, cursor=q.cursor, limit=q.limit, kind=q.kind
    )


def _wants_html(ctx: RequestContext) -> bool:
    first = ctx.request.headers.get("accept", "").split(",")[0]
    return first.split(";")[0].strip().lower() == "text/html"


@routes.get(
    "/me/billing/documents/{documentId}",
    auth=AuthKind.SESSION,
    response=document_schemas.CommercialDocument,
)
async def get_document(ctx: RequestContext) -> document_schemas.CommercialDocument | Response:
    """One of your documents (another owner's is 404 document_not_found).

    With Accept: text/html first (a browser) the answer is the document as a printable page."""
    document = await documents.get_document(ctx.session, ctx.actor, ctx.params["documentId"])
    if _wants_html(ctx):
        return render(ctx, "document.html", doc=document, issuer=documents.issuer(ctx.core.settings))
    return document
