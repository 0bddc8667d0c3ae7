"""Re-hashing stored files happens before the write transaction: a submit or publish busy hashing a large
file holds neither SQLite's write lock nor the job's row lock, so the job's other participants (and, on
SQLite, every other writer) are not kept waiting; and a file that changed state in between is still
checked by the write step."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from callboard_core.files.schemas import UploadRequest
from callboard_core.jobs import review
from callboard_core.jobs import service as jobs_service
from callboard_core.jobs.models import Job
from callboard_core.jobs.service import PublishPrep
from callboard_core.principals import Actor
from tests.jobs_helpers import (
    acknowledged,
    create_published,
    job_body,
    new_agent,
    new_owner,
    postgres_only,
    put_upload,
    sha,
    submit_body,
)

pytestmark = pytest.mark.db

# Longer than any write should take here, far shorter than SQLite's 30 s busy timeout: a write that waits
# for a lock held by the hashing request times out.
NOT_BLOCKED = 5.0
ONE_WRITER = "SQLite has one writer: the staging and the publish cannot overlap"


class Gate:
    """Holds the app's blob store's first `stat` (where every re-hash begins) until released. The store
    itself stays in place (the local store also serves the upload URLs)."""

    def __init__(self, store: Any, monkeypatch: Any) -> None:
        self.inner_stat = store.stat
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.gated = False
        monkeypatch.setattr(store, "stat", self.stat)

    @contextlib.asynccontextmanager
    async def holding(self, request: Coroutine[Any, Any, Any]) -> AsyncIterator[asyncio.Task[Any]]:
        """Start the request, wait until its re-hash is held, run the block, then let the request finish
        (also when the block fails: nothing is left hanging on the gate)."""
        task = asyncio.create_task(request)
        try:
            await asyncio.wait_for(self.entered.wait(), NOT_BLOCKED)
            yield task
        finally:
            self.release.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), NOT_BLOCKED)

    async def stat(self, key: str) -> int | None:
        if not self.gated:
            self.gated = True
            self.entered.set()
            await self.release.wait()
        return await self.inner_stat(key)


async def _two_acknowledged_workers(
    app: Any, core: Any, client: Any
) -> tuple[Any, dict[str, Any], list[tuple[Any, str]]]:
    requester = await new_agent(await new_owner(app, core))
    job = await create_published(requester, client, participantCap=2)
    workers = [await new_agent(await new_owner(app, core)) for _ in range(2)]
    slots = await acknowledged(client, job["id"], requester, workers)
    return requester, job, list(zip(workers, slots, strict=True))


async def _upload_ticket(client: Any, worker: Any, slot_id: str, data: bytes) -> dict[str, Any]:
    r = await client.post(
        f"/api/v2/participation-slots/{slot_id}/uploads",
        headers=worker.h,
        json={
            "filename": "work.md",
            "mimeType": "text/markdown",
            "sizeBytes": len(data),
            "sha256": sha(data),
        },
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_submit_hashes_before_it_locks_the_job(
    app: Any, core: Any, client: Any, monkeypatch: Any
) -> None:
    requester, job, [(hashing, slot_a), (other, slot_b)] = await _two_acknowledged_workers(app, core, client)
    data = b"# the work\n" * 1000
    ticket = await _upload_ticket(client, hashing, slot_a, data)
    await put_upload(client, ticket, data)
    store = Gate(core.blobs, monkeypatch)

    async with store.holding(
        client.post(
            f"/api/v2/participation-slots/{slot_a}/submit",
            headers=hashing.h,
            json=submit_body(files=[{"uploadId": ticket["uploadId"], "role": "DELIVERABLE"}]),
        )
    ) as submit:
        # While the submit hashes, the job's other worker withdraws: a write that locks the same job.
        withdrawn = await asyncio.wait_for(
            client.post(f"/api/v2/participation-slots/{slot_b}/withdraw", headers=other.h), NOT_BLOCKED
        )
        assert withdrawn.status_code == 200, withdrawn.text
    submitted = submit.result()
    assert submitted.status_code == 201, submitted.text
    status = (
        await client.get(f"/api/v2/submissions/{submitted.json()['id']}/status", headers=hashing.h)
    ).json()
    assert status["status"] == "SUBMITTED"
    # The only live slot submitted and the other withdrew: the job moved to review.
    view = (await client.get(f"/api/v2/jobs/{job['id']}", headers=requester.h)).json()
    assert view["job"]["status"] == "IN_REVIEW"


async def test_a_file_uploaded_while_submit_hashes_is_checked_by_the_write_step(
    app: Any, core: Any, client: Any, monkeypatch: Any
) -> None:
    """The pre-step found nothing stored yet; the PUT lands before the write step, which hashes it itself
    (a file the pre-step did not match is never taken on trust, nor refused on a stale answer)."""
    _, _, [(worker, slot_id), _] = await _two_acknowledged_workers(app, core, client)
    data = b"late bytes\n" * 100
    ticket = await _upload_ticket(client, worker, slot_id, data)
    store = Gate(core.blobs, monkeypatch)
    async with store.holding(
        client.post(
            f"/api/v2/participation-slots/{slot_id}/submit",
            headers=worker.h,
            json=submit_body(files=[{"uploadId": ticket["uploadId"], "role": "DELIVERABLE"}]),
        )
    ) as submit:
        await asyncio.wait_for(put_upload(client, ticket, data), NOT_BLOCKED)
    submitted = submit.result()
    assert submitted.status_code == 201, submitted.text


async def test_publish_hashes_before_it_locks_and_a_file_deleted_meanwhile_is_not_attached(
    app: Any, core: Any, client: Any, monkeypatch: Any
) -> None:
    requester = await new_agent(await new_owner(app, core))
    draft = (await client.post("/api/v2/jobs", headers=requester.h, json=job_body())).json()
    staged = []
    for name in ("keep.txt", "drop.txt"):
        data = f"input {name}\n".encode() * 200
        t = (
            await client.post(
                f"/api/v2/jobs/{draft['id']}/input-files",
                headers=requester.h,
                json={
                    "filename": name,
                    "mimeType": "text/plain",
                    "sizeBytes": len(data),
                    "sha256": sha(data),
                },
            )
        ).json()
        await put_upload(client, t, data)
        staged.append(t["fileId"])
    store = Gate(core.blobs, monkeypatch)

    async with store.holding(
        client.post(f"/api/v2/jobs/{draft['id']}/publish", headers=requester.h)
    ) as publish:
        # A write on the same draft goes through while publish hashes.
        deleted = await asyncio.wait_for(
            client.delete(f"/api/v2/jobs/{draft['id']}/input-files/{staged[1]}", headers=requester.h),
            NOT_BLOCKED,
        )
        assert deleted.status_code in (200, 204), deleted.text
    published = publish.result()
    assert published.status_code == 200, published.text
    assert published.json()["status"] == "ADMISSION_OPEN"
    files = (await client.get(f"/api/v2/jobs/{draft['id']}/input-files", headers=requester.h)).json()["files"]
    assert [f["id"] for f in files] == [staged[0]]


async def test_an_input_file_staged_while_a_publish_waits_for_the_draft_is_checked_by_it(
    app: Any, core: Any, client: Any
) -> None:
    """PostgreSQL: staging an input file locks the draft and counts the file on the draft's row. A publish
    that waits for that lock reads the row as it is once free (its statement's snapshot alone would not show
    the new file): it is refused for the file that was never uploaded, instead of publishing the job with
    the file left PENDING."""
    postgres_only(core, ONE_WRITER)
    requester = await new_agent(await new_owner(app, core))
    draft = (await client.post("/api/v2/jobs", headers=requester.h, json=job_body())).json()
    body = UploadRequest.model_validate(
        {"filename": "late.txt", "mimeType": "text/plain", "sizeBytes": 3, "sha256": sha(b"abc")}
    )
    async with core.uow() as uow:  # the staging request, held open before its commit
        ticket = await review.stage_input_file(
            uow.session, core.blobs, core.settings, Actor.agent(requester.id), draft["id"], body
        )
        publish = asyncio.create_task(client.post(f"/api/v2/jobs/{draft['id']}/publish", headers=requester.h))
        await asyncio.sleep(0.3)
        assert not publish.done(), "the publish did not wait for the draft staging a file"
    r = await asyncio.wait_for(publish, NOT_BLOCKED)
    assert r.status_code == 409 and r.json()["code"] == "file_missing", r.text
    assert [f["fileId"] for f in r.json()["files"]] == [ticket.file_id]
    job = (await client.get(f"/api/v2/jobs/{draft['id']}", headers=requester.h)).json()["job"]
    assert job["status"] == "DRAFT"


async def test_an_input_file_staged_while_its_draft_is_being_published_waits_and_is_refused(
    app: Any, core: Any, client: Any
) -> None:
    """PostgreSQL, the other order: a publish's write step held open before its commit. Staging a file on
    that draft waits for the draft's lock, then reads the job as published and is refused; no file is left
    on the published job."""
    postgres_only(core, ONE_WRITER)
    requester = await new_agent(await new_owner(app, core))
    draft = (await client.post("/api/v2/jobs", headers=requester.h, json=job_body())).json()
    path = f"/api/v2/jobs/{draft['id']}/input-files"
    body = {"filename": "late.txt", "mimeType": "text/plain", "sizeBytes": 3, "sha256": sha(b"abc")}
    async with core.uow() as uow:
        await jobs_service.publish(
            uow.session, core.blobs, core.settings, Actor.agent(requester.id), draft["id"], PublishPrep()
        )
        staging = asyncio.create_task(client.post(path, headers=requester.h, json=body))
        await asyncio.sleep(0.3)
        assert not staging.done(), "a file was staged on a draft being published"
    r = await asyncio.wait_for(staging, NOT_BLOCKED)
    assert r.status_code == 409 and r.json()["code"] == "invalid_state", r.text
    assert (await client.get(path, headers=requester.h)).json()["files"] == []


async def test_the_draft_counts_its_input_files_as_they_are_staged_and_removed(
    app: Any, core: Any, client: Any
) -> None:
    requester = await new_agent(await new_owner(app, core))
    draft = (await client.post("/api/v2/jobs", headers=requester.h, json=job_body())).json()
    staged = []
    for name in ("a.txt", "b.txt", "c.txt"):
        r = await client.post(
            f"/api/v2/jobs/{draft['id']}/input-files",
            headers=requester.h,
            json={"filename": name, "mimeType": "text/plain", "sizeBytes": 3, "sha256": sha(b"abc")},
        )
        assert r.status_code in (200, 201), r.text
        staged.append(r.json()["fileId"])
    for file_id in staged[:2]:
        r = await client.delete(f"/api/v2/jobs/{draft['id']}/input-files/{file_id}", headers=requester.h)
        assert r.status_code in (200, 204), r.text
    async with core.uow(write=False) as uow:
        job = await uow.session.get(Job, draft["id"])
        assert job is not None and job.input_file_count == 1
    # The one left is checked at publish (never uploaded: refused); removed too, the draft publishes.
    r = await client.post(f"/api/v2/jobs/{draft['id']}/publish", headers=requester.h)
    assert r.status_code == 409 and r.json()["code"] == "file_missing", r.text
    r = await client.delete(f"/api/v2/jobs/{draft['id']}/input-files/{staged[2]}", headers=requester.h)
    assert r.status_code in (200, 204), r.text
    r = await client.post(f"/api/v2/jobs/{draft['id']}/publish", headers=requester.h)
    assert r.status_code == 200 and r.json()["status"] == "ADMISSION_OPEN", r.text
