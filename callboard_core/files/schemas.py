"""Files on the wire: the upload request, the upload ticket (presigned PUT target) and the file view."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, StrictInt

from callboard_core.schemas import ApiModel

FileKindName = Literal["JOB_INPUT", "SLOT_UPLOAD"]
FileStatusName = Literal["PENDING", "VERIFIED", "DELETED"]


# The upload request's rules, checked by `files.service.request_upload` (which answers each with a code of
# its own: invalid_filename, invalid_mime_type, invalid_size, file_too_large, invalid_sha256) and stated in
# the document with the same patterns (written for both Python's and JSON Schema's regex dialects).
MAX_FILENAME = 255
MAX_MIME = 255
_NAME_CHAR = r"[^/\\\x00-\x1f\x7f]"
FILENAME_PATTERN = rf"^{_NAME_CHAR}*[^/\\\x00-\x1f\x7f .]{_NAME_CHAR}*$"  # not only dots and spaces
_TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
MIME_PATTERN = rf'^{_TOKEN}/{_TOKEN}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|"[^"\\\x00-\x1f\x7f]*"))*$'
SHA256_PATTERN = r"^[0-9a-f]{64}$"
MAX_UPLOAD_BYTES_KEY = "x-max-upload-bytes"  # openapi.build_openapi writes the configured maximum here


class UploadRequest(ApiModel):
    """Upload request (requester input file or worker upload), all required. The rules (filename,
    MIME type, size limit, lowercase hex SHA-256) are checked by `files.service.request_upload`, which
    answers with stable per-field codes."""

    filename: str = Field(
        description="Name the file is downloaded under; no path separators or control characters, not only "
        "dots and spaces, at most 255 characters.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_FILENAME, "pattern": FILENAME_PATTERN},
    )
    mime_type: str = Field(
        description="MIME type, e.g. `application/pdf`; sent as Content-Type on the PUT.",
        json_schema_extra={"minLength": 3, "maxLength": MAX_MIME, "pattern": MIME_PATTERN},
    )
    size_bytes: StrictInt = Field(
        description="Exact size in bytes (at least 1, at most the configured maximum).",
        json_schema_extra={"minimum": 1, MAX_UPLOAD_BYTES_KEY: True},
    )
    sha256: str = Field(
        description="Lowercase hex SHA-256 of the contents, bound into the presigned PUT.",
        json_schema_extra={"pattern": SHA256_PATTERN},
    )


class UploadTargetView(ApiModel):
    """The presigned PUT: send the file's bytes as the body with exactly these headers before `expiresAt`."""

    url: str
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str]
    expires_at: datetime


class UploadTicket(ApiModel):
    file_id: str
    upload_id: str = Field(
        description="The same id as `fileId`: the value a submission's `files[].uploadId` names."
    )
    kind: FileKindName
    filename: str
    mime_type: str
    size_bytes: int
    sha256: str
    status: FileStatusName
    created_at: datetime
    target: UploadTargetView


class FileView(ApiModel):
    file_id: str
    upload_id: str
    kind: FileKindName
    filename: str
    mime_type: str
    size_bytes: int
    sha256: str
    status: FileStatusName
    created_at: datetime
    verified_at: datetime | None
    download_url: str | None = Field(default=None, description="A fresh short-lived link on every read.")
    download_expires_at: datetime | None = None
