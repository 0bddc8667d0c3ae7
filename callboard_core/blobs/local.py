"""The local adapter: files under `var_dir/blobs`, presigned URLs signed and served by this app.

A URL is `{base_url}/blobs/{token}`. The token is `base64url(payload).base64url(HMAC-SHA256(payload))`
with a key derived from `CALLBOARD_SECRET_KEY`; the payload names its purpose (`put` or `get`), the
object key and the expiry, plus the exact size and SHA-256 for a PUT and the filename and content type
for a GET. So a URL grants one action on one object until it expires, and cannot be altered.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import uuid
from collections.abc import AsyncIterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Literal

import anyio
import orjson

from callboard_core import clock
from callboard_core.blobs.port import DownloadLink, UploadTarget, check_key
from callboard_core.config import Settings
from callboard_core.errors import Forbidden, NotFound, ValidationFailed

Purpose = Literal["put", "get"]
_CHUNK = 1024 * 1024  # write and hash in 1 MiB pieces, off the event loop


@dataclass(frozen=True)
class PutGrant:
    """What a verified PUT token allows: exactly these bytes (size and SHA-256) at this key."""

    key: str
    size_bytes: int
    sha256_hex: str
    content_type: str
    expires_at: datetime


@dataclass(frozen=True)
class GetGrant:
    """What a verified GET token allows: read this key, served under this filename and content type."""

    key: str
    filename: str
    content_type: str
    expires_at: datetime


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LocalBlobStore:
    backend = "local"

    def __init__(
        self,
        root: Path,
        *,
        secret_key: str,
        base_url: str,
        upload_ttl_seconds: int = 900,
        download_ttl_seconds: int = 300,
    ) -> None:
        self.root = root
        self.base_url = base_url.rstrip("/")
        self.upload_ttl_seconds = upload_ttl_seconds
        self.download_ttl_seconds = download_ttl_seconds
        # A key of its own: a blob token can never be confused with any other signed value of the service.
        self._mac_key = hashlib.sha256(b"callboard-blobs:" + secret_key.encode()).digest()

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalBlobStore:
        return cls(
            settings.var_dir / "blobs",
            secret_key=settings.secret_key,
            base_url=settings.base_url,
            upload_ttl_seconds=settings.upload_url_ttl_seconds,
            download_ttl_seconds=settings.download_url_ttl_seconds,
        )

    # Tokens -------------------------------------------------------------------------------------------

    def _sign(self, payload: dict[str, Any]) -> str:
        body = _b64(orjson.dumps(payload))
        return body + "." + _b64(hmac.new(self._mac_key, body.encode(), hashlib.sha256).digest())

    def verify_token(self, token: str, purpose: Purpose) -> PutGrant | GetGrant:
        """The grant a token carries. Raises Forbidden `blob_token_invalid` (malformed, tampered, signed
        with another secret, or minted for the other purpose) or `blob_token_expired`."""
        invalid = Forbidden("This file link is not valid.", code="blob_token_invalid")
        body, dot, sig = token.partition(".")
        if not dot or not body or len(token) > 4096:
            raise invalid
        # Compare the canonical encoding, not decoded bytes: base64 lets a last character vary in its
        # unused bits, and a token must have exactly one valid spelling.
        expected = _b64(hmac.new(self._mac_key, body.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(sig.encode(), expected.encode()):
            raise invalid
        # Authenticated from here on: the payload is one we wrote.
        try:
            payload = orjson.loads(_unb64(body))
        except (binascii.Error, ValueError):
            raise invalid from None
        if payload.get("p") != purpose:
            raise invalid
        expires_at = datetime.fromtimestamp(payload["x"], UTC)
        if clock.now() >= expires_at:
            raise Forbidden(
                "This file link has expired; ask for a new one.",
                code="blob_token_expired",
                expiredAt=expires_at.isoformat(),
            )
        if purpose == "put":
            return PutGrant(payload["k"], payload["n"], payload["h"], payload["t"], expires_at)
        return GetGrant(payload["k"], payload["f"], payload["t"], expires_at)

    def _expiry(self, expires_in: int | None, default: int) -> tuple[datetime, int]:
        # Whole seconds: the token carries a Unix time, and expires_at must say exactly what it enforces.
        expires_at = clock.now() + timedelta(seconds=default if expires_in is None else expires_in)
        unix = int(expires_at.timestamp())
        return datetime.fromtimestamp(unix, UTC), unix

    def presign_put(
        self, key: str, *, size_bytes: int, sha256_hex: str, content_type: str, expires_in: int | None = None
    ) -> UploadTarget:
        check_key(key)
        expires_at, unix = self._expiry(expires_in, self.upload_ttl_seconds)
        token = self._sign(
            {"p": "put", "k": key, "x": unix, "n": size_bytes, "h": sha256_hex, "t": content_type}
        )
        return UploadTarget(
            url=f"{self.base_url}/blobs/{token}",
            expires_at=expires_at,
            headers={"Content-Type": content_type},
        )

    def presign_get(
        self, key: str, *, filename: str, content_type: str, expires_in: int | None = None
    ) -> DownloadLink:
        check_key(key)
        expires_at, unix = self._expiry(expires_in, self.download_ttl_seconds)
        token = self._sign({"p": "get", "k": key, "x": unix, "f": filename, "t": content_type})
        return DownloadLink(url=f"{self.base_url}/blobs/{token}", expires_at=expires_at)

    # Storage ------------------------------------------------------------------------------------------

    def path_for(self, key: str) -> Path:
        return self.root / check_key(key)

    def _temp_file(self) -> tuple[Path, IO[bytes]]:
        tmp_dir = self.root / ".tmp"  # keys start with [A-Za-z0-9], so no key can name this directory
        tmp_dir.mkdir(parents=True, exist_ok=True)
        path = tmp_dir / uuid.uuid4().hex
        return path, path.open("wb")

    def _commit(self, tmp: Path, handle: IO[bytes], key: str) -> None:
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        final = self.path_for(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, final)  # atomic: readers see the old file or the whole new one, never a part

    async def write(self, grant: PutGrant, chunks: AsyncIterable[bytes]) -> None:
        """Store a streamed body under the grant's key if it is exactly the granted bytes.

        The body goes to a temporary file, counted and hashed as it arrives; more bytes than granted stop
        the upload at once. A wrong size or hash is a 422 (`upload_size_mismatch`, `upload_sha256_mismatch`)
        and nothing is kept; on success the file replaces the key atomically, so repeating a PUT of the
        same content is harmless.
        """
        digest = hashlib.sha256()
        received = 0
        tmp, handle = await anyio.to_thread.run_sync(self._temp_file)
        committed = False

        def sink(data: bytes) -> None:
            handle.write(data)
            digest.update(data)

        try:
            buffer = bytearray()
            async for chunk in chunks:
                received += len(chunk)
                if received > grant.size_bytes:
                    raise _size_mismatch(grant.size_bytes, received, more=True)
                buffer += chunk
                if len(buffer) >= _CHUNK:
                    await anyio.to_thread.run_sync(sink, bytes(buffer))
                    buffer.clear()
            if buffer:
                await anyio.to_thread.run_sync(sink, bytes(buffer))
            if received != grant.size_bytes:
                raise _size_mismatch(grant.size_bytes, received, more=False)
            if not hmac.compare_digest(digest.hexdigest(), grant.sha256_hex):
                raise ValidationFailed(
                    "The uploaded bytes do not match the declared SHA-256.",
                    code="upload_sha256_mismatch",
                    expected=grant.sha256_hex,
                    received=digest.hexdigest(),
                )
            await anyio.to_thread.run_sync(self._commit, tmp, handle, grant.key)
            committed = True
        finally:
            if not committed:
                handle.close()
                tmp.unlink(missing_ok=True)

    async def open_for_read(self, grant: GetGrant) -> tuple[Path, os.stat_result]:
        """The file behind a GET grant and its stat; NotFound `blob_not_found` when it is gone."""
        path = self.path_for(grant.key)
        try:
            return path, await anyio.to_thread.run_sync(path.stat)
        except FileNotFoundError:
            raise NotFound(
                "The file is not stored (it was never uploaded or has been deleted).", code="blob_not_found"
            ) from None

    async def stat(self, key: str) -> int | None:
        path = self.path_for(key)
        try:
            return (await anyio.to_thread.run_sync(path.stat)).st_size
        except FileNotFoundError:
            return None

    async def sha256(self, key: str) -> str | None:
        path = self.path_for(key)

        def hash_file() -> str | None:
            digest = hashlib.sha256()
            try:
                with path.open("rb") as f:
                    while block := f.read(_CHUNK):
                        digest.update(block)
            except FileNotFoundError:
                return None
            return digest.hexdigest()

        return await anyio.to_thread.run_sync(hash_file)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(lambda: self.path_for(key).unlink(missing_ok=True))

    async def put_bytes(self, key: str, data: bytes, content_type: str) -> None:
        check_key(key)

        def write() -> None:
            tmp, handle = self._temp_file()
            try:
                handle.write(data)
                self._commit(tmp, handle, key)
            except BaseException:
                handle.close()
                tmp.unlink(missing_ok=True)
                raise

        await anyio.to_thread.run_sync(write)


def _size_mismatch(expected: int, received: int, *, more: bool) -> ValidationFailed:
    what = f"more than {expected}" if more else f"{received}"
    return ValidationFailed(
        f"The upload is {what} bytes; {expected} were declared.",
        code="upload_size_mismatch",
        expected=expected,
        received=None if more else received,
    )
