"""Guidance as data, rendered per front end (callboard_core/guidance.py): a hint-following agent that knows no
tool or route by name except home completes a starter job and a real free job (with a requester on the other
side) over the real `mcp` client and over plain httpx; nothing the MCP server says names an HTTP route."""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import mcp_types as types
import pytest
from mcp.client.client import Client

from callboard_core.guidance import HTTP_ONLY_ACTS, OWNER_ACTS, Act, Hint, Step, hint, rendering, step
from http_api.guidance import HTTP, ROUTES
from http_api.openapi import build_openapi
from http_api.routes import all_routes
from mcp_server.guidance import OWNER_REQUESTS, TOOLS, McpRenderer
from mcp_server.tools import GROUPS
from tests.conftest import register_agent
from tests.jobs_helpers import AgentHandle, job_body, new_agent, new_owner
from tests.mcp_helpers import http_client, serving
from tests.payments_helpers import save_card

FREE_TEXT = "Written by the hint-following agent."
ROUTE_IN_TEXT = re.compile(r"/api/|\b(GET|POST|PATCH|PUT|DELETE) /")

ROOT = Path(__file__).resolve().parent.parent


def fill(value: Any) -> Any:
    """The only thing the agent writes itself: the free text a step leaves empty."""
    if value == "":
        return FREE_TEXT
    if isinstance(value, dict):
        return {k: fill(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v) for v in value]
    return value


def next_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """A result's own nextAction, else the first listed item's (a listed job, a review packet)."""
    if result.get("nextAction"):
        return dict(result["nextAction"])
    for value in result.values():
        if isinstance(value, list) and value and isinstance(value[0], dict) and value[0].get("nextAction"):
            return dict(value[0]["nextAction"])
    return None


@dataclass
class Agent:
    """One agent's loop over one front end: `call(step)` performs a rendered step, `name(step)` says which."""

    home: Callable[[], Awaitable[dict[str, Any]]]
    call: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
    name: Callable[[dict[str, Any]], str]
    calls: list[str] = field(default_factory=list)

    async def turn(self, budget: int = 25) -> bool:
        """Follow home until it lists nothing, or only a suggestion already followed this turn that led
        nowhere (idle). True when the turn did something: an obligation, or a call a result led to."""
        followed: set[str] = set()
        acted = False
        for _ in range(budget):
            home = await self.home()
            self.calls.append("home")
            todo = home["obligations"] or home["readiness"]["nextSteps"]
            if not todo:
                return acted
            hint: dict[str, Any] | None = dict(todo[0])
            if home["obligations"]:
                acted = True
            else:
                key = json.dumps(hint, sort_keys=True)
                if key in followed:
                    return acted
                followed.add(key)
            while hint is not None:
                self.calls.append(self.name(hint))
                hint = next_of(await self.call(hint))
                acted = acted or hint is not None
        raise AssertionError(f"no rest after {budget} rounds: {self.calls}")


def mcp_agent(client: Client, said: list[str]) -> Agent:
    async def call_tool(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments)
        assert isinstance(result, types.CallToolResult)
        said.extend(c.text for c in result.content if isinstance(c, types.TextContent))
        assert not result.is_error, f"{tool}({arguments}) failed: {said[-1]}"
        assert result.structured_content is not None
        said.append(json.dumps(result.structured_content))
        return dict(result.structured_content)

    async def call(hint: dict[str, Any]) -> dict[str, Any]:
        assert hint["tool"], f"only the owner can do this: {hint}"
        return await call_tool(hint["tool"], fill(hint["arguments"]))

    return Agent(home=lambda: call_tool("home", {}), call=call, name=lambda hint: hint["tool"])


def http_agent(client: httpx.AsyncClient, key: str) -> Agent:
    headers = {"X-API-Key": key}

    async def call(hint: dict[str, Any]) -> dict[str, Any]:
        body = fill(hint.get("body"))
        r = await client.request(hint["method"], hint["path"], json=body, headers=headers)
        assert r.status_code < 300, f"{hint['method']} {hint['path']}: {r.status_code} {r.text}"
        return dict(r.json())

    async def home() -> dict[str, Any]:
        return await call({"method": "GET", "path": "/api/v2/home"})

    return Agent(home=home, call=call, name=lambda hint: f"{hint['method']} {hint['path']}")


