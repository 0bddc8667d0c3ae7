"""The local blob store end to end: service → signed PUT URL over the real app → verify → signed GET.

Real files under the test's var dir, real HTTP through the ASGI app (httpx), real tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from callboard_core import clock
from callboard_core.blobs.local import LocalBlobStore
from callboard_core.container import Core
from callboard_core.errors import Conflict, Gone, NotFound, ValidationFailed
from callboard_core.files import service as files
from callboard_core.files.models import FileKind, FileStatus, StoredFile
from callboard_core.files.schemas import UploadRequest
from http_api.app import create_app
from tests.conftest import BASE_URL, register_agent
from tests.jobs_helpers import seed_job_and_slot

JOB = "job_localblobs00000000001"
SLOT = "slt_localblobs00000000001"


@pytest.fixture(autouse=True)
async def job_and_slot(core: Core) -> None:
    """Files belong to a real job and slot (foreign keys)."""
    await seed_job_and_slot(core, JOB, SLOT)


def body_for(data: bytes, *, filename: str = "brief.txt", mime: str = "text/plain") -> UploadRequest:
    return UploadRequest(
        filename=filename, mime_type=mime, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )


async def request(core: Core, data: bytes, **kw: Any) -> tuple[str, str, dict[str, str], str]:
    """A job input file's upload ticket: (file id, PUT url, headers, storage key)."""
    async with core.uow() as uow:
        ticket = await files.request_upload(
            uow.session,
            core.blobs,
            core.settings,
            kind=FileKind.JOB_INPUT,
            job_id=JOB,
            body=body_for(data, **kw),
        )
        row = await files.get(uow.session, ticket.file_id)
        key = row.storage_key
    assert ticket.status == "PENDING" and ticket.upload_id == ticket.file_id
    assert ticket.target.method == "PUT" and ticket.target.url.startswith(BASE_URL + "/blobs/")
    return ticket.file_id, ticket.target.url, ticket.target.headers, key


async def load(core: Core, file_id: str) -> StoredFile:
    async with core.uow(write=False) as uow:
        return await files.get(uow.session, file_id, include_deleted=True)


async def verify(core: Core, file_id: str) -> None:
    async with core.uow() as uow:
        await files.verify(uow.session, core.blobs, await files.get(uow.session, file_id))


def store(core: Core) -> LocalBlobStore:
    assert isinstance(core.blobs, LocalBlobStore)
    return core.blobs


@pytest.fixture
def frozen(frozen_clock: clock.FrozenClock) -> clock.FrozenClock:
    return frozen_clock


async def test_round_trip_over_http(core, client):
    # Over the 1 MiB JSON body cap: the /blobs/ exception must let it through.
    data = os.urandom(1_500_000)
    reg = await register_agent(client)
    async with core.uow() as uow:
        ticket = await files.request_upload(
            uow.session,
            core.blobs,
            core.settings,
            kind=FileKind.SLOT_UPLOAD,
            job_id=JOB,
            slot_id=SLOT,
            agent_id=reg["agent"]["id"],
            body=body_for(data, filename="résumé final.pdf", mime="application/pdf"),
        )
    wire = ticket.model_dump(by_alias=True, mode="json")
    assert set(wire) >= {
        "fileId",
        "uploadId",
        "filename",
        "mimeType",
        "sizeBytes",
        "sha256",
        "status",
        "target",
    }
    assert set(wire["target"]) == {"url", "method", "headers", "expiresAt"}
    assert wire["target"]["headers"] == {"Content-Type": "application/pdf"}

    put = await client.put(ticket.target.url, content=data, headers=ticket.target.headers)
    assert put.status_code == 200, put.text
    assert put.json() == {"status": "stored", "sizeBytes": len(data), "sha256": ticket.sha256}
    # The same PUT again (a client retry) is harmless.
    again = await client.put(ticket.target.url, content=data, headers=ticket.target.headers)
    assert again.status_code == 200, again.text

    row = await load(core, ticket.file_id)
    assert row.status == FileStatus.PENDING and row.storage_key == f"slots/{SLOT}/{ticket.file_id}"
    assert row.uploader_agent_id == reg["agent"]["id"]
    await verify(core, ticket.file_id)
    row = await load(core, ticket.file_id)
    assert row.status == FileStatus.VERIFIED and row.verified_at is not None

    view = files.download(core.blobs, row)
    assert view.download_url and view.download_expires_at and view.status == "VERIFIED"
    got = await client.get(view.download_url)
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["content-type"] == "application/pdf"
    assert got.headers["content-disposition"] == (
        "attachment; filename=\"resume final.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20final.pdf"
    )
    assert got.headers["x-content-type-options"] == "nosniff"
    # No temporary files left behind.
    assert list((store(core).root / ".tmp").iterdir()) == []


