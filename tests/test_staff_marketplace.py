"""The console's marketplace figures through the real app on SQLite and PostgreSQL: the first cycle moves
as an account goes through it, liquidity keeps house activity apart, and the job moderation queue names
new requesters' open jobs with why."""

from __future__ import annotations

from typing import Any

from callboard_core.container import Core
from callboard_core.security.permissions import Role
from tests.conftest import owner_client
from tests.jobs_helpers import create_published, new_agent, new_owner, to_review


async def test_first_cycle_and_liquidity_follow_one_job(app: Any, core: Core, client: Any) -> None:
    support, _ = await owner_client(app, core, role=Role.SUPPORT)
    admin, _ = await owner_client(app, core, role=Role.ADMIN)
    async with support, admin:
        before = (await support.get("/admin/analytics/first-cycle")).json()
        liquid_before = (await admin.get("/admin/analytics/liquidity")).json()
        requester_owner, worker_owner = await new_owner(app, core), await new_owner(app, core)
        requester, worker = await new_agent(requester_owner), await new_agent(worker_owner)
        job = await create_published(requester, client)
        moderated = (await admin.get("/api/v2/admin/jobs/moderation-queue")).json()["jobs"]
        [entry] = [j for j in moderated if j["id"] == job["id"]]
        assert "FIRST_JOBS_OF_OWNER" in entry["why"] and entry["requesterAgentId"] == requester.id
        legacy = (await admin.get("/api/v2/admin/bounties/moderation-queue")).json()["jobs"]
        assert job["id"] in [j["id"] for j in legacy]
        submission = await to_review(client, job["id"], requester, worker)
        awarded = await client.post(
            f"/api/v2/jobs/{job['id']}/award", json={"submissionId": submission}, headers=requester.h
        )
        assert awarded.status_code == 200, awarded.text
        after = (await support.get("/admin/analytics/first-cycle")).json()
        assert after["signedUp"] - before["signedUp"] == 2
        assert after["withAgent"] - before["withAgent"] == 2
        assert after["publishedFirstJob"] - before["publishedFirstJob"] == 1
        assert after["gaveFirstAward"] - before["gaveFirstAward"] == 1
        assert after["wonFirstAward"] - before["wonFirstAward"] == 1
        liquid = (await admin.get("/admin/analytics/liquidity")).json()
        organic, was = liquid["organic"], liquid_before["organic"]
        assert organic["jobsPublished"] - was["jobsPublished"] == 1
        assert (
            organic["awarded"] - was["awarded"] == 1
            and organic["withApplications"] - was["withApplications"] == 1
        )
        assert 0 < organic["awardRate"] <= 1 and organic["applicationsPerJob"] >= 1
        # A house requester's jobs count apart.
        await admin.patch(f"/admin/agents/{requester.id}/house", json={"isHouse": True})
        moved = (await admin.get("/admin/analytics/liquidity")).json()
        assert moved["house"]["jobsPublished"] - liquid["house"]["jobsPublished"] == 1
        assert moved["organic"]["jobsPublished"] == liquid["organic"]["jobsPublished"] - 1
        assert (await support.get("/admin/analytics/liquidity")).status_code == 403
        assert (await support.get("/api/v2/admin/jobs/moderation-queue")).status_code == 403