async def _pair(app: Any, client: httpx.AsyncClient, core: Any) -> tuple[AgentHandle, AgentHandle]:
    """A worker, and an agent that only requests (so home suggests it no work of its own)."""
    worker = await new_agent(await new_owner(app, core))
    requester = await new_agent(await new_owner(app, core))
    r = await client.patch("/api/v2/agents/me", json={"intent": "REQUESTER"}, headers=requester.h)
    assert r.status_code == 200, r.text
    return worker, requester


async def _loop(
    worker: Agent, requester: Agent, create_job: Callable[[], Awaitable[dict[str, Any]]]
) -> tuple[list[str], list[str]]:
    """The starter job, then a real free job, the two agents taking turns until both rest."""
    await worker.turn()
    starter = list(worker.calls)
    await create_job()  # the other side's content: the requester's own words
    for _ in range(8):
        requester_acted = await requester.turn()
        if not await worker.turn() and not requester_acted:
            break
    return starter, worker.calls[len(starter) :]


async def test_a_hint_following_agent_completes_a_starter_and_a_free_job_over_mcp(
    app: Any, client: httpx.AsyncClient, core: Any
) -> None:
    worker_handle, requester_handle = await _pair(app, client, core)
    said: list[str] = []
    async with (
        serving(core) as url,
        http_client(url, worker_handle.key) as wc,
        http_client(url, requester_handle.key) as rc,
    ):
        said.append(wc.instructions or "")
        tools = (await wc.list_tools()).tools
        said.extend(
            f"{t.description} {json.dumps(t.input_schema)} {json.dumps(t.output_schema)}" for t in tools
        )
        worker, requester = mcp_agent(wc, said), mcp_agent(rc, said)

        async def create_job() -> dict[str, Any]:
            result = await rc.call_tool("create_job", {"job": job_body(title="Summarise the memo")})
            assert isinstance(result, types.CallToolResult) and not result.is_error
            return dict(result.structured_content or {})

        starter, job = await _loop(worker, requester, create_job)

    # The starter: home, start_starter_job, submit (awarded at once); then home finds nothing but work.
    assert starter[:3] == ["home", "start_starter_job", "submit"], starter
    assert len(starter[: starter.index("submit") + 1]) <= 4
    assert "apply" in job and "acknowledge_slot" in job and job.count("submit") == 1, job
    assert requester.calls.count("publish_job") == 1 and requester.calls.count("award") == 1, requester.calls
    assert "run_admission" in requester.calls and "review_packets" in requester.calls
    print(
        f"\nMCP calls: starter {len(starter)} {starter}\n worker {len(job)} {job}\n requester {requester.calls}"
    )
    outcome = await _outcomes(client, worker_handle)
    assert outcome == ["WON", "WON"], outcome  # the starter job and the real one, both awarded

    leaks = [text for text in said if ROUTE_IN_TEXT.search(text)]
    assert not leaks, leaks[:3]


async def test_the_same_loop_over_http_with_plain_httpx(
    app: Any, client: httpx.AsyncClient, core: Any
) -> None:
    worker_handle, requester_handle = await _pair(app, client, core)
    worker, requester = http_agent(client, worker_handle.key), http_agent(client, requester_handle.key)

    async def create_job() -> dict[str, Any]:
        r = await client.post(
            "/api/v2/jobs", json=job_body(title="Summarise the memo"), headers=requester_handle.h
        )
        assert r.status_code == 201, r.text
        return dict(r.json())

    starter, job = await _loop(worker, requester, create_job)
    assert starter[1:3] == ["POST /api/v2/agents/me/starter-job", starter[2]] and starter[2].endswith(
        "/submit"
    )
    assert any(c.endswith("/applications") for c in job) and any(c.endswith("/acknowledge") for c in job)
    assert any(c.endswith("/award") for c in requester.calls), requester.calls
    assert await _outcomes(client, worker_handle) == ["WON", "WON"]


async def _outcomes(client: httpx.AsyncClient, worker: AgentHandle) -> list[str]:
    r = await client.get("/api/v2/worker-agents/me/participation-slots", headers=worker.h)
    assert r.status_code == 200, r.text
    statuses = []
    for slot in r.json()["slots"]:
        s = await client.get(f"/api/v2/submissions/{slot['submissionId']}/status", headers=worker.h)
        statuses.append("WON" if s.json()["status"] == "AWARDED" else s.json()["status"])
    return statuses


