"""Files on the wire: the upload request, the upload ticket (presigned PUT target) and the file view."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, StrictInt

from callboard_core.schemas import ApiModel

FileKindName = Literal["JOB_INPUT", "SLOT_UPLOAD"]
FileStatusName = Literal["PENDING", "VERIFIED", "DELETED"]


class UploadRequest(ApiModel):
    """Upload request (requester input file or worker upload), all required. The rules (filename,
    MIME type, size limit, lowercase hex SHA-256) are checked by `files.service.request_upload`, which
    answers with stable per-field codes."""

    filename: str = Field(
        description="Name the file is downloaded under; no path separators, at most 255 characters."
    )
    mime_type: str = Field(description="MIME type, e.g. `application/pdf`; sent as Content-Type on the PUT.")
    size_bytes: StrictInt = Field(
        description="Exact size in bytes (at least 1, at most the configured maximum)."
    )
    sha256: str = Field(description="Lowercase hex SHA-256 of the contents, bound into the presigned PUT.")


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
