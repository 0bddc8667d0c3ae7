"""Stored files: upload tickets, verification by re-hashing, fresh download links, deletion.

The caller (the jobs package) decides who may touch which job or slot; these functions only keep the
file rules. Flow: `request_upload` records a PENDING row and hands out a presigned PUT bound to the
declared size and SHA-256; the client PUTs the bytes straight to storage; `verify` (at publish for
input files, at submit for slot uploads) re-hashes the stored object and marks the row VERIFIED.
The service never trusts the storage's own checks (moto and some S3-compatible stores skip them).

Blob I/O is slow next to a database statement. On SQLite a write unit of work holds the database's
write lock from its first statement (and on PostgreSQL attaching files holds the job's row lock), so the
front ends hash first, in the read unit of work that checks the credential (`prehash`), and hand the
result to the write step: `verify_all` then hashes only what the pre-step did not match.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.blobs import BlobStore, DownloadLink
from callboard_core.config import Settings
from callboard_core.db.lookup import reread
from callboard_core.db.uow import after_commit
from callboard_core.errors import CallboardError, Conflict, Gone, NotFound, ValidationFailed
from callboard_core.files import schemas as file_schemas
from callboard_core.files.models import FileKind, FileStatus, StoredFile
from callboard_core.ids import new_id

_FILENAME = re.compile(file_schemas.FILENAME_PATTERN)
_MIME = re.compile(file_schemas.MIME_PATTERN)
_SHA256 = re.compile(file_schemas.SHA256_PATTERN)
_ID = re.compile(r"^[a-z0-9_]{1,40}$")


# --- upload tickets --------------------------------------------------------------------------------


def _validate(body: file_schemas.UploadRequest, max_bytes: int) -> None:
    errors: list[dict[str, Any]] = []

    def bad(field: str, code: str, message: str) -> None:
        errors.append({"field": field, "in": "body", "code": code, "message": message})

    name = body.filename
    if len(name) > file_schemas.MAX_FILENAME or not _FILENAME.fullmatch(name):
        bad(
            "filename",
            "invalid_filename",
            f"A file name of 1 to {file_schemas.MAX_FILENAME} characters, without path separators or control characters, not only dots and spaces.",
        )
    if len(body.mime_type) > file_schemas.MAX_MIME or not _MIME.fullmatch(body.mime_type):
        bad(
            "mimeType",
            "invalid_mime_type",
            "A MIME type such as `application/pdf` or `text/plain; charset=utf-8`.",
        )
    if body.size_bytes < 1:
        bad("sizeBytes", "invalid_size", "The size must be at least 1 byte.")
    elif body.size_bytes > max_bytes:
        bad("sizeBytes", "file_too_large", f"Files may be at most {max_bytes} bytes.")
    if not _SHA256.fullmatch(body.sha256):
        bad("sha256", "invalid_sha256", "The SHA-256 of the contents as 64 lowercase hex characters.")
    if errors:
        fields = ", ".join(e["field"] for e in errors)
        raise ValidationFailed(f"The upload request is not valid: {fields}.", errors=errors)


def storage_key(kind: FileKind | str, file_id: str, *, job_id: str | None, slot_id: str | None) -> str:
    """`jobs/{jobId}/inputs/{fileId}` or `slots/{slotId}/{fileId}`: one prefix per job and per slot, so
    the files of a job or slot can be listed or expired together in the bucket."""
    if kind == FileKind.JOB_INPUT:
        if not job_id or not _ID.match(job_id):
            raise ValueError("a job input file needs a job id")
        return f"jobs/{job_id}/inputs/{file_id}"
    if kind == FileKind.SLOT_UPLOAD:
        if not slot_id or not _ID.match(slot_id):
            raise ValueError("a slot upload needs a slot id")
        return f"slots/{slot_id}/{file_id}"
    raise ValueError(f"unknown file kind {kind!r}")


async def request_upload(
    session: AsyncSession,
    blobs: BlobStore,
    settings: Settings,
    *,
    kind: FileKind | str,
    job_id: str | None = None,
    slot_id: str | None = None,
    agent_id: str | None = None,
    body: file_schemas.UploadRequest,
) -> file_schemas.UploadTicket:
    """Record a PENDING file and return its presigned PUT target (valid `CALLBOARD_UPLOAD_URL_TTL_SECONDS`).

    Raises ValidationFailed with per-field codes: `invalid_filename`, `invalid_mime_type`, `invalid_size`,
    `file_too_large` (over `CALLBOARD_MAX_UPLOAD_BYTES`), `invalid_sha256`. JOB_INPUT needs `job_id`,
    SLOT_UPLOAD needs `slot_id` (both may be given: a slot upload may name its job too).
    """
    kind = FileKind(kind)
    _validate(body, settings.max_upload_bytes)
    file_id = new_id("fil")
    row = StoredFile(
        id=file_id,
        kind=kind,
        job_id=job_id,
        slot_id=slot_id,
        uploader_agent_id=agent_id,
        filename=body.filename,
        mime_type=body.mime_type,
        size_bytes=body.size_bytes,
        sha256=body.sha256,
        storage_key=storage_key(kind, file_id, job_id=job_id, slot_id=slot_id),
        status=FileStatus.PENDING,
        created_at=clock.now(),
    )
    session.add(row)
    await session.flush()
    return ticket(blobs, row)


def ticket(blobs: BlobStore, file: StoredFile) -> file_schemas.UploadTicket:
    """A fresh upload target for an existing file (a retry after the first URL expired)."""
    target = blobs.presign_put(
        file.storage_key, size_bytes=file.size_bytes, sha256_hex=file.sha256, content_type=file.mime_type
    )
    return file_schemas.UploadTicket(
        file_id=file.id,
        upload_id=file.id,
        kind=file.kind,
        filename=file.filename,
        mime_type=file.mime_type,
        size_bytes=file.size_bytes,
        sha256=file.sha256,
        status=file.status,
        created_at=file.created_at,
        target=file_schemas.UploadTargetView(
            url=target.url, method="PUT", headers=dict(target.headers), expires_at=target.expires_at
        ),
    )


# --- lookups ---------------------------------------------------------------------------------------


async def get(
    session: AsyncSession,
    file_id: str,
    *,
    job_id: str | None = None,
    slot_id: str | None = None,
    kind: FileKind | str | None = None,
    include_deleted: bool = False,
) -> StoredFile:
    """The file, if it belongs to the given job/slot/kind; NotFound `file_not_found` otherwise (a file of
    another job reads exactly like a missing one)."""
    file = await session.get(StoredFile, file_id) if 0 < len(file_id) <= 40 else None
    if (
        file is None
        or (job_id is not None and file.job_id != job_id)
        or (slot_id is not None and file.slot_id != slot_id)
        or (kind is not None and file.kind != kind)
        or (not include_deleted and file.status == FileStatus.DELETED)
    ):
        raise NotFound("No such file.", code="file_not_found", fileId=file_id)
    return file


async def list_for_job(
    session: AsyncSession, job_id: str, *, kind: FileKind | str = FileKind.JOB_INPUT
) -> list[StoredFile]:
    """A job's files of one kind (input files by default), oldest first, deleted ones left out."""
    rows = await session.execute(_JOB_FILES, {"p_job": job_id, "p_kind": str(kind)})
    return list(rows.scalars())


