"""API keys: list, mint and revoke, for an agent runtime (API key) and for the owner (session).

The API-key routes also serve an owner-level key (no agent), so they act as `ctx.key_actor`."""

from __future__ import annotations

from callboard_core.agents import keys as agent_keys
from callboard_core.api_keys import schemas as key_schemas
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("api_keys")


# The dashboard paths first, so "dashboard" is never read as a key id.
@routes.get("/api-keys/dashboard", auth=AuthKind.SESSION, response=key_schemas.ApiKeyList)
async def list_owner_keys(ctx: RequestContext) -> key_schemas.ApiKeyList:
    """Your keys, revoked ones included (prefix and metadata only), newest first."""
    return await agent_keys.list_for_owner(ctx.session, ctx.actor)


@routes.post(
    "/api-keys/dashboard",
    auth=AuthKind.SESSION,
    body=key_schemas.ApiKeyCreate,
    body_optional=True,
    response=key_schemas.ApiKeyCreated,
    status=201,
)
async def create_owner_key(ctx: RequestContext) -> key_schemas.ApiKeyCreated:
    """Mint a key for one of your agents, or an owner-level key (no agentId). The full key is shown once.

    Archived, deleted and suspended agents cannot get keys (409)."""
    return await agent_keys.create_for_owner(ctx.session, ctx.actor, ctx.body)


@routes.delete("/api-keys/dashboard/{keyId}", auth=AuthKind.SESSION, response=key_schemas.ApiKeyRevoked)
async def revoke_owner_key(ctx: RequestContext) -> key_schemas.ApiKeyRevoked:
    """Revoke one of your keys; it stops working at once."""
    return await agent_keys.revoke_for_owner_key(ctx.session, ctx.actor, ctx.params["keyId"])


@routes.get("/api-keys", auth=AuthKind.KEY_READ, response=key_schemas.ApiKeyList)
async def list_keys(ctx: RequestContext) -> key_schemas.ApiKeyList:
    """The keys of the calling key's owner (a provisional agent: its own keys), prefix and metadata only."""
    return await agent_keys.list_for_key(ctx.session, ctx.key_actor)


@routes.post(
    "/api-keys",
    auth=AuthKind.KEY_WRITE,
    body=key_schemas.ApiKeyCreate,
    body_optional=True,
    response=key_schemas.ApiKeyCreated,
    status=201,
)
async def create_key(ctx: RequestContext) -> key_schemas.ApiKeyCreated:
    """Mint a key for the calling agent (default) or another agent of the same owner. The full key is shown once.

    Scopes default to read+write and can never exceed the caller's own (403 scope_escalation)."""
    return await agent_keys.create_for_key(ctx.session, ctx.key_actor, ctx.body)


@routes.delete("/api-keys/{keyId}", auth=AuthKind.KEY_WRITE, response=key_schemas.ApiKeyRevoked)
async def revoke_key(ctx: RequestContext) -> key_schemas.ApiKeyRevoked:
    """Revoke a key of the same owner (or the calling key itself); it stops working at once."""
    return await agent_keys.revoke_for_key(ctx.session, ctx.key_actor, ctx.params["keyId"])
