"""The tool table: every MCP tool is declared once, with its name, its kind (read or write), the key scope it
needs, whether it takes an `idempotency_key`, and its optional `parse` and `prepare` steps (as
http_api/route_table.py declares routes). The runner (runner.py) does the rest the same way for every tool.

A tool body takes a ToolCall and the tool's own arguments and calls one service; its docstring is the tool's
description (its contract for the agent):

    @tools.write()
    async def apply(call: ToolCall, job_id: JobId) -> job_schemas.ApplicationView:
        return await participation.apply(call.session, call.actor, job_id)

The SDK reads the input schema from the body's parameters (after `call`) plus `idempotency_key` for an
idempotent write, and the output schema from its return annotation. An idempotent call's fingerprint is made
from those arguments (runner.fingerprint), so no tool restates them.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.api_keys import service as api_keys
from callboard_core.container import Core
from callboard_core.principals import Actor
from mcp_server.errors import domain_errors

Ident = Annotated[str, Field(max_length=64)]  # an application's, invitation's, submission's or award's id
JobId = Annotated[str, Field(description="The job's id (job_...).", max_length=64)]
SlotId = Annotated[
    str, Field(description="Your participation slot's id (from home or my_slots).", max_length=64)
]
IdempotencyKey = Annotated[
    str | None,
    Field(
        description="Optional. Send the same key when you retry after a crash or timeout: the action runs at most "
        "once and the retry returns the first answer.",
        max_length=255,
    ),
]


@dataclass(slots=True)
class ToolCall:
    """What a tool body gets: the unit of work's session, the calling agent (as the Actor, its key in
    `actor.key`) and the core."""

    core: Core
    session: AsyncSession
    actor: Actor
    prepared: Any = None  # what the tool's `prepare` step returned
    parsed: Any = None  # what the tool's `parse` step returned


Body = Callable[..., Awaitable[Any]]  # (call: ToolCall, **arguments) -> the result model
Step = Callable[..., Any]


@dataclass(frozen=True)
class ToolDef:
    name: str
    body: Body
    write: bool  # a write unit of work (and the idempotency key, if `idempotent`)
    scope: str  # the API key scope the tool needs (api_keys.READ or api_keys.WRITE)
    idempotent: bool = False
    # Before any credential check, from the arguments alone (decoding them, as HTTP parses a body first);
    # its result reaches the body as call.parsed.
    parse: Step | None = None
    # A write's slow part that needs no lock (re-hashing stored files), run with the arguments in a read
    # unit of work just before the write one; its result reaches the body as call.prepared.
    prepare: Body | None = None
    # Run `prepare` only when the body's first attempt, given call.prepared None, raises PrepareFirst.
    prepare_on_demand: bool = False

    def signature(self) -> inspect.Signature:
        """The signature the SDK reads: the MCP context, the body's arguments, then idempotency_key."""
        own = inspect.signature(self.body, eval_str=True)
        parameters = [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context),
            *list(own.parameters.values())[1:],  # after `call`
        ]
        if self.idempotent:
            parameters.append(
                inspect.Parameter(
                    "idempotency_key",
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=None,
                    annotation=IdempotencyKey,
                )
            )
        return own.replace(parameters=parameters)

    def sdk_function(self, run: Callable[[ToolDef, Any, dict[str, Any]], Awaitable[Any]]) -> Body:
        """The function registered with the SDK: its signature gives the input and output schemas (the
        arguments model is named after the body, as before), `run` runs the call."""
        signature = self.signature()

        async def tool(ctx: Any, **arguments: Any) -> Any:
            return await run(self, ctx, arguments)

        tool.__name__ = tool.__qualname__ = self.body.__name__
        tool.__module__ = self.body.__module__
        # The description must not depend on how deeply the body is indented in its module.
        tool.__doc__ = inspect.cleandoc(self.body.__doc__ or "")
        tool.__signature__ = signature  # type: ignore[attr-defined]
        tool.__annotations__ = {
            **{p.name: p.annotation for p in signature.parameters.values()},
            "return": signature.return_annotation,
        }
        return domain_errors(tool)

    @property
    def output(self) -> Any:
        """The result model (a replayed answer is read back into it)."""
        return inspect.signature(self.body, eval_str=True).return_annotation


class ToolGroup:
    """Collects the tools of one area, in the order they are listed to clients."""

    def __init__(self) -> None:
        self.declared: list[ToolDef] = []

    def read(self, *, name: str | None = None) -> Callable[[Body], Body]:
        """A read: one read unit of work; any key with the read scope."""
        return self._declare(name=name, write=False, scope=api_keys.READ)

    def write(
        self,
        *,
        name: str | None = None,
        scope: str = api_keys.WRITE,
        idempotent: bool = True,
        parse: Step | None = None,
        prepare: Body | None = None,
        prepare_on_demand: bool = False,
    ) -> Callable[[Body], Body]:
        """A write: the credential checked before the write lock, then one write unit of work; with
        `idempotent`, the tool takes an `idempotency_key` and runs at most once per key."""
        return self._declare(
            name=name,
            write=True,
            scope=scope,
            idempotent=idempotent,
            parse=parse,
            prepare=prepare,
            prepare_on_demand=prepare_on_demand,
        )

    def _declare(self, *, name: str | None, **kind: Any) -> Callable[[Body], Body]:
        def register(body: Body) -> Body:
            self.declared.append(ToolDef(name=name or body.__name__, body=body, **kind))
            return body

        return register