# --- the renderers cover every action, and only with what the front end serves ---------------------------


def _args_for(template: str) -> dict[str, str]:
    return {name: f"x_{name}" for name in re.findall(r"\{(\w+)\}", template)}


def test_every_action_renders_to_a_route_the_app_serves() -> None:
    served = {(route.method, re.sub(r"\{\w+\}", "{}", route.path)) for route in all_routes()}
    assert set(ROUTES) == set(Act)
    for act, (method, template) in ROUTES.items():
        assert (method, re.sub(r"\{\w+\}", "{}", template)) in served, (act, method, template)


def test_every_action_renders_to_a_tool_and_arguments_its_input_schema_accepts() -> None:
    """Each action's arguments, from a step's targets and body, are exactly the tool's own parameters, and
    every one the tool requires is there (content the agent writes itself aside)."""
    declared = {tool.name: tool for group in GROUPS for tool in group.declared}
    renderer = McpRenderer(declared.values())
    assert set(TOOLS) | set(OWNER_REQUESTS) | HTTP_ONLY_ACTS == set(Act) and not set(TOOLS) & OWNER_ACTS
    assert not (set(TOOLS) | set(OWNER_REQUESTS)) & HTTP_ONLY_ACTS
    bodies: dict[Act, dict[str, Any]] = {
        Act.SUBMIT_WORK: {"artifactType": "text", "structuredPayloadJson": {"summary": ""}, "files": []},
        Act.RESPOND_INVITATION: {"decision": "ACCEPT"},
        Act.AWARD: {"submissionId": "sub_1"},
        Act.SETUP_LINK: {"kind": "CARD"},
        Act.UPDATE_PROFILE: {"capabilities": []},
    }
    own_content = {
        Act.UPLOAD_FILE,
        Act.CREATE_JOB,
        Act.NO_AWARD,
        Act.HEARTBEAT,
        Act.OPEN_DISPUTE,
    }  # prose only
    ids = {"job_id": "job_1", "slot_id": "slt_1", "invitation_id": "inv_1", "submission_id": "sub_1"}
    for act, (tool, _) in TOOLS.items():
        assert tool in declared, (act, tool)
        targets = ids | {"award_id": "awd_1"}
        rendered = renderer.render(Step(act=act, args=targets, body=bodies.get(act), description="x"))
        parameters = declared[tool].signature().parameters
        assert set(rendered["arguments"]) <= set(parameters), (act, rendered["arguments"])
        required = {n for n, p in parameters.items() if n != "ctx" and p.default is inspect.Parameter.empty}
        if act not in own_content:
            assert required <= set(rendered["arguments"]), (act, tool, required)


def test_no_core_string_names_a_route() -> None:
    """Every message the core writes names actions (`{ACT}` in a Hint or a Step), never an HTTP route: over
    MCP a route is no help. Docstrings (documentation, not messages) may name them."""
    pattern = re.compile(r"\b(GET|POST|PATCH|PUT|DELETE) /")
    found = []
    for path in (ROOT / "callboard_core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
            if id(node) not in docstrings and pattern.search(text):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]}")
    assert found == []


async def test_onboarding_hints_render_as_routes_over_http(app: Any, core: Any) -> None:
    """An owner-minted onboarding session's owner view: its nextActions are strings naming this app's routes."""
    owner = await new_owner(app, core)
    minted = await owner.client.post("/api/onboarding/mint", json=None)
    assert minted.status_code == 201, minted.text
    [listed] = (await owner.client.get("/api/onboarding/sessions")).json()["sessions"]
    session_id = listed["id"]
    got = await owner.client.get(f"/api/onboarding/sessions/{session_id}")
    actions = got.json()["nextActions"]
    assert all(isinstance(a, str) for a in actions)
    assert f"POST /api/onboarding/sessions/{session_id}/activate (your owner, signed in)" in actions
    assert not any("{" in a for a in actions)  # every placeholder rendered


def test_a_hint_is_a_string_in_each_front_end_and_in_the_schemas() -> None:
    h = hint("Poll {DRAFT_STATUS}; then {HOME}.", slug="rgd-x")
    assert h.model_dump(mode="json") == "Poll {DRAFT_STATUS}; then {HOME}."  # neutral
    with rendering(HTTP):
        assert (
            h.model_dump(mode="json") == "Poll GET /api/agent/register/rgd-x/status; then GET /api/v2/home."
        )
    assert Hint.model_validate("plain") == Hint(text="plain")


