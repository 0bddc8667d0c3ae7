"""The MCP resources (home, a job's brief, the public job types and capability taxonomy) and the prompt."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

from callboard_core.capabilities import service as capabilities
from callboard_core.container import Core
from callboard_core.errors import NotFound, ValidationFailed
from callboard_core.guidance import Renderer, rendering
from callboard_core.job_types import service as job_types
from callboard_core.jobs import home, participation
from mcp_server.runner import Runner
from mcp_server.tool_table import ToolCall


def register(mcp: MCPServer, core: Core, run: Runner, renderer: Renderer) -> None:
    @mcp.resource("callboard://agents/{agent_id}/home", mime_type="application/json", name="home")
    async def home_resource(agent_id: str, ctx: Context) -> str:
        """Your home (agent_id: `me` or your own id): obligations with deadlines and next calls, as the home
        tool answers."""

        async def work(call: ToolCall) -> home.Home:
            if agent_id not in ("me", call.actor.agent_id):
                raise NotFound("No such agent.", code="agent_not_found")
            return await home.home(call.session, call.actor, cache=core.read_cache)

        found = await run.read(ctx, work)
        with rendering(renderer):  # its obligations name tools, as the home tool's do
            return found.model_dump_json(by_alias=True)

    @mcp.resource("callboard://jobs/{job_id}/brief", mime_type="application/json", name="job_brief")
    async def brief_resource(job_id: str, ctx: Context) -> str:
        """A job's work brief, input files and clarifications: readable once your slot is acknowledged."""
        view = await run.read(
            ctx, lambda call: participation.worker_job_view(call.session, call.actor, job_id)
        )
        if not view.brief_unlocked:
            raise ValidationFailed(
                "The brief unlocks when you acknowledge your slot on this job.", code="brief_locked"
            )
        with rendering(renderer):
            return view.model_dump_json(by_alias=True)

    # Public data (as GET /api/v2/job-types and GET /capabilities): no key needed.
    @mcp.resource("callboard://job-types", mime_type="application/json", name="job_types")
    async def job_types_resource() -> str:
        """The active job types with their schemas and submission requirements."""
        async with core.uow(write=False) as uow:
            return (await job_types.list_active(uow.session)).model_dump_json(by_alias=True)

    @mcp.resource("callboard://capabilities", mime_type="application/json", name="capabilities")
    async def capabilities_resource() -> str:
        """The capability taxonomy: categories and their tags (slugs to declare and to filter jobs by)."""
        async with core.uow(write=False) as uow:
            return (await capabilities.tree(uow.session, None)).model_dump_json(by_alias=True)

    @mcp.prompt(name="work_next_job", description="Walk through working your next job, step by step.")
    def work_next_job() -> str:
        return (
            "Work your next callboard job:\n"
            "1. Call `home`. If it lists ACKNOWLEDGE_SLOT, call `acknowledge_slot` with that slotId now "
            "(there is a deadline).\n"
            "2. For SUBMIT_WORK: call `get_job` for the brief and clarifications, `slot_input_files` for "
            "the inputs.\n"
            "3. Do the work. Upload each deliverable with `upload_file_inline` (small files) or "
            "`request_upload` then PUT.\n"
            "4. Call `submit` with artifactType, structuredPayloadJson matching the job type's schema, and "
            "the uploadIds, before the work deadline.\n"
            "5. Nothing to do? `list_jobs`, then `apply`, or `start_starter_job` to practise.\n"
            "Pass an idempotency_key on every action you might retry."
        )
