"""The MCP server with the real `mcp` client: over streamable HTTP and SSE (the app served by uvicorn) and over
stdio (a `callboard mcp` subprocess), on the real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.jobs_helpers import job_body, new_agent, new_owner, payload
from tests.mcp_helpers import (
    call,
    call_error,
    http_client,
    on_database_env,
    serving,
    sse_mcp_client,
    stdio_client,
)


@pytest.mark.parametrize("transport", ["streamable-http", pytest.param("stdio", marks=pytest.mark.slow)])
async def test_worker_from_home_to_award_and_requester_from_create_to_award(
    app: Any, core: Any, transport: str
) -> None:
    """Over streamable HTTP, and over stdio (two `callboard mcp` subprocesses bridging to the service)."""
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))

    def client(url: str, key: str) -> Any:
        if transport == "stdio":
            return stdio_client({"CALLBOARD_URL": url, "CALLBOARD_API_KEY": key})
        return http_client(url, key)

    async with serving(core) as url, client(url, requester.key) as req, client(url, worker.key) as wrk:
        tools = {t.name: t for t in (await wrk.list_tools()).tools}
        assert {
            "home",
            "list_jobs",
            "apply",
            "acknowledge_slot",
            "upload_file_inline",
            "submit",
            "create_job",
            "publish_job",
            "review_packets",
            "award",
            "no_award",
        } <= set(tools)
        assert tools["home"].output_schema is not None and "next call" in (tools["home"].description or "")

        # The requester posts a job over MCP.
        draft = await call(req, "create_job", job=job_body(title="Summarise the memo"))
        assert draft["status"] == "DRAFT"
        published = await call(req, "publish_job", job_id=draft["id"])
        assert published["status"] == "ADMISSION_OPEN"

        # The worker starts from home, finds it, applies.
        home = await call(wrk, "home")
        assert home["agentId"] == worker.id and home["obligations"] == []
        found = await call(wrk, "list_jobs")
        assert [j["id"] for j in found["jobs"]] == [draft["id"]]
        preview = await call(wrk, "get_job", job_id=draft["id"])
        assert preview["briefUnlocked"] is False and "workBriefJson" not in preview["job"]
        application = await call(wrk, "apply", job_id=draft["id"])
        assert application["status"] == "PENDING"

        # Admission; the worker's home now says exactly what to do.
        assert (await call(req, "run_admission", job_id=draft["id"]))["status"] == "IN_PROGRESS"
        home = await call(wrk, "home")
        [todo] = home["obligations"]
        assert todo["kind"] == "ACKNOWLEDGE_SLOT" and todo["deadlineAt"]
        slot = await call(wrk, "acknowledge_slot", slot_id=todo["slotId"])
        assert slot["status"] == "ACKNOWLEDGED"
        brief = await call(wrk, "get_job", job_id=draft["id"])
        assert brief["briefUnlocked"] is True and brief["job"]["workBriefJson"] == {"secret": "the brief"}

        # A deliverable sent inline, then the submission.
        data = b"The memo, in two paragraphs."
        file = await call(
            wrk,
            "upload_file_inline",
            slot_id=todo["slotId"],
            filename="summary.txt",
            mime_type="text/plain",
            content_base64=base64.b64encode(data).decode(),
        )
        assert file["status"] == "VERIFIED" and file["sha256"] == hashlib.sha256(data).hexdigest()
        submission = await call(
            wrk,
            "submit",
            slot_id=todo["slotId"],
            submission={
                "artifactType": "text",
                "structuredPayloadJson": payload(),
                "files": [{"uploadId": file["uploadId"], "role": "DELIVERABLE"}],
            },
        )
        assert submission["jobStatus"] == "IN_REVIEW"

        # The requester reviews and awards; the worker sees the outcome.
        packets = await call(req, "review_packets", job_id=draft["id"])
        assert [p["submissionId"] for p in packets["packets"]] == [submission["id"]]
        awarded = await call(req, "award", job_id=draft["id"], submission_id=submission["id"])
        assert awarded["award"]["submissionId"] == submission["id"]
        artifact = await call(req, "released_artifact", award_id=awarded["award"]["id"])
        assert artifact["structuredPayloadJson"]["answer"] == "The full answer."
        assert (await call(wrk, "submission_status", submission_id=submission["id"]))["status"] == "AWARDED"
        unread = await call(wrk, "notifications")
        assert unread["notifications"], "job events that concern the worker notify it"


async def test_domain_errors_are_tool_errors_with_the_http_code(app: Any, core: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    async with (
        serving(core) as url,
        http_client(url, requester.key) as req,
        http_client(url, worker.key) as wrk,
    ):
        job = await call(req, "create_job", job=job_body())
        await call(req, "publish_job", job_id=job["id"])
        await call(wrk, "apply", job_id=job["id"])
        again = await call_error(wrk, "apply", job_id=job["id"])
        assert again["code"] == "already_applied" and again["message"] and again["requestId"]
        missing = await call_error(wrk, "get_job", job_id="job_doesnotexist")
        assert missing["code"] == "job_not_found"
        invalid = await call_error(req, "create_job", job=job_body(participantCap=0))
        assert invalid["code"] == "validation_failed" and invalid["errors"]
        not_theirs = await call_error(wrk, "review_packets", job_id=job["id"])  # another owner's job: hidden
        assert not_theirs["code"] == "job_not_found"


async def test_an_unknown_tool_or_argument_is_an_error_with_a_code(app: Any, core: Any) -> None:
    """Not the SDK's plain "Unknown tool" text, and not a silently dropped argument: the JSON error body of
    every other tool error, naming what to do."""
    agent = await new_agent(await new_owner(app, core))
    async with serving(core) as url, http_client(url, agent.key) as mcp:
        unknown = await call_error(mcp, "list_bounties")
        assert unknown["code"] == "unknown_tool" and "home" in unknown["message"] and unknown["requestId"]
        extra = await call_error(mcp, "list_jobs", limit=5, sort="newest")
        assert extra["code"] == "validation_failed"
        assert extra["errors"] == [
            {"field": "sort", "in": "arguments", "code": "unexpected_argument", "message": "not an argument"}
        ]
        assert (await call(mcp, "list_jobs", limit=5))["jobs"] == []


async def test_no_key_bad_key_or_revoked_key_is_401_before_any_tool(app: Any, core: Any, client: Any) -> None:
    worker = await new_agent(await new_owner(app, core))
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with serving(core) as url, httpx.AsyncClient(base_url=url) as raw:
        for headers, code in (
            ({}, "missing_api_key"),
            ({"X-API-Key": "cb_not_a_key"}, "invalid_api_key"),
            ({"Authorization": "Bearer nope"}, "invalid_api_key"),
        ):
            for path in ("/mcp", "/sse", "/messages/?session_id=x"):
                method = "GET" if path == "/sse" else "POST"
                r = await raw.request(
                    method, path, json=hello if method == "POST" else None, headers={**accept, **headers}
                )
                assert r.status_code == 401 and r.json()["code"] == code, (path, headers, r.text)
        # A bearer token works as well as the header.
        async with http_client(url, worker.key, bearer=True) as wrk:
            assert (await call(wrk, "whoami"))["id"] == worker.id
            revoked = await client.post("/api/v2/agents/me/rotate-key", headers=worker.h)
            assert revoked.status_code == 200, revoked.text
            # The key is checked on every request of an open session: revoked now, the call is refused.
            with pytest.raises(MCPError):
                await wrk.call_tool("whoami", {})
        r = await raw.post("/mcp", json=hello, headers={**accept, "X-API-Key": worker.key})
        assert r.status_code == 401 and r.json()["code"] == "invalid_api_key"


async def test_read_only_key_cannot_use_a_write_tool(app: Any, core: Any, client: Any) -> None:
    registered = await client.post(
        "/api/v2/agents/register", json={"name": "Unclaimed", "endpointUrl": "https://agent.example.com"}
    )
    key = registered.json()["apiKey"]  # a provisional agent's key is read-only until an owner claims it
    async with serving(core) as url, http_client(url, key) as agent:
        assert (await call(agent, "home"))["readiness"]["claimed"] is False
        refused = await call_error(agent, "start_starter_job")
        assert refused["code"] == "insufficient_scope" and refused["required"] == "write"


async def test_a_retried_action_with_an_idempotency_key_runs_once(app: Any, core: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    async with serving(core) as url, http_client(url, requester.key) as req:
        body = job_body(title="Once")
        first = await call(req, "create_job", job=body, idempotency_key="create-once-1")
        second = await call(req, "create_job", job=body, idempotency_key="create-once-1")
        assert second["id"] == first["id"]
        reused = await call_error(
            req, "create_job", job=job_body(title="Other"), idempotency_key="create-once-1"
        )
        assert reused["code"] == "idempotency_key_reused"


async def test_resources_and_prompt(app: Any, core: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    async with serving(core) as url, http_client(url, requester.key) as req:
        templates = {t.uri_template for t in (await req.list_resource_templates()).resource_templates}
        assert {"callboard://agents/{agent_id}/home", "callboard://jobs/{job_id}/brief"} <= templates
        home = await req.read_resource("callboard://agents/me/home")
        assert '"agentId"' in home.contents[0].text  # type: ignore[union-attr]
        types_ = await req.read_resource("callboard://job-types")
        assert '"general"' in types_.contents[0].text  # type: ignore[union-attr]
        prompt = await req.get_prompt("work_next_job")
        assert "acknowledge_slot" in prompt.messages[0].content.text  # type: ignore[union-attr]


async def test_sse_transport(app: Any, core: Any) -> None:
    worker = await new_agent(await new_owner(app, core))
    async with serving(core) as url, sse_mcp_client(url, worker.key) as wrk:
        assert (await call(wrk, "home"))["agentId"] == worker.id


@pytest.mark.slow  # spawns `callboard mcp`
async def test_stdio_bridges_to_the_remote_service(app: Any, core: Any) -> None:
    requester = await new_agent(await new_owner(app, core))
    async with (
        serving(core) as url,
        stdio_client({"CALLBOARD_URL": url, "CALLBOARD_API_KEY": requester.key}) as req,
    ):
        assert (await call(req, "whoami"))["id"] == requester.id
        job = await call(req, "create_job", job=job_body())
        assert (await call(req, "publish_job", job_id=job["id"]))["status"] == "ADMISSION_OPEN"
        assert (await call_error(req, "publish_job", job_id=job["id"]))["code"] == "invalid_state"


@pytest.mark.slow  # spawns `callboard mcp`
async def test_stdio_in_process_on_the_database(app: Any, core: Any) -> None:
    worker = await new_agent(await new_owner(app, core))
    env = on_database_env(core, worker.key)
    async with stdio_client(env) as wrk:
        assert (await call(wrk, "home"))["agentId"] == worker.id
    async with stdio_client({**env, "CALLBOARD_API_KEY": "cb_wrong"}) as wrong:
        assert (await call_error(wrong, "home"))["code"] == "invalid_api_key"
