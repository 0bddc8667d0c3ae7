"""One tool call = one authenticated unit of work, as one HTTP request is: the key is checked on every call
(a key revoked mid-session stops working at once), reads use a read transaction, writes a write transaction,
and a write with an idempotency key runs at most once (the same records and rules as the HTTP header)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.api_keys import service as api_keys
from callboard_core.container import Core
from callboard_core.errors import Forbidden, Unauthenticated
from callboard_core.idempotency import service as idempotency
from callboard_core.jobs.actors import Actor
from callboard_core.principals import KeyPrincipal

M = TypeVar("M", bound=BaseModel)
P = TypeVar("P")
Work = Callable[[AsyncSession, Actor, KeyPrincipal], Awaitable[M]]
Prepare = Callable[[AsyncSession, Actor], Awaitable[P]]
PreparedWork = Callable[[AsyncSession, Actor, P], Awaitable[M]]
KeySource = Callable[[Any], str | None]  # the tool call's Context -> the raw API key, if any

_touches: set[asyncio.Task[None]] = set()
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
        needed = api_keys.WRITE if write else api_keys.READ
        if needed not in principal.scopes:
            raise Forbidden(
                f"This API key lacks the '{needed}' scope.",
                code="insufficient_scope",
                required=needed,
                scopes=sorted(principal.scopes),
            )
        if due:
            task = asyncio.create_task(api_keys.touch(self.core.db, principal.key_id))
            _touches.add(task)
            task.add_done_callback(_touches.discard)
        return principal

    async def read(self, ctx: Any, work: Work[M]) -> M:
        async with self.core.uow(write=False) as uow:
            principal = await self.principal(ctx, uow.session, write=False)
            return await work(uow.session, Actor.agent(principal.require_agent()), principal)

    async def write(
        self,
        ctx: Any,
        tool: str,
        args: dict[str, Any],
        idempotency_key: str | None,
        work: Work[M],
        out: type[M],
        *,
        scope: str = api_keys.WRITE,
    ) -> M:
        return await self._write(
            ctx,
            tool,
            args,
            idempotency_key,
            None,
            lambda session, actor, principal, _: work(session, actor, principal),
            out,
            scope,
        )

    async def prepared_write(
        self,
        ctx: Any,
        tool: str,
        args: dict[str, Any],
        idempotency_key: str | None,
        prepare: Prepare[P],
        work: PreparedWork[P, M],
        out: type[M],
    ) -> M:
        """A write whose slow part needs no lock (re-hashing stored files): `prepare` runs first in a read
        unit of work and its result goes to `work`, as a route's `prepare` step over HTTP."""
        return await self._write(
            ctx,
            tool,
            args,
            idempotency_key,
            prepare,
            lambda session, actor, _principal, prepared: work(session, actor, prepared),
            out,
            api_keys.WRITE,
        )

    async def _write(
        self,
        ctx: Any,
        tool: str,
        args: dict[str, Any],
        idempotency_key: str | None,
        prepare: Prepare[Any] | None,
        work: Callable[[AsyncSession, Actor, KeyPrincipal, Any], Awaitable[M]],
        out: type[M],
        scope: str,
    ) -> M:
        # The key is checked before the write lock is taken, as over HTTP.
        async with self.core.uow(write=False) as uow:
            principal = await self.principal(ctx, uow.session, write=scope == api_keys.WRITE)
        actor = Actor.agent(principal.require_agent())
        record_id: str | None = None
        if idempotency_key is not None:
            fingerprint = idempotency.request_fingerprint(
                "TOOL", f"mcp:{tool}", orjson.dumps(args, option=orjson.OPT_SORT_KEYS, default=str)
            )
            reservation = await idempotency.reserve(
                self.core.db,
                self.core.sealer,
                scope=f"key:{principal.key_id}",
                key=idempotency_key,
                method="TOOL",
                path=f"mcp:{tool}",
                fingerprint=fingerprint,
            )
            if reservation.replay is not None:
                return out.model_validate_json(reservation.replay.body)
            record_id = reservation.record_id
        try:
            prepared = None
            if prepare is not None:
                async with self.core.uow(write=False) as uow:
                    prepared = await prepare(uow.session, actor)
            async with self.core.uow(write=True) as uow:
                result = await work(uow.session, actor, principal, prepared)
                if record_id is not None:
                    await idempotency.complete(
                        uow.session,
                        self.core.sealer,
                        record_id,
                        idempotency.StoredResponse(
                            status=200, body=result.model_dump_json(by_alias=True).encode(), headers={}
                        ),
                    )
        except BaseException:
            if record_id is not None:
                await idempotency.release(self.core.db, record_id)
            raise
        return result