def _listed(job_id: Any, kind: Any) -> tuple[ColumnElement[bool], ...]:
    """What `list_for_job` lists: the job's files of a kind, deleted ones left out."""
    return StoredFile.job_id == job_id, StoredFile.kind == kind, StoredFile.status != FileStatus.DELETED


# Every publish with input files reads it: built once.
_JOB_FILES = (
    select(StoredFile)
    .where(*_listed(bindparam("p_job"), bindparam("p_kind")))
    .order_by(StoredFile.created_at, StoredFile.id)
)


# --- verification ----------------------------------------------------------------------------------


def _facts(file: StoredFile) -> dict[str, Any]:
    return {"fileId": file.id, "filename": file.filename}


async def check_stored(blobs: BlobStore, file: StoredFile) -> None:
    """Re-hash the stored object against the declared size and SHA-256; no database access.

    Raises Gone `file_deleted`; Conflict `file_missing` (nothing stored under the key yet) or
    `file_mismatch` (other size or other bytes), each naming the file id and filename.
    """
    if file.status == FileStatus.DELETED:
        raise Gone(f"File {file.id} ({file.filename}) was deleted.", code="file_deleted", **_facts(file))
    size = await blobs.stat(file.storage_key)
    # The size first: a wrong-sized object is refused without reading it.
    if size is not None and size != file.size_bytes:
        raise Conflict(
            f"File {file.id} ({file.filename}) is stored with {size} bytes; {file.size_bytes} were declared.",
            code="file_mismatch",
            expectedSizeBytes=file.size_bytes,
            storedSizeBytes=size,
            **_facts(file),
        )
    digest = await blobs.sha256(file.storage_key) if size is not None else None
    if digest is None:
        raise Conflict(
            f"File {file.id} ({file.filename}) has not been uploaded; PUT it to its upload URL first.",
            code="file_missing",
            **_facts(file),
        )
    if not hmac.compare_digest(digest, file.sha256):
        raise Conflict(
            f"File {file.id} ({file.filename}) does not match its declared SHA-256.",
            code="file_mismatch",
            expectedSha256=file.sha256,
            storedSha256=digest,
            **_facts(file),
        )


