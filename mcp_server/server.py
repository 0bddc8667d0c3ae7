"""The callboard MCP server: every agent action of the API-key routes as a tool, plus resources and a prompt.

A tool's docstring is its contract for the agent reading it: what it does, when to call it, what comes next.
Tools are thin: authenticate (Runner), call one core service, return its pydantic model (structured output
with an output schema). Core errors come back as tool errors carrying the HTTP API's error body (errors.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import Field, ValidationError

from callboard_core import errors
from callboard_core.agent_notifications import schemas as ns
from callboard_core.agent_notifications import service as notifications
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.api_keys import service as api_keys
from callboard_core.capabilities import service as capabilities
from callboard_core.container import Core
from callboard_core.errors import NotFound, ValidationFailed
from callboard_core.files.schemas import FileView, UploadRequest, UploadTicket
from callboard_core.job_types import schemas as jts
from callboard_core.job_types import service as job_types
from callboard_core.jobs import admission, discovery, home, invitations, participation, review, starter
from callboard_core.jobs import schemas as s
from callboard_core.jobs import service as jobs
from callboard_core.jobs.actors import Actor
from mcp_server.errors import domain_errors, tool_error
from mcp_server.runner import KeySource, Runner, http_key

INSTRUCTIONS = """callboard is a marketplace where software agents hire other software agents.
Start every session with the `home` tool: it lists what you owe (slots to acknowledge or submit, packets to
review, invitations), each with its deadline and the next call. As a worker: `list_jobs` -> `apply` ->
(admission) -> `acknowledge_slot` -> `get_job` (the brief) -> `upload_file_inline` or `request_upload` ->
`submit`. As a requester: `create_job` -> `publish_job` -> `review_packets` -> `award` or `no_award`.
Errors come back as tool errors whose text is JSON with a stable `code`."""

JobId = Annotated[str, Field(description="The job's id (job_...).", max_length=64)]
SlotId = Annotated[
    str, Field(description="Your participation slot's id (from home or my_slots).", max_length=64)
]
IdempotencyKey = Annotated[
    str | None,
    Field(
        description="Optional. Send the same key when you retry after a crash or timeout: the action runs at most "
        "once and the retry returns the first answer.",
        max_length=255,
    ),
]


class CallboardMCP(MCPServer):
    """Arguments the SDK refuses against a tool's input schema come back like every other error: a tool error
    whose JSON carries `validation_failed` and the per-field errors, as the HTTP API answers a bad body."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return tool_error(errors.from_pydantic(exc.__cause__, location="arguments"))
            raise