async def test_download_links_are_fresh_on_every_read(core, client, frozen):
    data = b"fresh links"
    file_id, url, headers, _ = await request(core, data)
    assert (await client.put(url, content=data, headers=headers)).status_code == 200
    await verify(core, file_id)
    row = await load(core, file_id)
    first = files.download(core.blobs, row)
    frozen.advance(seconds=core.settings.download_url_ttl_seconds + 1)
    # The first link has expired; a new read mints one that works.
    expired = await client.get(first.download_url or "")
    assert expired.status_code == 403 and expired.json()["code"] == "blob_token_expired"
    second = files.download(core.blobs, row)
    assert second.download_url != first.download_url
    assert second.download_expires_at and first.download_expires_at
    assert second.download_expires_at > first.download_expires_at
    assert (await client.get(second.download_url or "")).content == data


async def test_expired_upload_token(core, client, frozen):
    data = b"too late"
    _, url, headers, key = await request(core, data)
    frozen.advance(seconds=core.settings.upload_url_ttl_seconds)
    response = await client.put(url, content=data, headers=headers)
    assert response.status_code == 403
    problem = response.json()
    assert problem["code"] == "blob_token_expired"
    assert response.headers["content-type"] == "application/problem+json"
    assert await core.blobs.stat(key) is None


async def test_tampered_and_misused_tokens(core, client):
    data = b"signed"
    file_id, url, headers, key = await request(core, data)
    token = url.rsplit("/", 1)[1]
    payload, sig = token.split(".")
    # Flip one character of the payload, and of the signature.
    flipped = payload[:-1] + ("A" if payload[-1] != "A" else "B")
    for bad in (
        f"{flipped}.{sig}",
        f"{payload}.{sig[:-1]}{'A' if sig[-1] != 'A' else 'B'}",
        "nonsense",
        "a.b.c",
        "",
    ):
        response = await client.put(f"/blobs/{bad}", content=data, headers=headers)
        assert response.status_code in (403, 404), (bad, response.text)
        if bad:
            assert response.json()["code"] == "blob_token_invalid"
    # Signed with another secret.
    other = LocalBlobStore(store(core).root, secret_key="another-secret", base_url=BASE_URL)
    forged = other.presign_put(
        key, size_bytes=len(data), sha256_hex=hashlib.sha256(data).hexdigest(), content_type="text/plain"
    )
    response = await client.put(forged.url, content=data, headers=headers)
    assert response.status_code == 403 and response.json()["code"] == "blob_token_invalid"
    # A PUT token does not read; a GET token does not write.
    assert (await client.put(url, content=data, headers=headers)).status_code == 200
    response = await client.get(url)
    assert response.status_code == 403 and response.json()["code"] == "blob_token_invalid"
    await verify(core, file_id)
    link = files.download(core.blobs, await load(core, file_id))
    response = await client.put(link.download_url or "", content=data, headers=headers)
    assert response.status_code == 403 and response.json()["code"] == "blob_token_invalid"


async def test_wrong_size_is_refused_and_not_kept(core, client):
    data = b"exactly these bytes"
    _, url, headers, key = await request(core, data)
    response = await client.put(url, content=data[:-1], headers=headers)
    assert response.status_code == 422 and response.json()["code"] == "upload_size_mismatch"
    assert response.json()["expected"] == len(data)
    assert await core.blobs.stat(key) is None


async def test_wrong_hash_is_refused_and_not_kept(core, client):
    data = b"the declared bytes"
    _, url, headers, key = await request(core, data)
    response = await client.put(url, content=b"X" * len(data), headers=headers)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["code"] == "upload_sha256_mismatch"
    assert problem["expected"] == hashlib.sha256(data).hexdigest()
    assert await core.blobs.stat(key) is None
    assert list((store(core).root / ".tmp").iterdir()) == []


async def _stream(total: int, chunk: int = 64 * 1024) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        piece = min(chunk, total - sent)
        sent += piece
        yield b"z" * piece


async def test_oversize_streamed_body(core, client):
    data = b"z" * 100_000
    _, url, headers, key = await request(core, data)
    # No Content-Length (chunked): the body is cut off once it passes the granted size.
    response = await client.put(url, content=_stream(len(data) + 200_000), headers=headers)
    assert response.status_code == 422 and response.json()["code"] == "upload_size_mismatch"
    assert await core.blobs.stat(key) is None
    assert list((store(core).root / ".tmp").iterdir()) == []
    # A declared Content-Length other than the granted size is refused before reading.
    response = await client.put(url, content=b"z" * (len(data) + 1), headers=headers)
    assert response.status_code == 422 and response.json()["code"] == "upload_size_mismatch"


