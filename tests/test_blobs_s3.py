"""The S3 adapter against moto's server mode: a real HTTP S3 endpoint on 127.0.0.1, real presigned URLs,
real PUTs and GETs with httpx sending exactly the headers the upload target names.

moto checks neither SigV4 signatures nor `x-amz-checksum-sha256`, which is why the service re-hashes
every object itself; the last tests show that re-hash catching what moto let through.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import httpx
import pytest

from callboard_core.blobs import build_blob_store
from callboard_core.blobs.s3 import S3BlobStore
from callboard_core.container import Core
from callboard_core.errors import Conflict
from callboard_core.files import service as files
from callboard_core.files.models import FileKind, FileStatus
from callboard_core.files.schemas import UploadRequest
from http_api.app import create_app
from tests.conftest import BASE_URL, make_settings
from tests.jobs_helpers import seed_job_and_slot
from tests.netutil import free_port

BUCKET = "callboard-test"
JOB = "job_s3blobs000000000000001"
SLOT = "slt_s3blobs000000000000001"
CREDENTIALS = {"s3_access_key_id": "testing", "s3_secret_access_key": "testing"}


@pytest.fixture(autouse=True)
async def job_and_slot(core: Core) -> None:
    """Files belong to a real job and slot (foreign keys)."""
    await seed_job_and_slot(core, JOB, SLOT)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()


def s3_overrides(endpoint: str) -> dict[str, Any]:
    return dict(blob_backend="s3", s3_bucket=BUCKET, s3_endpoint_url=endpoint, **CREDENTIALS)


@pytest.fixture
def s3(core: Core, moto_endpoint: str, tmp_root: Path) -> S3BlobStore:
    store = build_blob_store(
        make_settings(core.settings.database_url, tmp_root, **s3_overrides(moto_endpoint))
    )
    assert isinstance(store, S3BlobStore)
    return store


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def body_for(data: bytes, *, filename: str = "data.csv", mime: str = "text/csv") -> UploadRequest:
    return UploadRequest(
        filename=filename, mime_type=mime, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )


async def ticket_for(core: Core, s3: S3BlobStore, data: bytes, **kw: Any) -> tuple[str, str, dict[str, str]]:
    async with core.uow() as uow:
        ticket = await files.request_upload(
            uow.session, s3, core.settings, kind=FileKind.JOB_INPUT, job_id=JOB, body=body_for(data, **kw)
        )
    return ticket.file_id, ticket.target.url, ticket.target.headers


async def verify(core: Core, s3: S3BlobStore, file_id: str) -> None:
    async with core.uow() as uow:
        await files.verify(uow.session, s3, await files.get(uow.session, file_id))


async def test_presigned_put_binds_size_type_and_checksum(core, s3, moto_endpoint):
    data = b"a,b\n1,2\n"
    file_id, url, headers = await ticket_for(core, s3, data)
    digest = hashlib.sha256(data).digest()
    assert headers == {"Content-Type": "text/csv", "x-amz-checksum-sha256": base64.b64encode(digest).decode()}
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == moto_endpoint
    assert parts.path == f"/{BUCKET}/jobs/{JOB}/inputs/{file_id}"
    query = parse_qs(parts.query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Expires"] == [str(core.settings.upload_url_ttl_seconds)]
    # Signed as headers (not hoisted into the query), so real S3 refuses any other size, type or hash.
    assert set(query["X-Amz-SignedHeaders"][0].split(";")) >= {
        "content-length",
        "content-type",
        "host",
        "x-amz-checksum-sha256",
    }


async def test_round_trip(core, s3, http):
    data = bytes(range(256)) * 5000  # 1.28 MB
    file_id, url, headers = await ticket_for(
        core, s3, data, filename="naïve data.bin", mime="application/octet-stream"
    )
    put = await http.put(url, content=data, headers=headers)
    assert put.status_code == 200, put.text
    assert await s3.stat(f"jobs/{JOB}/inputs/{file_id}") == len(data)
    await verify(core, s3, file_id)
    async with core.uow(write=False) as uow:
        row = await files.get(uow.session, file_id)
    assert row.status == FileStatus.VERIFIED

    view = files.download(s3, row)
    assert view.download_url and view.download_url.startswith(s3.client.meta.endpoint_url)
    got = await http.get(view.download_url)
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"] == (
        "attachment; filename=\"naive data.bin\"; filename*=UTF-8''na%C3%AFve%20data.bin"
    )

    async with core.uow() as uow:
        await files.delete(uow.session, s3, await files.get(uow.session, file_id))
    assert await s3.stat(row.storage_key) is None
    # S3 answers 403 or 404 for a missing key depending on the caller's ListBucket right.
    assert (await http.get(view.download_url)).status_code in (403, 404)


async def test_verify_missing_object(core, s3):
    file_id, _, _ = await ticket_for(core, s3, b"never sent")
    with pytest.raises(Conflict) as caught:
        await verify(core, s3, file_id)
    assert caught.value.code == "file_missing" and caught.value.details["fileId"] == file_id


async def test_rehash_catches_content_moto_let_through(core, s3, http):
    data = b"the real report"
    file_id, url, headers = await ticket_for(core, s3, data)
    assert (await http.put(url, content=data, headers=headers)).status_code == 200
    await verify(core, s3, file_id)
    # The same presigned URL and headers, other bytes of the same size: real S3 would refuse this (the
    # checksum header no longer matches the body); moto stores it.
    forged = b"X" * len(data)
    replaced = await http.put(url, content=forged, headers=headers)
    assert replaced.status_code == 200
    with pytest.raises(Conflict) as caught:
        await verify(core, s3, file_id)
    assert caught.value.code == "file_mismatch"
    assert caught.value.details["storedSha256"] == hashlib.sha256(forged).hexdigest()
    # Overwritten behind the service's back with another size: caught on the size alone.
    s3.client.put_object(Bucket=BUCKET, Key=f"jobs/{JOB}/inputs/{file_id}", Body=data + b" and more")
    with pytest.raises(Conflict) as caught:
        await verify(core, s3, file_id)
    assert caught.value.code == "file_mismatch" and caught.value.details["storedSizeBytes"] == len(data) + 9


async def test_put_inline(core, s3, http):
    data = b"small inline result"
    async with core.uow() as uow:
        ticket = await files.request_upload(
            uow.session,
            s3,
            core.settings,
            kind=FileKind.SLOT_UPLOAD,
            slot_id=SLOT,
            body=body_for(data, filename="r.txt", mime="text/plain"),
        )
        row = await files.get(uow.session, ticket.file_id)
        await files.put_inline(uow.session, s3, row, data)
    assert row.status == FileStatus.VERIFIED and row.storage_key == f"slots/{SLOT}/{row.id}"
    assert await s3.sha256(row.storage_key) == hashlib.sha256(data).hexdigest()
    got = await http.get(files.download(s3, row).download_url or "")
    assert got.content == data


async def test_local_blob_routes_answer_404_with_s3(core, moto_endpoint, tmp_root):
    settings = make_settings(core.settings.database_url, tmp_root, **s3_overrides(moto_endpoint))
    s3_core = Core.build(settings)
    try:
        app = create_app(core=s3_core)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as client:
            for method in ("GET", "PUT"):
                response = await client.request(
                    method, "/blobs/anything.at-all", content=b"x" if method == "PUT" else None
                )
                assert response.status_code == 404, response.text
                assert response.headers["content-type"] == "application/problem+json"
    finally:
        await s3_core.db.dispose()
        s3_core.read_cache.close()