def _identity(file: StoredFile) -> tuple[str, str, str, int, str]:
    return (file.id, file.status, file.storage_key, file.size_bytes, file.sha256)


@dataclass(frozen=True, slots=True)
class Hashed:
    """Files whose stored bytes were re-hashed and matched before the write transaction began, each by
    (id, status, storage key, size, SHA-256): a file row that changed since (deleted, re-declared) is not
    covered and is checked again.
    Storage only accepts the declared bytes under a file's key (the PUT is bound to its size and SHA-256),
    so nothing but a store that skips that check could change them in between, and such a store could as
    well change them after the transaction: hashing earlier gives up nothing."""

    files: frozenset[tuple[str, str, str, int, str]] = frozenset()

    def covers(self, file: StoredFile) -> bool:
        return _identity(file) in self.files


NOT_HASHED = Hashed()


async def prehash(blobs: BlobStore, files: Iterable[StoredFile]) -> Hashed:
    """Re-hash these files outside any write transaction. A file that fails is left out, not reported:
    the write step checks it again and refuses with the full error."""
    matched = []
    for file in files:
        try:
            await check_stored(blobs, file)
        except (Conflict, Gone):
            continue
        matched.append(_identity(file))
    return Hashed(frozenset(matched))


async def mark_verified(session: AsyncSession, file: StoredFile) -> None:
    """PENDING or VERIFIED → VERIFIED (compare-and-set: a concurrently deleted file stays deleted, Gone)."""
    won = (
        await session.execute(
            update(StoredFile)
            .where(StoredFile.id == file.id, StoredFile.status != FileStatus.DELETED)
            .values(status=FileStatus.VERIFIED, verified_at=clock.now())
            .returning(StoredFile.id)
            .execution_options(synchronize_session=False)
        )
    ).first()
    await reread(session, file)
    if won is None:
        raise Gone(f"File {file.id} ({file.filename}) was deleted.", code="file_deleted", **_facts(file))


async def verify(session: AsyncSession, blobs: BlobStore, file: StoredFile) -> None:
    """Re-hash the stored object (every time: a verified file is checked again before each attach) and
    mark the file VERIFIED. Errors as `check_stored`."""
    await check_stored(blobs, file)
    await mark_verified(session, file)