def test_a_step_is_neutral_without_a_renderer_and_reads_back() -> None:
    s = step(Act.ACKNOWLEDGE_SLOT, "Acknowledge, then {READ_JOB}.", slot_id="slt_1", job_id="job_1")
    neutral = s.model_dump(mode="json", by_alias=True)
    assert neutral == {
        "act": "ACKNOWLEDGE_SLOT",
        "args": {"slot_id": "slt_1", "job_id": "job_1"},
        "body": None,
        "description": "Acknowledge, then {READ_JOB}.",
    }
    assert Step.model_validate(neutral) == s
    with rendering(HTTP):
        http = s.model_dump(mode="json", by_alias=True)
    assert http == {
        "method": "POST",
        "path": "/api/v2/participation-slots/slt_1/acknowledge",
        "body": None,
        "description": "Acknowledge, then GET /api/v2/jobs/job_1.",
    }
    mcp = McpRenderer(tool for group in GROUPS for tool in group.declared)
    with rendering(mcp):
        over_mcp = s.model_dump(mode="json", by_alias=True)
    assert over_mcp == {
        "tool": "acknowledge_slot",
        "arguments": {"slot_id": "slt_1"},
        "description": "Acknowledge, then `get_job`.",
    }


# --- error hints name the call: a route over HTTP, a tool over MCP -----------------------------------------


async def test_error_hints_name_the_tool_over_mcp_and_the_route_over_http(
    app: Any, client: httpx.AsyncClient, core: Any
) -> None:
    requester = await new_agent(await new_owner(app, core))
    worker = await new_agent(await new_owner(app, core))
    r = await client.post("/api/v2/jobs", json=job_body(), headers=requester.h)
    job_id = r.json()["id"]
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=requester.h)).status_code == 200
    assert (await client.post(f"/api/v2/jobs/{job_id}/applications", headers=worker.h)).status_code == 201
    assert (await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=requester.h)).status_code == 200
    home = (await client.get("/api/v2/home", headers=worker.h)).json()
    [todo] = home["obligations"]
    slot_id = todo["slotId"]
    assert todo["method"] == "POST" and todo["path"].endswith(f"/{slot_id}/acknowledge")

    # Over HTTP: the input files of a slot not yet acknowledged.
    r = await client.get(f"/api/v2/participation-slots/{slot_id}/input-files", headers=worker.h)
    assert r.status_code == 409 and r.json()["code"] == "slot_not_acknowledged"
    assert r.json()["nextAction"]["path"] == f"/api/v2/participation-slots/{slot_id}/acknowledge"
    again = await client.post(f"/api/v2/jobs/{job_id}/applications", headers=worker.h)
    assert again.json()["code"] == "already_applied"
    assert again.json()["nextAction"] == {
        "method": "GET",
        "path": f"/api/v2/jobs/{job_id}",
        "body": None,
        "description": "Your application and slot on this job.",
    }

    async with serving(core) as url, http_client(url, worker.key) as wc:
        result = await wc.call_tool("slot_input_files", {"slot_id": slot_id})
        assert isinstance(result, types.CallToolResult) and result.is_error
        [content] = result.content
        assert isinstance(content, types.TextContent)
        body = json.loads(content.text)
        assert body["code"] == "slot_not_acknowledged"
        assert body["nextAction"] == {
            "tool": "acknowledge_slot",
            "arguments": {"slot_id": slot_id},
            "description": "Acknowledge your slot.",
        }
        assert not ROUTE_IN_TEXT.search(content.text)


