"""The BlobStore port: where file contents live. The database only ever holds a file's key and metadata.

Clients never stream file contents through the JSON API: they get a short-lived presigned PUT target
(bound to the declared size and SHA-256) and short-lived presigned GET links. Adapters: `local` (files
under `var/blobs`, URLs signed and served by this app) and `s3` (any S3-compatible store).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable
from urllib.parse import quote

# Keys are made by the service (`jobs/{jobId}/inputs/{fileId}`); refusing anything else keeps a key from
# ever naming a path outside the store (no `..`, no absolute paths, no backslashes).
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
MAX_KEY_LENGTH = 512


def check_key(key: str) -> str:
    if len(key) > MAX_KEY_LENGTH or not _KEY.match(key):
        raise ValueError(f"invalid blob key: {key!r}")
    return key


@dataclass(frozen=True)
class UploadTarget:
    """Where and how to PUT a file. The client sends exactly `headers` (plus the Content-Length its HTTP
    library sets, which must equal the declared size) and the file's bytes as the body."""

    url: str
    expires_at: datetime
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "PUT"


@dataclass(frozen=True)
class DownloadLink:
    url: str
    expires_at: datetime


@runtime_checkable
class BlobStore(Protocol):
    """Contracts every adapter keeps:

    - `presign_put`/`presign_get` do no I/O and never fail for a missing object; `expires_in=None` means
      the configured TTL (`CALLBOARD_UPLOAD_URL_TTL_SECONDS` / `CALLBOARD_DOWNLOAD_URL_TTL_SECONDS`).
    - `stat` and `sha256` answer None for a missing object; `sha256` streams the stored bytes (never
      trusts metadata), so the service can re-hash before it attaches a file.
    - `delete` of a missing object is not an error; `put_bytes` replaces the object atomically.
    """

    backend: str

    def presign_put(
        self, key: str, *, size_bytes: int, sha256_hex: str, content_type: str, expires_in: int | None = None
    ) -> UploadTarget: ...

    def presign_get(
        self, key: str, *, filename: str, content_type: str, expires_in: int | None = None
    ) -> DownloadLink: ...

    async def stat(self, key: str) -> int | None: ...

    async def sha256(self, key: str) -> str | None: ...

    async def delete(self, key: str) -> None: ...

    async def put_bytes(self, key: str, data: bytes, content_type: str) -> None: ...


def content_disposition(filename: str) -> str:
    """`attachment` (never inline: an uploaded HTML file must not render in a browser), with an ASCII
    fallback name for old clients and the exact UTF-8 name in `filename*` (RFC 6266 / 5987)."""
    ascii_name = unicodedata.normalize("NFKD", filename).encode("ascii", "ignore").decode()
    ascii_name = re.sub(r"[^A-Za-z0-9!#$&+.^_`|~ -]", "_", ascii_name).strip() or "download"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"
