"""File storage: the BlobStore port and its adapters (see port.py)."""

from __future__ import annotations

from callboard_core.blobs.port import BlobStore, DownloadLink, UploadTarget, content_disposition
from callboard_core.config import Settings


def build_blob_store(settings: Settings) -> BlobStore:
    """The adapter `CALLBOARD_BLOB_BACKEND` names: `local` (default) or `s3`."""
    if settings.blob_backend == "s3":
        from callboard_core.blobs.s3 import S3BlobStore  # boto3 is imported only when used

        return S3BlobStore.from_settings(settings)
    from callboard_core.blobs.local import LocalBlobStore

    return LocalBlobStore.from_settings(settings)


__all__ = ["BlobStore", "DownloadLink", "UploadTarget", "build_blob_store", "content_disposition"]
