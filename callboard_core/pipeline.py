"""One write action, run the same way for every front end (the HTTP API and the MCP tools).

The sequence: the credential is checked in a read unit of work before the write lock is taken (a flood of
bad keys cannot queue writers); an Idempotency-Key is reserved (a completed one replays its stored answer
instead); the optional `prepare` step (the slow part that needs no lock, such as re-hashing stored files)
runs in a read unit of work; then the write unit of work runs the action and stores its answer with it.
A prepare step `on demand` runs only when the write step asks for it (errors.PrepareFirst): the common
case (a publish with no files to re-hash and the money in place) then costs one transaction, not two.
Any exception releases the reservation, so a failed action can be retried. A write step the database undid
to break a deadlock or a serialization conflict with other requests (nothing of it stored) runs again here,
up to `WRITE_ATTEMPTS` times with a short random pause, before the caller ever sees it: the same retry a
client would make, without the round trip (`db.outage.write_conflict`; counted in
`callboard_write_retries`). The prepare and write steps run in one of the database's action slots
(`Database.action_slot`), so actions waiting for a second connection can never hold the whole pool.

A front end brings only what is its own: how it authenticates, what its answer looks like stored (the HTTP
response bytes, a tool result's JSON) and how a replay is rendered.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import metrics
from callboard_core.api_keys import service as api_keys
from callboard_core.container import Core
from callboard_core.db.outage import DATABASE_ERRORS, write_conflict
from callboard_core.errors import PrepareFirst, Unauthenticated
from callboard_core.idempotency import service as idempotency
from callboard_core.idempotency.service import StoredResponse

C = TypeVar("C")  # the authenticated caller, as the front end describes it
R = TypeVar("R")  # the action's answer

log = logging.getLogger(__name__)

# A write step undone by a deadlock or a serialization failure runs again, up to this many attempts in all;
# before each new one it waits a random pause of up to RETRY_PAUSE_SECONDS times the attempts so far, so
# that the requests that collided do not meet again in step.
WRITE_ATTEMPTS = 3
RETRY_PAUSE_SECONDS = 0.02


@dataclass(frozen=True, slots=True)
class Idempotency:
    """An idempotency key and the request it was sent with. `method` and `path` are kept for operators;
    the fingerprint (idempotency.request_fingerprint) is what a retry must match."""

    key: str
    method: str
    path: str
    fingerprint: str


def touch_key(core: Core, key_id: str) -> None:
    """Refresh an API key's lastUsedAt in the background (the core's bus holds the task until it is done):
    the caller's answer never waits for it."""
    api_keys.note_touch(core.read_cache, key_id)
    core.bus.spawn(api_keys.touch(core, key_id))


async def run_write(
    core: Core,
    authenticate: Callable[[AsyncSession], Awaitable[C]],
    write: Callable[[AsyncSession, C, Any], Awaitable[R]],
    *,
    stored: Callable[[R], StoredResponse],
    idempotency_request: Idempotency | None = None,
    scope: Callable[[C], str] | None = None,
    prepare: Callable[[AsyncSession, C], Awaitable[Any]] | None = None,
    prepare_on_demand: bool = False,
    admit: Callable[[C], Awaitable[None]] | None = None,
    revoked_scope: Callable[[AsyncSession], Awaitable[str | None]] | None = None,
) -> R | StoredResponse:
    """Run one write action; returns its answer, or the StoredResponse of the earlier request it repeats.

    - `authenticate(session)`: the caller, or an error (runs in a read unit of work).
    - `admit(caller)`: checks made once the caller is known, outside any unit of work (a rate limit).
    - `scope(caller)`: whose idempotency keys these are (required with `idempotency_request`).
    - `prepare(session, caller)`: the optional lock-free step; its result is `write`'s third argument.
    - `prepare_on_demand`: run `write` first with `prepared` None; only if it raises PrepareFirst (its unit
      of work rolled back) run `prepare`, then `write` again with its result.
    - `write(session, caller, prepared)`: the action, in the write unit of work.
    - `stored(answer)`: the answer as it is kept for replays.
    - `revoked_scope(session)`: for a caller refused as unauthenticated, the scope whose stored answers it may
      still get (a key revoked by its own rotation retrying that rotation), or None.
    """
    async with core.uow(write=False) as uow:
        try:
            caller = await authenticate(uow.session)
        except Unauthenticated:
            if idempotency_request is None or revoked_scope is None:
                raise
            replay = await _revoked_replay(core, uow.session, idempotency_request, revoked_scope)
            if replay is None:
                raise
            return replay
    if admit is not None:
        await admit(caller)

    record_id: str | None = None
    if idempotency_request is not None:
        assert scope is not None, "an idempotent write names its scope"
        reservation = await idempotency.reserve(
            core,
            core.sealer,
            scope=scope(caller),
            key=idempotency_request.key,
            method=idempotency_request.method,
            path=idempotency_request.path,
            fingerprint=idempotency_request.fingerprint,
        )
        if reservation.replay is not None:
            return reservation.replay
        record_id = reservation.record_id
    try:
        async with core.db.action_slot():

            async def run_prepare() -> Any:
                assert prepare is not None
                async with core.uow(write=False) as uow:
                    return await prepare(uow.session, caller)

            async def attempt_once(prepared: Any) -> R:
                async with core.uow(write=True) as uow:
                    answer = await write(uow.session, caller, prepared)
                    if record_id is not None:
                        # In the action's own transaction: the answer is kept exactly when its effects are.
                        await idempotency.complete(uow.session, core.sealer, record_id, stored(answer))
                return answer

            async def attempt(prepared: Any) -> R:
                return await _retrying_conflicts(lambda: attempt_once(prepared))

            if prepare is None:
                answer = await attempt(None)
            elif not prepare_on_demand:
                answer = await attempt(await run_prepare())
            else:
                try:
                    answer = await attempt(None)
                except PrepareFirst:
                    answer = await attempt(await run_prepare())
    except BaseException:
        if record_id is not None:
            await idempotency.release(core, record_id)
        raise
    return answer


async def _retrying_conflicts(attempt: Callable[[], Awaitable[R]]) -> R:
    """`attempt()` (one write unit of work), run again while the database undoes it to break a deadlock or a
    serialization conflict, at most `WRITE_ATTEMPTS` times in all: the unit of work rolled back whole, so
    a new attempt starts from nothing, as a client's retry would (its prepared step and idempotency
    reservation are the request's own and stay). Any other error, or the last conflict, goes to the caller."""
    attempts = 0
    while True:
        attempts += 1
        try:
            return await attempt()
        except DATABASE_ERRORS as exc:
            reason = write_conflict(exc)
            if reason is None or attempts >= WRITE_ATTEMPTS:
                raise
            metrics.WRITE_RETRIES.labels(reason=reason).inc()
            log.warning(
                "write undone by a %s (attempt %d of %d): running it again", reason, attempts, WRITE_ATTEMPTS
            )
            await asyncio.sleep(random.uniform(0, RETRY_PAUSE_SECONDS * attempts))


async def _revoked_replay(
    core: Core,
    session: AsyncSession,
    request: Idempotency,
    revoked_scope: Callable[[AsyncSession], Awaitable[str | None]],
) -> StoredResponse | None:
    scope = await revoked_scope(session)
    if scope is None:
        return None
    return await idempotency.find_replay(
        session, core.sealer, scope=scope, key=request.key, fingerprint=request.fingerprint
    )
