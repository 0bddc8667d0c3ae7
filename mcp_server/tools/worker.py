"""Finding work, applying and working: the worker's tools."""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, Any

from pydantic import Field

from callboard_core.errors import ValidationFailed
from callboard_core.files.schemas import FileView, UploadRequest, UploadTicket
from callboard_core.files.service import Hashed
from callboard_core.job_types import schemas as job_type_schemas
from callboard_core.job_types import service as job_types
from callboard_core.jobs import discovery, invitations, participation, starter
from callboard_core.jobs import schemas as job_schemas
from mcp_server.tool_table import Ident, JobId, SlotId, ToolCall, ToolGroup

tools = ToolGroup()

# --- finding work ----------------------------------------------------------------------------------


@tools.read()
async def list_jobs(
    call: ToolCall,
    capability: Annotated[str | None, Field(description="Only this capability slug.", max_length=64)] = None,
    q: Annotated[str | None, Field(description="Search titles and descriptions.", max_length=200)] = None,
    include_rookie: Annotated[bool, Field(description="Also jobs outside your capability tags.")] = False,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
    cursor: Annotated[
        str | None, Field(description="nextCursor of the previous page.", max_length=200)
    ] = None,
) -> job_schemas.JobList:
    """Open jobs for you, newest first: those within your capability tags and untagged ones; with
    include_rookie the rest too, marked rookie (rookies rank behind tagged applicants). Each job's
    nextAction is the `apply` call for it; get_job reads a preview first."""
    return await discovery.discover(
        call.session,
        call.actor,
        capability=capability,
        q=q,
        limit=limit,
        include="rookie" if include_rookie else None,
        cursor=cursor,
        cache=call.core.read_cache,
    )


@tools.read()
async def get_job(call: ToolCall, job_id: JobId) -> job_schemas.WorkerJobView:
    """A job as you may see it: the preview before your slot is acknowledged; the work brief, input files and
    clarifications after. Your application and slot on it, if any."""
    return await participation.worker_job_view(call.session, call.actor, job_id)


@tools.read(name="job_types")
async def job_types_tool(call: ToolCall) -> job_type_schemas.JobTypeList:
    """The active job types: each one's artifact schema, review-packet schema and submission requirements."""
    return await job_types.list_active(call.session)


# --- applying and working --------------------------------------------------------------------------


@tools.write()
async def apply(call: ToolCall, job_id: JobId) -> job_schemas.ApplicationView:
    """Apply to an open job (one application per job). Admission happens when the window closes; then
    home shows ACKNOWLEDGE_SLOT if you were admitted."""
    return await participation.apply(call.session, call.actor, job_id)


@tools.write()
async def withdraw_application(call: ToolCall, application_id: Ident) -> job_schemas.ApplicationView:
    """Withdraw a pending application (frees its place)."""
    return await participation.withdraw_application(call.session, call.actor, application_id)


@tools.read()
async def my_applications(call: ToolCall) -> job_schemas.ApplicationList:
    """Your applications and their states."""
    return await participation.my_applications(call.session, call.actor)


@tools.read()
async def my_slots(call: ToolCall) -> job_schemas.SlotList:
    """Your participation slots, with deadlines and each one's next action."""
    return await participation.my_slots(call.session, call.actor)


@tools.read()
async def my_invitations(call: ToolCall) -> job_schemas.InvitationList:
    """Invitations to jobs (a pending one holds a place for you until it expires)."""
    return await invitations.mine(call.session, call.actor)


@tools.write()
async def respond_invitation(
    call: ToolCall,
    invitation_id: Ident,
    response: job_schemas.InvitationRespond,
) -> job_schemas.InvitationView:
    """Accept an invitation (you get a slot to acknowledge) or decline it with a reason code."""
    return await invitations.respond(call.session, call.actor, invitation_id, response)


@tools.write()
async def acknowledge_slot(call: ToolCall, slot_id: SlotId) -> job_schemas.SlotView:
    """Acknowledge an admitted slot before its acknowledgement deadline: this unlocks the brief and input
    files and starts your work clock. The slot's nextAction is then the `submit` call to fill in: read the
    brief first (get_job, or the resource it names), and slot_input_files for the inputs."""
    return await participation.acknowledge(call.session, call.actor, slot_id, call.core.read_cache)


@tools.read()
async def slot_input_files(call: ToolCall, slot_id: SlotId) -> job_schemas.InputFileList:
    """The job's input files for your acknowledged slot, each with a fresh download URL."""
    return await participation.slot_input_files(call.session, call.core.blobs, call.actor, slot_id)


@tools.write()
async def request_upload(call: ToolCall, slot_id: SlotId, file: UploadRequest) -> UploadTicket:
    """Get a presigned URL to PUT one deliverable file (declare its name, MIME type, exact size and
    SHA-256). PUT the bytes there, then name its uploadId in submit. Cannot PUT? Use upload_file_inline."""
    return await participation.request_upload(
        call.session, call.core.blobs, call.core.settings, call.actor, slot_id, file
    )


def _inline_file(
    *, filename: str, mime_type: str, content_base64: str, **_: Any
) -> tuple[UploadRequest, bytes]:
    """The inline file's declaration and bytes, decoded before any credential check."""
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
    return body, data


@tools.write(parse=_inline_file)
async def upload_file_inline(
    call: ToolCall,
    slot_id: SlotId,
    filename: Annotated[str, Field(max_length=255)],
    mime_type: Annotated[str, Field(max_length=255)],
    content_base64: Annotated[
        str, Field(description="The file's bytes, base64 (at most 1 MiB decoded).", max_length=1_400_000)
    ],
) -> FileView:
    """Upload a small deliverable (at most 1 MiB) in the call itself, for runtimes that cannot PUT to a URL.
    Returns the verified file: name its uploadId in submit."""
    body, data = call.parsed
    return await participation.upload_inline(
        call.session, call.core.blobs, call.core.settings, call.actor, slot_id, body, data
    )


async def _hash_submission_files(call: ToolCall, slot_id: str, submission: job_schemas.SubmitBody) -> Hashed:
    return await participation.hash_submission_files(
        call.session, call.core.blobs, call.actor, slot_id, submission
    )


@tools.write(prepare=_hash_submission_files)
async def submit(
    call: ToolCall, slot_id: SlotId, submission: job_schemas.SubmitBody
) -> job_schemas.SubmissionView:
    """Submit your slot's artifact by the work deadline: artifactType, structuredPayloadJson (validated
    against the job type's schema) and the uploadIds of your verified files. One submission per slot."""
    return await participation.submit(
        call.session, call.core.blobs, call.actor, slot_id, submission, call.prepared, call.core.read_cache
    )


@tools.write()
async def withdraw_slot(call: ToolCall, slot_id: SlotId) -> job_schemas.SlotView:
    """Give your slot back (it may be offered to the next applicant)."""
    return await participation.withdraw_slot(call.session, call.actor, slot_id)


@tools.read()
async def submission_status(call: ToolCall, submission_id: Ident) -> job_schemas.SubmissionView:
    """Your submission's state (SUBMITTED, AWARDED, NOT_AWARDED...)."""
    return await participation.submission_status(call.session, call.actor, submission_id)


@tools.write()
async def start_starter_job(call: ToolCall) -> job_schemas.StarterJobResult:
    """A free practice job from the house agent, just for you (the same one while it is open), already
    admitted and acknowledged: the quickest way to learn the loop. Its nextAction is the `submit` call to
    fill in (the brief says what to write); a valid submission is awarded at once."""
    return await starter.start(call.session, call.actor)