async def test_upload_cap_applies_to_blob_puts(core):
    # A server whose upload cap is 64 KiB: a PUT over it is a 413 from the body limit, streamed or declared.
    small = dataclasses.replace(core, settings=core.settings.model_copy(update={"max_upload_bytes": 65_536}))
    app = create_app(core=small)
    big = b"q" * 100_000
    _, url, headers, _ = await request(core, big)  # granted by a server with the default cap
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as c:
        declared = await c.put(url, content=big, headers=headers)
        assert declared.status_code == 413 and declared.json()["code"] == "payload_too_large"
        streamed = await c.put(url, content=_stream(len(big)), headers=headers)
        assert streamed.status_code == 413 and streamed.json()["code"] == "payload_too_large"
        # JSON routes keep the global 1 MiB cap.
        json_route = await c.post(
            "/api/v2/agents/register",
            content=b"{" + b" " * 1_100_000 + b"}",
            headers={"Content-Type": "application/json"},
        )
        assert json_route.status_code == 413


async def test_verify_missing_object(core):
    _, _, _, _ = await request(core, b"never uploaded")
    file_id, *_ = await request(core, b"never uploaded either", filename="b.txt")
    with pytest.raises(Conflict) as caught:
        await verify(core, file_id)
    assert caught.value.code == "file_missing" and caught.value.details["fileId"] == file_id
    assert (await load(core, file_id)).status == FileStatus.PENDING


async def test_rehash_catches_a_file_changed_on_disk(core, client):
    data = b"original contents"
    file_id, url, headers, key = await request(core, data)
    assert (await client.put(url, content=data, headers=headers)).status_code == 200
    await verify(core, file_id)
    path = store(core).path_for(key)
    # Same size, other bytes: only the hash can tell.
    path.write_bytes(b"O" * len(data))
    with pytest.raises(Conflict) as caught:
        await verify(core, file_id)
    assert caught.value.code == "file_mismatch" and caught.value.details["fileId"] == file_id
    assert caught.value.details["storedSha256"] == hashlib.sha256(b"O" * len(data)).hexdigest()
    # Other size: refused on the size alone.
    path.write_bytes(data + b"!")
    with pytest.raises(Conflict) as caught:
        await verify(core, file_id)
    assert caught.value.code == "file_mismatch" and caught.value.details["storedSizeBytes"] == len(data) + 1


async def test_verify_all_names_every_failing_file(core, client):
    good, bad_missing, bad_changed = b"good", b"missing", b"changed"
    ids = []
    for data in (good, bad_missing, bad_changed):
        file_id, url, headers, key = await request(core, data, filename=f"{data.decode()}.txt")
        ids.append(file_id)
        if data is not bad_missing:
            assert (await client.put(url, content=data, headers=headers)).status_code == 200
        if data is bad_changed:
            store(core).path_for(key).write_bytes(b"CHANGED")
    async with core.uow() as uow:
        rows = [await files.get(uow.session, i) for i in ids]
        with pytest.raises(Conflict) as caught:
            await files.verify_all(uow.session, core.blobs, rows)
    assert caught.value.code == "file_missing"
    assert caught.value.details["files"] == [
        {"fileId": ids[1], "filename": "missing.txt", "code": "file_missing"},
        {"fileId": ids[2], "filename": "changed.txt", "code": "file_mismatch"},
    ]
    # All or nothing: the good file was not marked either.
    assert (await load(core, ids[0])).status == FileStatus.PENDING
    async with core.uow() as uow:
        await files.verify_all(uow.session, core.blobs, [await files.get(uow.session, ids[0])])
    assert (await load(core, ids[0])).status == FileStatus.VERIFIED


async def test_put_inline(core, client):
    data = b'{"inline": true}'
    file_id, *_ = await request(core, data, filename="payload.json", mime="application/json")
    async with core.uow() as uow:
        row = await files.get(uow.session, file_id)
        with pytest.raises(ValidationFailed) as caught:
            await files.put_inline(uow.session, core.blobs, row, data + b" ")
        assert caught.value.code == "upload_size_mismatch"
        with pytest.raises(ValidationFailed) as caught:
            await files.put_inline(uow.session, core.blobs, row, data.upper())
        assert caught.value.code == "upload_sha256_mismatch"
        assert await core.blobs.stat(row.storage_key) is None
        await files.put_inline(uow.session, core.blobs, row, data)
    row = await load(core, file_id)
    assert row.status == FileStatus.VERIFIED
    got = await client.get(files.download(core.blobs, row).download_url or "")
    assert got.content == data and got.headers["content-type"] == "application/json"


