"""The S3 adapter (AWS S3 or any S3-compatible store) through boto3.

Presigned PUTs sign Content-Type, Content-Length and `x-amz-checksum-sha256`, so S3 itself refuses a
body of another size or hash. The service re-hashes anyway before it attaches a file: S3-compatible
stores (and moto, which the tests run against) do not all enforce checksums, and a bucket can be
written by other means. boto3 is blocking: every network call runs in a worker thread.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import timedelta
from typing import Any

import anyio
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from callboard_core import clock
from callboard_core.blobs.port import DownloadLink, UploadTarget, check_key, content_disposition
from callboard_core.config import Settings

_CHUNK = 1024 * 1024
_MISSING = {"404", "NoSuchKey", "NotFound"}


def checksum_b64(sha256_hex: str) -> str:
    """S3's checksum form: base64 of the raw digest (not of the hex string)."""
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


class S3BlobStore:
    backend = "s3"

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        upload_ttl_seconds: int = 900,
        download_ttl_seconds: int = 300,
    ) -> None:
        self.bucket = bucket
        self.upload_ttl_seconds = upload_ttl_seconds
        self.download_ttl_seconds = download_ttl_seconds
        # Path-style addressing for a custom endpoint (MinIO, moto, …), whose buckets are rarely DNS names.
        config = Config(
            signature_version="s3v4",
            max_pool_connections=32,
            s3={"addressing_style": "path" if endpoint_url else "auto"},
        )
        credentials: dict[str, Any] = {}
        if access_key_id and secret_access_key:
            credentials = {"aws_access_key_id": access_key_id, "aws_secret_access_key": secret_access_key}
        # A session of its own: boto3's default session is not thread-safe, its clients are.
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config, **credentials
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> S3BlobStore:
        assert settings.s3_bucket, "CALLBOARD_S3_BUCKET is required for the s3 backend"
        return cls(
            settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
            upload_ttl_seconds=settings.upload_url_ttl_seconds,
            download_ttl_seconds=settings.download_url_ttl_seconds,
        )

    def presign_put(
        self, key: str, *, size_bytes: int, sha256_hex: str, content_type: str, expires_in: int | None = None
    ) -> UploadTarget:
        ttl = self.upload_ttl_seconds if expires_in is None else expires_in
        checksum = checksum_b64(sha256_hex)
        url = self.client.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": check_key(key),
                "ContentType": content_type,
                "ContentLength": size_bytes,
                "ChecksumSHA256": checksum,
            },
            ExpiresIn=ttl,
            HttpMethod="PUT",
        )
        return UploadTarget(
            url=url,
            expires_at=clock.now() + timedelta(seconds=ttl),
            headers={"Content-Type": content_type, "x-amz-checksum-sha256": checksum},
        )

    def presign_get(
        self, key: str, *, filename: str, content_type: str, expires_in: int | None = None
    ) -> DownloadLink:
        ttl = self.download_ttl_seconds if expires_in is None else expires_in
        url = self.client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket,
                "Key": check_key(key),
                "ResponseContentType": content_type,
                "ResponseContentDisposition": content_disposition(filename),
            },
            ExpiresIn=ttl,
            HttpMethod="GET",
        )
        return DownloadLink(url=url, expires_at=clock.now() + timedelta(seconds=ttl))

    async def stat(self, key: str) -> int | None:
        def head() -> int | None:
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=check_key(key))
            except ClientError as exc:
                if _is_missing(exc):
                    return None
                raise
            return int(response["ContentLength"])

        return await anyio.to_thread.run_sync(head)

    async def sha256(self, key: str) -> str | None:
        def hash_object() -> str | None:
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=check_key(key))
            except ClientError as exc:
                if _is_missing(exc):
                    return None
                raise
            digest = hashlib.sha256()
            body = response["Body"]
            try:
                for block in body.iter_chunks(_CHUNK):
                    digest.update(block)
            finally:
                body.close()
            return digest.hexdigest()

        return await anyio.to_thread.run_sync(hash_object)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(
            lambda: self.client.delete_object(Bucket=self.bucket, Key=check_key(key))
        )

    async def put_bytes(self, key: str, data: bytes, content_type: str) -> None:
        checksum = checksum_b64(hashlib.sha256(data).hexdigest())
        await anyio.to_thread.run_sync(
            lambda: self.client.put_object(
                Bucket=self.bucket,
                Key=check_key(key),
                Body=data,
                ContentType=content_type,
                ChecksumSHA256=checksum,
            )
        )


def _is_missing(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(error.get("Code")) in _MISSING or status == 404
