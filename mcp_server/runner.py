"""One tool call = one authenticated unit of work, as one HTTP request is: the key is checked on every call
(a key revoked mid-session stops working at once), reads use a read transaction, writes a write transaction,
and a write with an idempotency key runs at most once (the same records and rules as the HTTP header)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import pipeline
from callboard_core.api_keys import service as api_keys
from callboard_core.container import Core
from callboard_core.errors import Unauthenticated
from callboard_core.guidance import rendering
from callboard_core.idempotency import service as idempotency
from callboard_core.idempotency.service import StoredResponse
from callboard_core.principals import Actor, KeyPrincipal
from mcp_server.tool_table import ToolCall, ToolDef

T = TypeVar("T")
KeySource = Callable[[Any], str | None]  # the tool call's Context -> the raw API key, if any

GATE_PRINCIPAL = (
    "callboard_mcp_principal"  # scope state key: (raw key, principal, touch due), set by http.KeyGate
)


def _gate_principal(ctx: Any) -> tuple[str, KeyPrincipal, bool] | None:
    try:
        request = ctx.request_context.request
    except (AttributeError, ValueError):  # no request around this call (in-process use)
        return None
    state = getattr(request, "scope", {}).get("state") if request is not None else None
    found = state.get(GATE_PRINCIPAL) if isinstance(state, dict) else None
    return found if isinstance(found, tuple) else None


def key_from_headers(headers: Mapping[str, str] | None) -> str | None:
    """`X-API-Key: <key>` or `Authorization: Bearer <key>` (HTTP transports)."""
    if not headers:
        return None
    key = headers.get("x-api-key")
    if key and key.strip():
        return key.strip()
    scheme, _, value = (headers.get("authorization") or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def http_key(ctx: Any) -> str | None:
    return key_from_headers(ctx.headers)


def fixed_key(key: str | None) -> KeySource:
    """stdio in-process: the key the process was started with (CALLBOARD_API_KEY)."""
    return lambda _ctx: key


class Runner:
    def __init__(self, core: Core, key_source: KeySource) -> None:
        self.core = core
        self.key_source = key_source

    async def principal(self, ctx: Any, session: AsyncSession, *, write: bool) -> KeyPrincipal:
        raw = self.key_source(ctx)
        if not raw:
            raise Unauthenticated(
                "Send your API key (X-API-Key or Authorization: Bearer).", code="missing_api_key"
            )
        gated = _gate_principal(ctx)
        if gated is not None and gated[0] == raw:
            principal, due = gated[1], gated[2]  # checked by http.KeyGate for this very HTTP request
        else:
            principal, due = await api_keys.authenticate(session, raw, self.core.read_cache)
        api_keys.require_scope(principal, write=write)
        if due:
            pipeline.touch_key(self.core, principal.key_id)
        return principal

    async def run(self, tool: ToolDef, ctx: Any, arguments: dict[str, Any]) -> Any:
        """One call of a declared tool, with the SDK-validated arguments."""
        if tool.write:
            return await self.write(tool, ctx, arguments)
        return await self.read(ctx, lambda call: tool.body(call, **arguments))

    async def actor(self, ctx: Any, session: AsyncSession, *, write: bool) -> Actor:
        """Who acts, the one place MCP builds it: the key's agent (every tool acts as an agent; an owner-level
        key is refused with 403 agent_key_required), carrying the key itself."""
        actor = Actor.of_key(await self.principal(ctx, session, write=write))
        actor.require_agent()
        return actor

    async def read(self, ctx: Any, work: Callable[[ToolCall], Awaitable[T]]) -> T:
        async with self.core.uow(write=False) as uow:
            actor = await self.actor(ctx, uow.session, write=False)
            return await work(ToolCall(self.core, uow.session, actor))

    async def write(self, tool: ToolDef, ctx: Any, arguments: dict[str, Any]) -> Any:
        key = arguments.pop("idempotency_key", None) if tool.idempotent else None
        parsed = tool.parse(**arguments) if tool.parse is not None else None
        once = None
        if key is not None:
            once = pipeline.Idempotency(key, "TOOL", f"mcp:{tool.name}", fingerprint(tool.name, arguments))

        async def authenticate(session: AsyncSession) -> Actor:
            return await self.actor(ctx, session, write=tool.scope == api_keys.WRITE)

        def call(session: AsyncSession, actor: Actor, prepared: Any = None) -> ToolCall:
            return ToolCall(self.core, session, actor, prepared=prepared, parsed=parsed)

        async def prepare(session: AsyncSession, actor: Actor) -> Any:
            assert tool.prepare is not None
            return await tool.prepare(call(session, actor), **arguments)

        async def act(session: AsyncSession, actor: Actor, prepared: Any) -> Any:
            return await tool.body(call(session, actor, prepared), **arguments)

        outcome = await pipeline.run_write(
            self.core,
            authenticate,
            act,
            stored=_stored,
            idempotency_request=once,
            scope=lambda actor: f"key:{actor.require_key().key_id}",
            prepare=prepare if tool.prepare is not None else None,
            prepare_on_demand=tool.prepare_on_demand,
        )
        if isinstance(outcome, StoredResponse):
            return tool.output.model_validate_json(outcome.body)
        return outcome


def fingerprint(tool: str, arguments: dict[str, Any]) -> str:
    """A tool call's fingerprint, from its arguments as the SDK validated them (a model argument as the fields
    the caller set): a retry must send the same."""
    data = {
        name: value.model_dump(mode="json", exclude_unset=True) if isinstance(value, BaseModel) else value
        for name, value in arguments.items()
    }
    return idempotency.request_fingerprint(
        "TOOL", f"mcp:{tool}", orjson.dumps(data, option=orjson.OPT_SORT_KEYS, default=str)
    )


def _stored(result: BaseModel) -> StoredResponse:
    # Stored in the neutral form, which reads back into the result model; a replay is rendered again.
    with rendering(None):
        body = result.model_dump_json(by_alias=True)
    return StoredResponse(status=200, body=body.encode(), headers={})