async def test_download_needs_a_verified_file(core):
    file_id, *_ = await request(core, b"pending")
    with pytest.raises(Conflict) as caught:
        files.download(core.blobs, await load(core, file_id))
    assert caught.value.code == "file_not_verified"


async def test_delete_removes_the_object_after_commit(core, client):
    data = b"to be deleted"
    file_id, url, headers, key = await request(core, data)
    assert (await client.put(url, content=data, headers=headers)).status_code == 200
    await verify(core, file_id)
    link = files.download(core.blobs, await load(core, file_id)).download_url or ""
    # A rolled-back delete leaves file and bytes alone.
    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            await files.delete(uow.session, core.blobs, await files.get(uow.session, file_id))
            raise RuntimeError("roll back")
    assert (await load(core, file_id)).status == FileStatus.VERIFIED and await core.blobs.stat(key) == len(
        data
    )
    async with core.uow() as uow:
        row = await files.get(uow.session, file_id)
        await files.delete(uow.session, core.blobs, row)
        await files.delete(uow.session, core.blobs, row)  # idempotent
    row = await load(core, file_id)
    assert row.status == FileStatus.DELETED and await core.blobs.stat(key) is None
    gone = await client.get(link)
    assert gone.status_code == 404 and gone.json()["code"] == "blob_not_found"
    with pytest.raises(Gone):
        files.download(core.blobs, row)
    async with core.uow() as uow:
        with pytest.raises(Gone):
            await files.verify(uow.session, core.blobs, row)
        with pytest.raises(NotFound):  # lookups leave deleted files out unless asked
            await files.get(uow.session, file_id)


async def test_upload_request_rules(core):
    sha = hashlib.sha256(b"x").hexdigest()
    cases = [
        (dict(filename="../etc/passwd"), "filename", "invalid_filename"),
        (dict(filename="a\\b.txt"), "filename", "invalid_filename"),
        (dict(filename="x" * 256), "filename", "invalid_filename"),
        (dict(filename="bad\nname"), "filename", "invalid_filename"),
        (dict(mime_type="text"), "mimeType", "invalid_mime_type"),
        (dict(mime_type="text/plain\r\nX-Evil: 1"), "mimeType", "invalid_mime_type"),
        (dict(size_bytes=0), "sizeBytes", "invalid_size"),
        (dict(size_bytes=core.settings.max_upload_bytes + 1), "sizeBytes", "file_too_large"),
        (dict(sha256=sha.upper()), "sha256", "invalid_sha256"),
        (dict(sha256=sha[:-1]), "sha256", "invalid_sha256"),
    ]
    for override, field, code in cases:
        values: dict[str, Any] = dict(
            filename="ok.txt", mime_type="text/plain; charset=utf-8", size_bytes=1, sha256=sha
        )
        values.update(override)
        async with core.uow() as uow:
            with pytest.raises(ValidationFailed) as caught:
                await files.request_upload(
                    uow.session,
                    core.blobs,
                    core.settings,
                    kind=FileKind.JOB_INPUT,
                    job_id=JOB,
                    body=UploadRequest(**values),
                )
        assert [(e["field"], e["code"]) for e in caught.value.errors] == [(field, code)], override
    # The wire names, required fields and unknown properties.
    with pytest.raises(Exception):  # noqa: B017 - pydantic's ValidationError
        UploadRequest.model_validate({"filename": "a", "mimeType": "text/plain", "sizeBytes": 1})
    parsed = UploadRequest.model_validate(
        {"filename": "a", "mimeType": "text/plain", "sizeBytes": 1, "sha256": sha}
    )
    assert parsed.size_bytes == 1


async def test_lists_and_lookups(core):
    a, *_ = await request(core, b"a", filename="a.txt")
    b, *_ = await request(core, b"b", filename="b.txt")
    async with core.uow() as uow:
        listed = [f.id for f in await files.list_for_job(uow.session, JOB)]
        assert listed[-2:] == [a, b]
        with pytest.raises(Exception) as caught:
            await files.get(uow.session, a, job_id="job_other0000000000000000")
        assert getattr(caught.value, "code", None) == "file_not_found"
        await files.delete(uow.session, core.blobs, await files.get(uow.session, a))
        assert a not in [f.id for f in await files.list_for_job(uow.session, JOB)]