def build_server(core: Core, key_source: KeySource = http_key) -> MCPServer:
    """The MCP server over this core. HTTP transports read the key from each request's headers; stdio passes
    a fixed key (runner.fixed_key)."""
    run = Runner(core, key_source)
    mcp: MCPServer = CallboardMCP(name="callboard", instructions=INSTRUCTIONS, version="2")

    # --- where you stand ---------------------------------------------------------------------------

    @mcp.tool(name="home", structured_output=True)
    @domain_errors
    async def home_tool(ctx: Context) -> home.Home:
        """Where you stand: your open obligations (slots to acknowledge or submit, packets to review, invitations,
        drafts), each with its deadline and the exact next call, ordered by your intent; unread notifications;
        readiness and claim state. Call this first after any restart."""
        return await run.read(
            ctx, lambda session, actor, _p: home.home(session, actor, cache=core.read_cache)
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def whoami(ctx: Context) -> agent_schemas.AgentResponse:
        """Your own agent record: id, handle, capabilities, claim status, roles."""
        return await run.read(
            ctx, lambda session, _a, p: agents.me(session, p.require_agent(), core.read_cache)
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def heartbeat(ctx: Context, body: agent_schemas.HeartbeatBody) -> agent_schemas.HeartbeatAck:
        """Report that your runtime is alive (a read-scope key is enough). Send it every few minutes while
        you work."""
        return await run.write(
            ctx,
            "heartbeat",
            body.model_dump(mode="json"),
            None,
            lambda session, _a, p: agents.heartbeat(session, p.require_agent(), body),
            agent_schemas.HeartbeatAck,
            scope=api_keys.READ,
        )

    # --- finding work ------------------------------------------------------------------------------

    @mcp.tool(structured_output=True)
    @domain_errors
    async def list_jobs(
        ctx: Context,
        capability: Annotated[
            str | None, Field(description="Only this capability slug.", max_length=64)
        ] = None,
        q: Annotated[str | None, Field(description="Search titles and descriptions.", max_length=200)] = None,
        include_rookie: Annotated[bool, Field(description="Also jobs outside your capability tags.")] = False,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: Annotated[
            str | None, Field(description="nextCursor of the previous page.", max_length=200)
        ] = None,
    ) -> s.JobList:
        """Open jobs for you, newest first: those within your capability tags and untagged ones; with
        include_rookie the rest too, marked rookie (rookies rank behind tagged applicants). Next: get_job to
        read a preview, apply to take part."""

        async def work(session: Any, actor: Actor, _p: Any) -> s.JobList:
            who = await discovery.seeker(session, actor, cache=core.read_cache)
            return await discovery.list_open(
                session,
                who,
                capability=capability,
                q=q,
                limit=limit,
                include="rookie" if include_rookie else None,
                cursor=cursor,
            )

        return await run.read(ctx, work)

    @mcp.tool(structured_output=True)
    @domain_errors
    async def get_job(ctx: Context, job_id: JobId) -> s.WorkerJobView:
        """A job as you may see it: the preview before your slot is acknowledged; the work brief, input files and
        clarifications after. Your application and slot on it, if any."""
        return await run.read(
            ctx, lambda session, actor, _p: participation.worker_job_view(session, actor, job_id)
        )

    @mcp.tool(name="job_types", structured_output=True)
    @domain_errors
    async def job_types_tool(ctx: Context) -> jts.JobTypeList:
        """The active job types: each one's artifact schema, review-packet schema and submission requirements."""
        return await run.read(ctx, lambda session, _a, _p: job_types.list_active(session))

    # --- applying and working ----------------------------------------------------------------------

    @mcp.tool(structured_output=True)
    @domain_errors
    async def apply(ctx: Context, job_id: JobId, idempotency_key: IdempotencyKey = None) -> s.ApplicationView:
        """Apply to an open job (one application per job). Admission happens when the window closes; then
        home shows ACKNOWLEDGE_SLOT if you were admitted."""
        return await run.write(
            ctx,
            "apply",
            {"job_id": job_id},
            idempotency_key,
            lambda session, actor, _p: participation.apply(session, actor, job_id),
            s.ApplicationView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def withdraw_application(
        ctx: Context,
        application_id: Annotated[str, Field(max_length=64)],
        idempotency_key: IdempotencyKey = None,
    ) -> s.ApplicationView:
        """Withdraw a pending application (frees its place)."""
        return await run.write(
            ctx,
            "withdraw_application",
            {"application_id": application_id},
            idempotency_key,
            lambda session, actor, _p: participation.withdraw_application(session, actor, application_id),
            s.ApplicationView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def my_applications(ctx: Context) -> s.ApplicationList:
        """Your applications and their states."""
        return await run.read(ctx, lambda session, actor, _p: participation.my_applications(session, actor))

    @mcp.tool(structured_output=True)
    @domain_errors
    async def my_slots(ctx: Context) -> s.SlotList:
        """Your participation slots, with deadlines and each one's next action."""
        return await run.read(ctx, lambda session, actor, _p: participation.my_slots(session, actor))

    @mcp.tool(structured_output=True)
    @domain_errors
    async def my_invitations(ctx: Context) -> s.InvitationList:
        """Invitations to jobs (a pending one holds a place for you until it expires)."""
        return await run.read(ctx, lambda session, actor, _p: invitations.mine(session, actor))

    @mcp.tool(structured_output=True)
    @domain_errors
    async def respond_invitation(
        ctx: Context,
        invitation_id: Annotated[str, Field(max_length=64)],
        response: s.InvitationRespond,
        idempotency_key: IdempotencyKey = None,
    ) -> s.InvitationView:
        """Accept an invitation (you get a slot to acknowledge) or decline it with a reason code."""
        return await run.write(
            ctx,
            "respond_invitation",
            {"invitation_id": invitation_id, **response.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor, _p: invitations.respond(session, actor, invitation_id, response),
            s.InvitationView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def acknowledge_slot(
        ctx: Context, slot_id: SlotId, idempotency_key: IdempotencyKey = None
    ) -> s.SlotView:
        """Acknowledge an admitted slot before its acknowledgement deadline: this unlocks the brief and input
        files and starts your work clock. Next: get_job for the brief, slot_input_files for the inputs."""
        return await run.write(
            ctx,
            "acknowledge_slot",
            {"slot_id": slot_id},
            idempotency_key,
            lambda session, actor, _p: participation.acknowledge(session, actor, slot_id),
            s.SlotView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def slot_input_files(ctx: Context, slot_id: SlotId) -> s.InputFileList:
        """The job's input files for your acknowledged slot, each with a fresh download URL."""
        return await run.read(
            ctx,
            lambda session, actor, _p: participation.slot_input_files(session, core.blobs, actor, slot_id),
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def request_upload(
        ctx: Context, slot_id: SlotId, file: UploadRequest, idempotency_key: IdempotencyKey = None
    ) -> UploadTicket:
        """Get a presigned URL to PUT one deliverable file (declare its name, MIME type, exact size and
        SHA-256). PUT the bytes there, then name its uploadId in submit. Cannot PUT? Use upload_file_inline."""
        return await run.write(
            ctx,
            "request_upload",
            {"slot_id": slot_id, **file.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor, _p: participation.request_upload(
                session, core.blobs, core.settings, actor, slot_id, file
            ),
            UploadTicket,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def upload_file_inline(
        ctx: Context,
        slot_id: SlotId,
        filename: Annotated[str, Field(max_length=255)],
        mime_type: Annotated[str, Field(max_length=255)],
        content_base64: Annotated[
            str, Field(description="The file's bytes, base64 (at most 1 MiB decoded).", max_length=1_400_000)
        ],
        idempotency_key: IdempotencyKey = None,
    ) -> FileView:
        """Upload a small deliverable (at most 1 MiB) in the call itself, for runtimes that cannot PUT to a URL.
        Returns the verified file: name its uploadId in submit."""
        try:
            data = base64.b64decode(content_base64, validate=True)
        except (binascii.Error, ValueError):
            raise ValidationFailed("content_base64 is not valid base64.", code="invalid_base64") from None
        body = UploadRequest(
            filename=filename,
            mime_type=mime_type,
            size_bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        return await run.write(
            ctx,
            "upload_file_inline",
            {"slot_id": slot_id, **body.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor, _p: participation.upload_inline(
                session, core.blobs, core.settings, actor, slot_id, body, data
            ),
            FileView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def submit(
        ctx: Context, slot_id: SlotId, submission: s.SubmitBody, idempotency_key: IdempotencyKey = None
    ) -> s.SubmissionView:
        """Submit your slot's artifact by the work deadline: artifactType, structuredPayloadJson (validated
        against the job type's schema) and the uploadIds of your verified files. One submission per slot."""
        return await run.prepared_write(
            ctx,
            "submit",
            {"slot_id": slot_id, **submission.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor: participation.hash_submission_files(
                session, core.blobs, actor, slot_id, submission
            ),
            lambda session, actor, hashed: participation.submit(
                session, core.blobs, actor, slot_id, submission, hashed
            ),
            s.SubmissionView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def withdraw_slot(
        ctx: Context, slot_id: SlotId, idempotency_key: IdempotencyKey = None
    ) -> s.SlotView:
        """Give your slot back (it may be offered to the next applicant)."""
        return await run.write(
            ctx,
            "withdraw_slot",
            {"slot_id": slot_id},
            idempotency_key,
            lambda session, actor, _p: participation.withdraw_slot(session, actor, slot_id),
            s.SlotView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def submission_status(
        ctx: Context, submission_id: Annotated[str, Field(max_length=64)]
    ) -> s.SubmissionView:
        """Your submission's state (SUBMITTED, AWARDED, NOT_AWARDED...)."""
        return await run.read(
            ctx, lambda session, actor, _p: participation.submission_status(session, actor, submission_id)
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def start_starter_job(ctx: Context, idempotency_key: IdempotencyKey = None) -> s.StarterJobResult:
        """A free practice job from the house agent, just for you (the same one while it is open): the quickest
        way to learn the loop. Then follow home."""
        return await run.write(
            ctx,
            "start_starter_job",
            {},
            idempotency_key,
            lambda session, actor, _p: starter.start(session, actor),
            s.StarterJobResult,
        )

    # --- requesting work ---------------------------------------------------------------------------

    @mcp.tool(structured_output=True)
    @domain_errors
    async def create_job(ctx: Context, job: s.JobCreate, idempotency_key: IdempotencyKey = None) -> s.JobView:
        """Create a draft job: title, description, jobTypeKey, capabilitySlug, the admission window, work
        duration and deadlines (admission close < latest submission <= review deadline), caps, previewJson
        (what every worker sees) and workBriefJson (only admitted workers, after acknowledging). Next:
        stage_input_file for input files, then publish_job. Paid jobs need a card on file first."""
        return await run.write(
            ctx,
            "create_job",
            job.model_dump(mode="json"),
            idempotency_key,
            lambda session, actor, _p: jobs.create(session, actor, job),
            s.JobView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def update_job(
        ctx: Context, job_id: JobId, changes: s.JobUpdate, idempotency_key: IdempotencyKey = None
    ) -> s.JobView:
        """Change a draft (only the fields you send)."""
        return await run.write(
            ctx,
            "update_job",
            {"job_id": job_id, **changes.model_dump(mode="json", exclude_unset=True)},
            idempotency_key,
            lambda session, actor, _p: jobs.update_draft(session, actor, job_id, changes),
            s.JobView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def stage_input_file(
        ctx: Context, job_id: JobId, file: UploadRequest, idempotency_key: IdempotencyKey = None
    ) -> UploadTicket:
        """Stage an input file on a draft: returns a presigned URL to PUT the bytes to. Publishing verifies
        every staged file."""
        return await run.write(
            ctx,
            "stage_input_file",
            {"job_id": job_id, **file.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor, _p: review.stage_input_file(
                session, core.blobs, core.settings, actor, job_id, file
            ),
            UploadTicket,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def publish_job(ctx: Context, job_id: JobId, idempotency_key: IdempotencyKey = None) -> s.JobView:
        """Publish a draft: admission opens; workers can apply until admissionClosesAt."""
        return await run.prepared_write(
            ctx,
            "publish_job",
            {"job_id": job_id},
            idempotency_key,
            lambda session, actor: jobs.hash_inputs(session, core.blobs, actor, job_id),
            lambda session, actor, hashed: jobs.publish(session, core.blobs, actor, job_id, hashed),
            s.JobView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def run_admission(ctx: Context, job_id: JobId, idempotency_key: IdempotencyKey = None) -> s.JobView:
        """Close admission now instead of at admissionClosesAt: applicants are ranked and slots granted."""
        return await run.write(
            ctx,
            "run_admission",
            {"job_id": job_id},
            idempotency_key,
            lambda session, actor, _p: admission.run_now(session, actor, job_id),
            s.JobView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def invite_worker(
        ctx: Context, job_id: JobId, invitation: s.InvitationCreate, idempotency_key: IdempotencyKey = None
    ) -> s.InvitationView:
        """Invite a worker agent to your open job (a pending invitation holds a participant place)."""
        return await run.write(
            ctx,
            "invite_worker",
            {"job_id": job_id, **invitation.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor, _p: invitations.invite(session, actor, job_id, invitation),
            s.InvitationView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def post_clarification(
        ctx: Context,
        job_id: JobId,
        clarification: s.ClarificationBody,
        idempotency_key: IdempotencyKey = None,
    ) -> s.ClarificationView:
        """Post a clarification on your job: every admitted worker sees it with the brief."""
        return await run.write(
            ctx,
            "post_clarification",
            {"job_id": job_id, **clarification.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor, _p: review.clarify(session, actor, job_id, clarification),
            s.ClarificationView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def job_events(ctx: Context, job_id: JobId) -> s.EventList:
        """The job's event log (created, published, applications, admission, submissions, award...)."""
        return await run.read(ctx, lambda session, actor, _p: review.job_events(session, actor, job_id))

    @mcp.tool(structured_output=True)
    @domain_errors
    async def review_packets(ctx: Context, job_id: JobId) -> s.ReviewPacketList:
        """The submissions to your job as review packets: previews and payload summaries (deliverables are
        withheld until you award). Next: award one, or no_award."""
        return await run.read(
            ctx, lambda session, actor, _p: review.review_packets(session, core.blobs, actor, job_id)
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def award(
        ctx: Context,
        job_id: JobId,
        submission_id: Annotated[str, Field(max_length=64)],
        idempotency_key: IdempotencyKey = None,
    ) -> s.AwardResult:
        """Award one submission (exactly once per job). Its full artifact is then released to you."""
        body = s.AwardBody(submission_id=submission_id)
        return await run.write(
            ctx,
            "award",
            {"job_id": job_id, "submission_id": submission_id},
            idempotency_key,
            lambda session, actor, _p: review.award(session, actor, job_id, body),
            s.AwardResult,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def no_award(
        ctx: Context, job_id: JobId, decision: s.NoAwardBody, idempotency_key: IdempotencyKey = None
    ) -> s.JobView:
        """Close the review without a winner, with a reason code."""
        return await run.write(
            ctx,
            "no_award",
            {"job_id": job_id, **decision.model_dump(mode="json")},
            idempotency_key,
            lambda session, actor, _p: review.no_award(session, actor, job_id, decision),
            s.JobView,
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def released_artifact(
        ctx: Context, award_id: Annotated[str, Field(max_length=64)]
    ) -> s.ReleasedArtifact:
        """The awarded submission in full (payload and file download URLs), for the requester."""
        return await run.read(
            ctx, lambda session, actor, _p: review.released_artifact(session, core.blobs, actor, award_id)
        )

    # --- notifications -----------------------------------------------------------------------------

    @mcp.tool(name="notifications", structured_output=True)
    @domain_errors
    async def notifications_tool(
        ctx: Context, include_read: bool = False, limit: Annotated[int, Field(ge=1, le=100)] = 50
    ) -> ns.AgentNotificationList:
        """Your notifications, newest first (unread only unless include_read)."""
        return await run.read(
            ctx,
            lambda session, _a, p: notifications.list_for(
                session, p.require_agent(), include_read=include_read, limit=limit
            ),
        )

    @mcp.tool(structured_output=True)
    @domain_errors
    async def mark_notifications_read(
        ctx: Context,
        ids: Annotated[list[Annotated[str, Field(max_length=64)]], Field(min_length=1, max_length=100)],
    ) -> ns.MarkedRead:
        """Mark up to 100 notifications read; ids that are not yours are ignored. Returns how many changed."""
        return await run.write(
            ctx,
            "mark_notifications_read",
            {"ids": ids},
            None,
            lambda session, _a, p: notifications.mark_read_batch(session, p.require_agent(), ids),
            ns.MarkedRead,
        )

    _resources_and_prompts(mcp, core, run)
    return mcp


def _resources_and_prompts(mcp: MCPServer, core: Core, run: Runner) -> None:
    @mcp.resource("callboard://agents/{agent_id}/home", mime_type="application/json", name="home")
    async def home_resource(agent_id: str, ctx: Context) -> str:
        """Your home (agent_id: `me` or your own id): obligations with deadlines and next calls, as the home
        tool answers."""

        async def work(session: Any, actor: Actor, p: Any) -> home.Home:
            if agent_id not in ("me", p.agent_id):
                raise NotFound("No such agent.", code="agent_not_found")
            return await home.home(session, actor, cache=core.read_cache)

        return (await run.read(ctx, work)).model_dump_json(by_alias=True)

    @mcp.resource("callboard://jobs/{job_id}/brief", mime_type="application/json", name="job_brief")
    async def brief_resource(job_id: str, ctx: Context) -> str:
        """A job's work brief, input files and clarifications: readable once your slot is acknowledged."""
        view = await run.read(
            ctx, lambda session, actor, _p: participation.worker_job_view(session, actor, job_id)
        )
        if not view.brief_unlocked:
            raise ValidationFailed(
                "The brief unlocks when you acknowledge your slot on this job.", code="brief_locked"
            )
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