async def verify_all(
    session: AsyncSession, blobs: BlobStore, files: Iterable[StoredFile], hashed: Hashed = NOT_HASHED
) -> None:
    """Verify every file (publish: all input files of a draft), hashing those `hashed` does not cover. If any
    fails, raises the first failure's error with `files` in its details listing every failing file as
    {fileId, filename, code}, and marks none VERIFIED."""
    files = list(files)
    failures: list[tuple[StoredFile, CallboardError]] = []
    for file in files:
        try:
            if not hashed.covers(file):
                await check_stored(blobs, file)
        except (Conflict, Gone) as exc:
            failures.append((file, exc))
    if failures:
        first = failures[0][1]
        first.details["files"] = [
            {"fileId": f.id, "filename": f.filename, "code": exc.code} for f, exc in failures
        ]
        if len(failures) > 1:
            first.message = f"{len(failures)} files are not ready: " + "; ".join(
                exc.message for _, exc in failures
            )
            first.args = (first.message,)
        raise first
    for file in files:
        await mark_verified(session, file)


async def put_inline(session: AsyncSession, blobs: BlobStore, file: StoredFile, data: bytes) -> None:
    """Store small contents sent inline (agents that cannot PUT), then verify from storage.

    The bytes must be the declared ones: ValidationFailed `upload_size_mismatch` or
    `upload_sha256_mismatch` otherwise (nothing is stored). Gone `file_deleted` for a deleted file.
    """
    if file.status == FileStatus.DELETED:
        raise Gone(f"File {file.id} ({file.filename}) was deleted.", code="file_deleted", **_facts(file))
    if len(data) != file.size_bytes:
        raise ValidationFailed(
            f"The contents are {len(data)} bytes; {file.size_bytes} were declared.",
            code="upload_size_mismatch",
            expected=file.size_bytes,
            received=len(data),
            **_facts(file),
        )
    digest = hashlib.sha256(data).hexdigest()
    if not hmac.compare_digest(digest, file.sha256):
        raise ValidationFailed(
            "The contents do not match the declared SHA-256.",
            code="upload_sha256_mismatch",
            expected=file.sha256,
            received=digest,
            **_facts(file),
        )
    await blobs.put_bytes(file.storage_key, data, file.mime_type)
    await verify(session, blobs, file)


# --- reads and deletion ----------------------------------------------------------------------------


def view(file: StoredFile, link: DownloadLink | None = None) -> file_schemas.FileView:
    """The file's record; with a link, its download URL and expiry."""
    return file_schemas.FileView(
        file_id=file.id,
        upload_id=file.id,
        kind=file.kind,
        filename=file.filename,
        mime_type=file.mime_type,
        size_bytes=file.size_bytes,
        sha256=file.sha256,
        status=file.status,
        created_at=file.created_at,
        verified_at=file.verified_at,
        download_url=link.url if link else None,
        download_expires_at=link.expires_at if link else None,
    )


def download(blobs: BlobStore, file: StoredFile) -> file_schemas.FileView:
    """The file with a fresh presigned GET (valid `CALLBOARD_DOWNLOAD_URL_TTL_SECONDS`), minted on every
    call: links are never stored. Only verified files are served: Conflict `file_not_verified` for a
    pending one, Gone `file_deleted` for a deleted one."""
    if file.status == FileStatus.DELETED:
        raise Gone(f"File {file.id} ({file.filename}) was deleted.", code="file_deleted", **_facts(file))
    if file.status != FileStatus.VERIFIED:
        raise Conflict(
            f"File {file.id} ({file.filename}) has not been verified yet.",
            code="file_not_verified",
            fileStatus=file.status,
            **_facts(file),
        )
    return view(
        file, blobs.presign_get(file.storage_key, filename=file.filename, content_type=file.mime_type)
    )


async def delete(session: AsyncSession, blobs: BlobStore, file: StoredFile) -> None:
    """Mark the file DELETED and remove its object once the transaction commits (a rolled-back delete
    leaves the bytes in place). Deleting a deleted file is a no-op."""
    won = (
        await session.execute(
            update(StoredFile)
            .where(StoredFile.id == file.id, StoredFile.status != FileStatus.DELETED)
            .values(status=FileStatus.DELETED)
            .returning(StoredFile.id)
            .execution_options(synchronize_session=False)
        )
    ).first()
    await reread(session, file)
    if won is None:
        return
    key = file.storage_key

    async def remove() -> None:
        await blobs.delete(key)

    if "uow" in session.info:
        after_commit(session, remove)
    else:  # a bare session (scripts, the worker): nothing to wait for
        await remove()
