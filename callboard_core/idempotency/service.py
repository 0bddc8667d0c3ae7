"""Idempotency keys on unsafe routes (and state-changing MCP tools).

A key is reserved in its own short transaction, so a concurrent duplicate sees it at once and gets a
409. The stored outcome is written in the same transaction as the work, so a response is recorded
exactly when its effects are. Only successful outcomes are stored: a failed request changed nothing,
so retrying it is correct. Stored bodies can hold one-time secrets (new API keys), so they are
encrypted with a key derived from the service secret and kept for 24 hours.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from datetime import timedelta

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Conflict, ValidationFailed
from callboard_core.idempotency.models import IdempotencyRecord

RETENTION = timedelta(hours=24)
LOCK = timedelta(seconds=60)
MAX_KEY_LENGTH = 255
MAX_PATH_LENGTH = 2048  # the column's size


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Reservation:
    record_id: str | None = None
    replay: StoredResponse | None = None


def request_fingerprint(method: str, path: str, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


class Sealer:
    def __init__(self, secret: str) -> None:
        self._aead = AESGCM(hashlib.sha256(b"callboard-idempotency:" + secret.encode()).digest())

    def seal(self, data: bytes) -> str:
        nonce = os.urandom(12)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, data, None)).decode()

    def open(self, text: str) -> bytes:
        raw = base64.b64decode(text)
        return self._aead.decrypt(raw[:12], raw[12:], None)


def check_key(key: str) -> str:
    key = key.strip()
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise ValidationFailed(
            "Idempotency-Key must be 1 to 255 printable characters.",
            errors=[
                {
                    "field": "Idempotency-Key",
                    "in": "header",
                    "code": "invalid",
                    "message": "1 to 255 printable characters",
                }
            ],
        )
    return key


async def reserve(
    uows: UnitsOfWork, sealer: Sealer, *, scope: str, key: str, method: str, path: str, fingerprint: str
) -> Reservation:
    key = check_key(key)
    path = path[:MAX_PATH_LENGTH]  # kept for operators only; the fingerprint covers the full path
    now = clock.now()
    async with uows.uow() as write:
        session = write.session
        record = (
            await session.execute(
                select(IdempotencyRecord).where(
                    IdempotencyRecord.scope == scope, IdempotencyRecord.key == key
                )
            )
        ).scalar_one_or_none()
        if record is not None and record.expires_at <= now:
            await session.delete(record)
            await session.flush()
            record = None
        if record is None:
            record = IdempotencyRecord(
                scope=scope,
                key=key,
                method=method,
                path=path,
                request_hash=fingerprint,
                locked_until=now + LOCK,
                expires_at=now + RETENTION,
            )
            session.add(record)
            try:
                await session.flush()
            except IntegrityError:
                raise Conflict(
                    "A request with this Idempotency-Key is already in progress.",
                    code="idempotency_request_in_progress",
                ) from None
            return Reservation(record_id=record.id)
        if record.request_hash != fingerprint:
            raise Conflict(
                "This Idempotency-Key was used with a different request.", code="idempotency_key_reused"
            )
        if record.state == "COMPLETED":
            assert record.response_status is not None and record.response_body is not None
            return Reservation(
                replay=StoredResponse(
                    status=record.response_status,
                    body=sealer.open(record.response_body),
                    headers=dict(record.response_headers or {}),
                )
            )
        if record.locked_until > now:
            raise Conflict(
                "A request with this Idempotency-Key is already in progress.",
                code="idempotency_request_in_progress",
            )
        # The earlier attempt died without finishing: take the key over.
        record.locked_until = now + LOCK
        return Reservation(record_id=record.id)


async def find_replay(
    session: AsyncSession, sealer: Sealer, *, scope: str, key: str, fingerprint: str
) -> StoredResponse | None:
    """The stored answer of a completed, unexpired request with this key and this very request, or None.
    Reserves nothing: for callers that may only ever get a replay (a key revoked by its own rotation)."""
    try:
        key = check_key(key)
    except ValidationFailed:
        return None
    record = (
        await session.execute(
            select(IdempotencyRecord).where(IdempotencyRecord.scope == scope, IdempotencyRecord.key == key)
        )
    ).scalar_one_or_none()
    if (
        record is None
        or record.state != "COMPLETED"
        or record.expires_at <= clock.now()
        or record.request_hash != fingerprint
        or record.response_status is None
        or record.response_body is None
    ):
        return None
    return StoredResponse(
        status=record.response_status,
        body=sealer.open(record.response_body),
        headers=dict(record.response_headers or {}),
    )


async def complete(session: AsyncSession, sealer: Sealer, record_id: str, response: StoredResponse) -> None:
    """Store the outcome in the caller's (the work's) transaction."""
    await session.execute(
        update(IdempotencyRecord)
        .where(IdempotencyRecord.id == record_id)
        .values(
            state="COMPLETED",
            response_status=response.status,
            response_body=sealer.seal(response.body),
            response_headers=response.headers,
        )
    )


async def release(uows: UnitsOfWork, record_id: str) -> None:
    async with uows.uow() as write:
        await write.session.execute(
            delete(IdempotencyRecord).where(
                IdempotencyRecord.id == record_id, IdempotencyRecord.state == "IN_PROGRESS"
            )
        )


async def purge_expired(session: AsyncSession) -> int:
    result = await session.execute(
        delete(IdempotencyRecord).where(IdempotencyRecord.expires_at <= clock.now())
    )
    return int(getattr(result, "rowcount", 0) or 0)