async def test_payment_hints_over_mcp_name_tools_and_what_to_ask_the_owner(
    app: Any, client: httpx.AsyncClient, core: Any
) -> None:
    """A paid publish with no card: payment_not_ready over MCP names setup_link_create and what the owner
    does, never a route."""
    requester = await new_agent(await new_owner(app, core))
    async with serving(core) as url, http_client(url, requester.key) as rc:
        draft = await rc.call_tool("create_job", {"job": job_body(rewardAmountCents=5000)})
        assert isinstance(draft, types.CallToolResult) and not draft.is_error
        job_id = (draft.structured_content or {})["id"]
        refused = await rc.call_tool("publish_job", {"job_id": job_id})
        assert isinstance(refused, types.CallToolResult) and refused.is_error
        [content] = refused.content
        assert isinstance(content, types.TextContent)
        body = json.loads(content.text)
        assert body["code"] == "payment_not_ready" and body["nextAction"]["tool"] == "job_payment"
        fixes = [fix for requirement in body["requirements"] for fix in requirement["fixes"]]
        assert any(f["tool"] == "setup_link_create" and f["arguments"] == {"kind": "CARD"} for f in fixes)
        assert any(
            f["tool"] is None and f["description"].startswith("Ask your owner to add funds") for f in fixes
        )
        assert not ROUTE_IN_TEXT.search(content.text), content.text
        home = await rc.call_tool("home", {})
        assert isinstance(home, types.CallToolResult)
        [obligation] = (home.structured_content or {})["obligations"]
        # The first requirement is the owner's confirmation: the agent is told what to ask for.
        assert obligation["kind"] == "PAYMENT_REQUIRED" and obligation["tool"] is None
        assert obligation["description"].startswith("Ask your owner to confirm (and pay for) this job")
        assert "`setup_link_create`" in obligation["description"]
        assert not ROUTE_IN_TEXT.search(json.dumps(home.structured_content))


@pytest.mark.parametrize("renderer", ["http", "mcp"])
def test_the_documents_describe_steps_as_each_front_end_sends_them(renderer: str) -> None:
    if renderer == "http":
        document = build_openapi(all_routes(), base_url="http://test")
        step_schema = document["components"]["schemas"]["NextAction"]
        assert {"method", "path", "body", "description"} <= set(step_schema["properties"])
        assert "tool" not in step_schema["properties"]
    else:
        mcp = McpRenderer(tool for group in GROUPS for tool in group.declared)
        with rendering(mcp):
            schema = type(step(Act.HOME, "x")).model_json_schema(mode="serialization")
        assert {"tool", "arguments", "description"} <= set(schema["properties"])
        jsonschema.validate(
            {"tool": "home", "arguments": {}, "description": "x"}, schema
        )  # what the MCP server sends


async def test_an_unclaimed_agent_is_told_only_to_get_claimed(
    app: Any, client: httpx.AsyncClient, core: Any
) -> None:
    """Its key is read-only: home names the claim link tool and nothing it could not call; a write tool's
    refusal says the same."""
    registered = await register_agent(client, capabilities=[])
    async with serving(core) as url, http_client(url, registered["apiKey"]) as mcp:
        home = await mcp.call_tool("home", {})
        assert isinstance(home, types.CallToolResult) and not home.is_error
        steps = (home.structured_content or {})["readiness"]["nextSteps"]
        assert [s["tool"] for s in steps] == ["claim_link"] and steps[0]["arguments"] == {}
        link = await mcp.call_tool("claim_link", {})
        assert isinstance(link, types.CallToolResult) and not link.is_error
        assert (link.structured_content or {})["claimUrl"].startswith("http")  # a URL for the human: allowed
        refused = await mcp.call_tool("apply", {"job_id": "job_1"})
        assert isinstance(refused, types.CallToolResult) and refused.is_error
        [content] = refused.content
        assert isinstance(content, types.TextContent)
        body = json.loads(content.text)
        assert body["code"] == "insufficient_scope" and body["nextAction"]["tool"] == "claim_link"


async def test_billing_text_an_agent_reads_over_mcp_names_no_route(app: Any, core: Any) -> None:
    """The reason auto top-up was turned off is stored text shown to the owner and to their agents: after
    the default card is removed, `billing_balance` over MCP says what to do without naming a route."""
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    await save_card(core, owner)
    [card] = (await owner.client.get("/me/billing")).json()["paymentMethods"]
    removed = await owner.client.delete(f"/me/billing/payment-methods/{card['id']}")
    assert removed.status_code == 200, removed.text
    async with serving(core) as url, http_client(url, agent.key) as mcp:
        result = await mcp.call_tool("billing_balance", {})
        assert isinstance(result, types.CallToolResult) and not result.is_error
        balance = result.structured_content or {}
    assert balance["autoTopupEnabled"] is False
    assert "was removed" in balance["autoTopupDisabledReason"]
    assert not ROUTE_IN_TEXT.search(json.dumps(balance)), balance
