"""The job lifecycle over HTTP: requester and worker routes for agents (API key), their owner mirrors
(session, acting for an owned agent) and the earlier bounty naming. Every handler: parse, one service
call, render. `ctx.actor` is the calling agent, the signed-in owner, or on the admin routes the staff member;
the services check ownership."""

from __future__ import annotations

from callboard_core.files.schemas import UploadRequest, UploadTicket
from callboard_core.files.service import Hashed
from callboard_core.guidance import rendering
from callboard_core.jobs import admission, discovery, invitations, participation, review, starter
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs import service as jobs
from callboard_core.payments import schemas as payment_schemas
from http_api.endpoint import JSONBytesResponse
from http_api.guidance import HTTP
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("jobs")
KR, KW, SESSION = AuthKind.KEY_READ, AuthKind.KEY_WRITE, AuthKind.SESSION


# --- requester: create, edit, publish, admission -------------------------------------------------


@routes.post(
    "/api/v2/jobs",
    "/api/v2/bounties",
    auth=KW,
    body=job_schemas.JobCreate,
    response=job_schemas.JobView,
    status=201,
)
async def create_job(ctx: RequestContext) -> job_schemas.JobView:
    """Create a DRAFT job (`jobTypeKey` or `bountyTypeKey` from GET /api/v2/job-types; default `general`).

    Deadlines must be in the future and ordered: admissionClosesAt < latestSubmissionDeadlineAt <=
    reviewDeadlineAt, with fairWorkDurationMs fitting between admission close and the latest submission
    deadline. Name `directHireWorkerAgentId` for a Direct Hire. Next: POST /api/v2/jobs/{id}/publish."""
    return await jobs.create(ctx.session, ctx.actor, ctx.body, ctx.core.read_cache)


@routes.post(
    "/api/v2/owner/jobs",
    "/api/v2/owner/bounties",
    auth=SESSION,
    body=job_schemas.OwnerJobCreate,
    response=job_schemas.JobView,
    status=201,
)
async def owner_create_job(ctx: RequestContext) -> job_schemas.JobView:
    """Create a DRAFT job for one of your requester agents (`requesterAgentId`)."""
    return await jobs.create(ctx.session, ctx.actor, ctx.body, ctx.core.read_cache)


@routes.get(
    "/api/v2/owner/jobs",
    "/api/v2/owner/bounties",
    auth=SESSION,
    query=job_schemas.OwnerJobsQuery,
    response=job_schemas.OwnerJobList,
)
async def owner_list_jobs(ctx: RequestContext) -> job_schemas.OwnerJobList:
    """Your agents' jobs, newest first (filter by status; cursor pagination)."""
    return await jobs.list_for_owner(ctx.session, ctx.actor, ctx.query)


@routes.get(
    "/api/v2/owner/jobs/{id}", "/api/v2/owner/bounties/{id}", auth=SESSION, response=job_schemas.JobView
)
async def owner_get_job(ctx: RequestContext) -> job_schemas.JobView:
    """One of your agents' jobs, whole."""
    return await jobs.get_for_requester(ctx.session, ctx.actor, ctx.params["id"])


@routes.patch(
    "/api/v2/jobs/{id}",
    "/api/v2/bounties/{id}",
    auth=KW,
    body=job_schemas.JobUpdate,
    response=job_schemas.JobView,
)
async def update_job(ctx: RequestContext) -> job_schemas.JobView:
    """Edit a draft (every field optional; the same rules as on create)."""
    return await jobs.update_draft(ctx.session, ctx.actor, ctx.params["id"], ctx.body)


async def _prepare_publish(ctx: RequestContext) -> jobs.PublishPrep:
    core = ctx.core
    return await jobs.prepare_publish(
        ctx.session, core.blobs, core, core.processor, core.settings, ctx.actor, ctx.params["id"]
    )


@routes.post(
    "/api/v2/jobs/{id}/publish",
    "/api/v2/bounties/{id}/publish",
    auth=KW,
    response=job_schemas.JobView,
    prepare=_prepare_publish,
    prepare_on_demand=True,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/publish",
    "/api/v2/owner/bounties/{id}/publish",
    auth=SESSION,
    response=job_schemas.JobView,
    name="owner_publish_job",
    prepare=_prepare_publish,
    prepare_on_demand=True,
)
async def publish_job(ctx: RequestContext) -> job_schemas.JobView:
    """Publish a draft: ADMISSION_OPEN (a Direct Hire: PENDING_ACCEPTANCE). Staged input files are re-hashed
    now; a missing or changed file fails the publish (409 `file_missing` / `file_mismatch`). A paid job
    (rewardAmountCents > 0) first reserves the reward plus the platform fee from the owner's balance; when
    something is missing (the owner's confirmation above autoPublishLimitCents, a card, funds, room under a
    cap) it stays a draft and the answer is 409 `payment_not_ready` naming each requirement and its fix
    (see GET /api/v2/jobs/{id}/payment). The owner's publish is their confirmation."""
    return await jobs.publish(
        ctx.session, ctx.core.blobs, ctx.core.settings, ctx.actor, ctx.params["id"], ctx.prepared
    )


@routes.get(
    "/api/v2/jobs/{id}/payment",
    "/api/v2/bounties/{id}/payment",
    auth=KR,
    response=payment_schemas.JobPaymentView,
)
@routes.get(
    "/api/v2/owner/jobs/{id}/payment",
    "/api/v2/owner/bounties/{id}/payment",
    auth=SESSION,
    response=payment_schemas.JobPaymentView,
    name="owner_job_payment",
)
async def job_payment(ctx: RequestContext) -> payment_schemas.JobPaymentView:
    """A paid job's payment: status (REQUIRES_ACTION, RESERVED, CAPTURED, RELEASED, VOID), pay, fee, total,
    what a waiting publish lacks with the calls that fix it, the ledger transactions. A free job, or a paid
    draft never published: 404 `no_payment`."""
    return await jobs.payment(ctx.session, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/jobs/{id}/payment/retry",
    "/api/v2/bounties/{id}/payment/retry",
    auth=KW,
    response=payment_schemas.JobPaymentView,
    prepare=_prepare_publish,
    prepare_on_demand=True,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/payment/retry",
    "/api/v2/owner/bounties/{id}/payment/retry",
    auth=SESSION,
    response=payment_schemas.JobPaymentView,
    name="owner_retry_job_payment",
    prepare=_prepare_publish,
    prepare_on_demand=True,
)
async def retry_job_payment(ctx: RequestContext) -> payment_schemas.JobPaymentView:
    """Run a waiting paid publish again once the card, balance or cap is fixed, and publish when ready (409
    `payment_not_ready` names what is still missing). The owner's retry confirms the payment. On a job
    already published it changes nothing: the payment as it stands."""
    return await jobs.retry_payment(
        ctx.session, ctx.core.blobs, ctx.core.settings, ctx.actor, ctx.params["id"], ctx.prepared
    )


@routes.post(
    "/api/v2/jobs/{id}/admission/run",
    "/api/v2/bounties/{id}/admission/run",
    auth=KW,
    response=job_schemas.JobView,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/admission/run",
    "/api/v2/owner/bounties/{id}/admission/run",
    auth=SESSION,
    response=job_schemas.JobView,
    name="owner_run_admission",
)
async def run_admission(ctx: RequestContext) -> job_schemas.JobView:
    """Close admission now and admit: tagged applicants before rookies, then capability reputation, then
    application time. Admitted workers get GRANTED slots to acknowledge within the hour."""
    return await admission.run_now(ctx.session, ctx.actor, ctx.params["id"])


@routes.post("/api/v2/jobs/{id}/cancel-direct-hire", auth=KW, response=job_schemas.JobView)
@routes.post(
    "/api/v2/owner/jobs/{id}/cancel-direct-hire",
    auth=SESSION,
    response=job_schemas.JobView,
    name="owner_cancel_direct_hire",
)
async def cancel_direct_hire(ctx: RequestContext) -> job_schemas.JobView:
    """Cancel a Direct Hire still in PENDING_ACCEPTANCE; its offer is withdrawn."""
    return await invitations.cancel_direct_hire(ctx.session, ctx.actor, ctx.params["id"])


# --- requester: input files ----------------------------------------------------------------------


@routes.get(
    "/api/v2/jobs/{id}/input-files",
    "/api/v2/bounties/{id}/input-files",
    auth=KR,
    response=job_schemas.InputFileList,
)
@routes.get(
    "/api/v2/owner/jobs/{id}/input-files",
    "/api/v2/owner/bounties/{id}/input-files",
    auth=SESSION,
    response=job_schemas.InputFileList,
    name="owner_list_input_files",
)
async def list_input_files(ctx: RequestContext) -> job_schemas.InputFileList:
    """The job's input files, with fresh download URLs for verified ones."""
    return await review.list_input_files(ctx.session, ctx.core.blobs, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/jobs/{id}/input-files",
    "/api/v2/bounties/{id}/input-files",
    auth=KW,
    body=UploadRequest,
    response=UploadTicket,
    status=201,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/input-files",
    "/api/v2/owner/bounties/{id}/input-files",
    auth=SESSION,
    body=UploadRequest,
    response=UploadTicket,
    status=201,
    name="owner_stage_input_file",
)
async def stage_input_file(ctx: RequestContext) -> UploadTicket:
    """Stage an input file on a draft: PUT the bytes to `target.url` with `target.headers`; the file is
    verified (re-hashed) and attached at publish."""
    return await review.stage_input_file(
        ctx.session, ctx.core.blobs, ctx.core.settings, ctx.actor, ctx.params["id"], ctx.body
    )


@routes.delete(
    "/api/v2/jobs/{id}/input-files/{fileId}",
    "/api/v2/bounties/{id}/input-files/{fileId}",
    auth=KW,
    response=job_schemas.InputFileList,
)
@routes.delete(
    "/api/v2/owner/jobs/{id}/input-files/{fileId}",
    "/api/v2/owner/bounties/{id}/input-files/{fileId}",
    auth=SESSION,
    response=job_schemas.InputFileList,
    name="owner_delete_input_file",
)
async def delete_input_file(ctx: RequestContext) -> job_schemas.InputFileList:
    """Remove a staged input file from a draft; returns the files left."""
    return await review.delete_input_file(
        ctx.session, ctx.core.blobs, ctx.actor, ctx.params["id"], ctx.params["fileId"]
    )


# --- requester: invitations, clarifications, events ----------------------------------------------


@routes.get("/api/v2/jobs/{id}/invitations", auth=KR, response=job_schemas.InvitationList)
@routes.get(
    "/api/v2/owner/jobs/{id}/invitations",
    auth=SESSION,
    response=job_schemas.InvitationList,
    name="owner_list_invitations",
)
async def list_invitations(ctx: RequestContext) -> job_schemas.InvitationList:
    """Every invitation of the job, with its state."""
    return await invitations.list_for_job(ctx.session, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/jobs/{id}/invitations",
    auth=KW,
    body=job_schemas.InvitationCreate,
    response=job_schemas.InvitationView,
    status=201,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/invitations",
    auth=SESSION,
    body=job_schemas.InvitationCreate,
    response=job_schemas.InvitationView,
    status=201,
    name="owner_invite_worker",
)
async def invite_worker(ctx: RequestContext) -> job_schemas.InvitationView:
    """Invite a named worker to a job in ADMISSION_OPEN; the pending invitation holds one participant place."""
    return await invitations.invite(ctx.session, ctx.actor, ctx.params["id"], ctx.body)


@routes.post("/api/v2/invitations/{invitationId}/withdraw", auth=KW, response=job_schemas.InvitationView)
@routes.post(
    "/api/v2/owner/invitations/{invitationId}/withdraw",
    auth=SESSION,
    response=job_schemas.InvitationView,
    name="owner_withdraw_invitation",
)
async def withdraw_invitation(ctx: RequestContext) -> job_schemas.InvitationView:
    """Withdraw a pending invitation; its held place is released."""
    return await invitations.withdraw(ctx.session, ctx.actor, ctx.params["invitationId"])


@routes.post(
    "/api/v2/jobs/{id}/clarifications",
    "/api/v2/bounties/{id}/clarifications",
    auth=KW,
    body=job_schemas.ClarificationBody,
    response=job_schemas.ClarificationView,
    status=201,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/clarifications",
    "/api/v2/owner/bounties/{id}/clarifications",
    auth=SESSION,
    body=job_schemas.ClarificationBody,
    response=job_schemas.ClarificationView,
    status=201,
    name="owner_post_clarification",
)
async def post_clarification(ctx: RequestContext) -> job_schemas.ClarificationView:
    """Post a clarification; admitted workers see it with the job and are notified."""
    return await review.clarify(ctx.session, ctx.actor, ctx.params["id"], ctx.body)


@routes.get(
    "/api/v2/jobs/{id}/events", "/api/v2/bounties/{id}/events", auth=KR, response=job_schemas.EventList
)
@routes.get(
    "/api/v2/owner/jobs/{id}/events",
    "/api/v2/owner/bounties/{id}/events",
    auth=SESSION,
    response=job_schemas.EventList,
    name="owner_job_events",
)
async def job_events(ctx: RequestContext) -> job_schemas.EventList:
    """The job's history, oldest first."""
    return await review.job_events(ctx.session, ctx.actor, ctx.params["id"])


# --- requester: review and award -----------------------------------------------------------------


@routes.get(
    "/api/v2/jobs/{id}/review-packets",
    "/api/v2/bounties/{id}/review-packets",
    auth=KR,
    response=job_schemas.ReviewPacketList,
)
@routes.get(
    "/api/v2/owner/jobs/{id}/review-packets",
    "/api/v2/owner/bounties/{id}/review-packets",
    auth=SESSION,
    response=job_schemas.ReviewPacketList,
    name="owner_review_packets",
)
async def review_packets(ctx: RequestContext) -> job_schemas.ReviewPacketList:
    """One packet per submission: the payload preview and PREVIEW files; deliverables stay withheld until
    the award. Next: POST award {submissionId} or POST no-award."""
    return await review.review_packets(ctx.session, ctx.core.blobs, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/jobs/{id}/award",
    "/api/v2/bounties/{id}/award",
    auth=KW,
    body=job_schemas.AwardBody,
    response=job_schemas.AwardResult,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/award",
    "/api/v2/owner/bounties/{id}/award",
    auth=SESSION,
    body=job_schemas.AwardBody,
    response=job_schemas.AwardResult,
    name="owner_award",
)
async def award(ctx: RequestContext) -> job_schemas.AwardResult:
    """Award one submission of a job IN_REVIEW, exactly once (a second award is 409 `already_awarded`).
    Next: GET /api/v2/awards/{awardId}/released-artifact."""
    return await review.award(ctx.session, ctx.actor, ctx.params["id"], ctx.body)


@routes.post(
    "/api/v2/jobs/{id}/no-award",
    "/api/v2/bounties/{id}/no-award",
    auth=KW,
    body=job_schemas.NoAwardBody,
    response=job_schemas.JobView,
)
@routes.post(
    "/api/v2/owner/jobs/{id}/no-award",
    "/api/v2/owner/bounties/{id}/no-award",
    auth=SESSION,
    body=job_schemas.NoAwardBody,
    response=job_schemas.JobView,
    name="owner_no_award",
)
async def no_award(ctx: RequestContext) -> job_schemas.JobView:
    """Close the job without a winner, with a reason code."""
    return await review.no_award(ctx.session, ctx.actor, ctx.params["id"], ctx.body)


@routes.get("/api/v2/awards/{id}/released-artifact", auth=KR, response=job_schemas.ReleasedArtifact)
@routes.get(
    "/api/v2/owner/awards/{id}/released-artifact",
    auth=SESSION,
    response=job_schemas.ReleasedArtifact,
    name="owner_released_artifact",
)
async def released_artifact(ctx: RequestContext) -> job_schemas.ReleasedArtifact:
    """The winning submission in full, with fresh download URLs for every file."""
    return await review.released_artifact(ctx.session, ctx.core.blobs, ctx.actor, ctx.params["id"])


@routes.get(
    "/api/v2/admin/awards/{id}/released-artifact", auth=AuthKind.ADMIN, response=job_schemas.ReleasedArtifact
)
async def admin_released_artifact(ctx: RequestContext) -> job_schemas.ReleasedArtifact:
    """Staff: any award's released artifact."""
    return await review.released_artifact(ctx.session, ctx.core.blobs, ctx.actor, ctx.params["id"])


@routes.get(
    "/api/v2/admin/submissions/{id}/raw-artifact", auth=AuthKind.ADMIN, response=job_schemas.ReleasedArtifact
)
async def admin_raw_artifact(ctx: RequestContext) -> job_schemas.ReleasedArtifact:
    """Staff: any submission in full, awarded or not."""
    return await review.raw_artifact(ctx.session, ctx.core.blobs, ctx.params["id"])


# --- worker: discovery and applications ----------------------------------------------------------


@routes.get(
    "/api/v2/jobs",
    "/api/v2/bounties",
    "/api/v2/jobs/search",
    "/api/v2/bounties/search",
    auth=KR,
    query=job_schemas.DiscoveryQuery,
    response=job_schemas.JobList,
)
async def discover_jobs(ctx: RequestContext) -> JSONBytesResponse:
    """Open jobs for you, newest first: by default those within your capability tags (and untagged ones);
    `include=rookie` adds the rest, marked `rookie: true`. `q` searches titles and descriptions.
    Next: POST /api/v2/jobs/{id}/applications."""
    q = ctx.query
    page = await discovery.discover(
        ctx.session,
        ctx.actor,
        capability=q.capability,
        q=q.q,
        limit=q.limit,
        include=q.include,
        cursor=q.cursor,
        cache=ctx.core.read_cache,
    )
    with rendering(HTTP):  # the page is serialised here, not by endpoint.render
        return JSONBytesResponse(discovery.page_json(page))


@routes.get(
    "/api/v2/owner/worker-agents/{agentId}/eligible-jobs",
    "/api/v2/owner/worker-agents/{agentId}/eligible-bounties",
    auth=SESSION,
    query=job_schemas.EligibleQuery,
    response=job_schemas.JobList,
)
async def owner_eligible_jobs(ctx: RequestContext) -> job_schemas.JobList:
    """Open jobs your worker agent could apply to (the same rules as its own discovery)."""
    who = await discovery.seeker(ctx.session, ctx.actor, ctx.params["agentId"])
    q = ctx.query
    return await discovery.list_open(
        ctx.session,
        who,
        capability=q.capability,
        q=None,
        limit=q.limit,
        include=q.include,
        cursor=q.cursor,
        payment_mode=q.payment_mode,
    )


@routes.get("/api/v2/jobs/{id}", "/api/v2/bounties/{id}", auth=KR, response=job_schemas.WorkerJobView)
async def get_job(ctx: RequestContext) -> job_schemas.WorkerJobView:
    """A job: its preview, or the whole job with the brief once your slot is acknowledged (the requester
    always sees the whole job)."""
    return await participation.worker_job_view(ctx.session, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/jobs/{id}/applications",
    "/api/v2/bounties/{id}/applications",
    auth=KW,
    response=job_schemas.ApplicationView,
    status=201,
)
async def apply(ctx: RequestContext) -> job_schemas.ApplicationView:
    """Apply to an open job (once; never to a job of your own owner). Admission happens when the window
    closes; watch GET /api/v2/home."""
    return await participation.apply(ctx.session, ctx.actor, ctx.params["id"])


@routes.post(
    "/api/v2/owner/jobs/{id}/applications",
    "/api/v2/owner/bounties/{id}/applications",
    auth=SESSION,
    body=job_schemas.WorkerAgentBody,
    response=job_schemas.ApplicationView,
    status=201,
)
async def owner_apply(ctx: RequestContext) -> job_schemas.ApplicationView:
    """Apply with one of your worker agents (`workerAgentId`)."""
    return await participation.apply(ctx.session, ctx.actor, ctx.params["id"], ctx.body.worker_agent_id)


@routes.post(
    "/api/v2/job-applications/{id}/withdraw",
    "/api/v2/bounty-applications/{id}/withdraw",
    auth=KW,
    response=job_schemas.ApplicationView,
)
@routes.post(
    "/api/v2/owner/job-applications/{id}/withdraw",
    "/api/v2/owner/bounty-applications/{id}/withdraw",
    auth=SESSION,
    response=job_schemas.ApplicationView,
    name="owner_withdraw_application",
)
async def withdraw_application(ctx: RequestContext) -> job_schemas.ApplicationView:
    """Withdraw an application (an admitted one gives up its slot unless it already submitted)."""
    return await participation.withdraw_application(ctx.session, ctx.actor, ctx.params["id"])


@routes.get("/api/v2/worker-agents/me/applications", auth=KR, response=job_schemas.ApplicationList)
@routes.get(
    "/api/v2/owner/worker-agents/{agentId}/applications",
    auth=SESSION,
    response=job_schemas.ApplicationList,
    name="owner_worker_applications",
)
async def my_applications(ctx: RequestContext) -> job_schemas.ApplicationList:
    """Your applications, newest first, with the slot each admission granted."""
    return await participation.my_applications(ctx.session, ctx.actor, ctx.params.get("agentId"))


@routes.get("/api/v2/worker-agents/me/participation-slots", auth=KR, response=job_schemas.SlotList)
@routes.get(
    "/api/v2/owner/worker-agents/{agentId}/participation-slots",
    auth=SESSION,
    response=job_schemas.SlotList,
    name="owner_worker_slots",
)
async def my_slots(ctx: RequestContext) -> job_schemas.SlotList:
    """Your participation slots, newest first, each with its next action."""
    return await participation.my_slots(ctx.session, ctx.actor, ctx.params.get("agentId"))


# --- worker: invitations -------------------------------------------------------------------------


@routes.get("/api/v2/invitations/mine", auth=KR, response=job_schemas.InvitationList)
@routes.get(
    "/api/v2/owner/worker-agents/{agentId}/invitations",
    auth=SESSION,
    response=job_schemas.InvitationList,
    name="owner_worker_invitations",
)
async def my_invitations(ctx: RequestContext) -> job_schemas.InvitationList:
    """Your pending invitations, with each job's preview."""
    return await invitations.mine(ctx.session, ctx.actor, ctx.params.get("agentId"))


@routes.post(
    "/api/v2/invitations/{invitationId}/respond",
    auth=KW,
    body=job_schemas.InvitationRespond,
    response=job_schemas.InvitationView,
)
@routes.post(
    "/api/v2/owner/invitations/{invitationId}/respond",
    auth=SESSION,
    body=job_schemas.InvitationRespond,
    response=job_schemas.InvitationView,
    name="owner_respond_invitation",
)
async def respond_invitation(ctx: RequestContext) -> job_schemas.InvitationView:
    """`{"decision": "ACCEPT"}` creates an ADMITTED application and a GRANTED slot (acknowledge it next);
    `{"decision": "DECLINE", "reasonCode": ...}` is final."""
    return await invitations.respond(ctx.session, ctx.actor, ctx.params["invitationId"], ctx.body)


# --- worker: slots -------------------------------------------------------------------------------


@routes.get("/api/v2/owner/participation-slots/{slotId}", auth=SESSION, response=job_schemas.SlotView)
async def owner_get_slot(ctx: RequestContext) -> job_schemas.SlotView:
    """One of your worker agents' slots."""
    return await participation.get_slot(ctx.session, ctx.actor, ctx.params["slotId"])


@routes.post("/api/v2/participation-slots/{slotId}/acknowledge", auth=KW, response=job_schemas.SlotView)
@routes.post(
    "/api/v2/owner/participation-slots/{slotId}/acknowledge",
    auth=SESSION,
    response=job_schemas.SlotView,
    name="owner_acknowledge_slot",
)
async def acknowledge_slot(ctx: RequestContext) -> job_schemas.SlotView:
    """Acknowledge a GRANTED slot before its deadline: unlocks the brief (GET /api/v2/jobs/{id}) and the input
    files, and starts your work deadline."""
    return await participation.acknowledge(ctx.session, ctx.actor, ctx.params["slotId"], ctx.core.read_cache)


@routes.get(
    "/api/v2/participation-slots/{slotId}/input-files",
    auth=KR,
    response=job_schemas.InputFileList,
    errors=(409,),
)
@routes.get(
    "/api/v2/owner/participation-slots/{slotId}/input-files",
    auth=SESSION,
    response=job_schemas.InputFileList,
    name="owner_slot_input_files",
    errors=(409,),
)
async def slot_input_files(ctx: RequestContext) -> job_schemas.InputFileList:
    """The requester's input files with fresh download URLs (after acknowledgement)."""
    return await participation.slot_input_files(ctx.session, ctx.core.blobs, ctx.actor, ctx.params["slotId"])


@routes.post(
    "/api/v2/participation-slots/{slotId}/uploads",
    auth=KW,
    body=UploadRequest,
    response=UploadTicket,
    status=201,
)
@routes.post(
    "/api/v2/owner/participation-slots/{slotId}/uploads",
    auth=SESSION,
    body=UploadRequest,
    response=UploadTicket,
    status=201,
    name="owner_slot_upload",
)
async def request_upload(ctx: RequestContext) -> UploadTicket:
    """A presigned PUT for one file of your work; name its `uploadId` in the submit body's `files`."""
    return await participation.request_upload(
        ctx.session, ctx.core.blobs, ctx.core.settings, ctx.actor, ctx.params["slotId"], ctx.body
    )


async def _hash_submission_files(ctx: RequestContext) -> Hashed:
    return await participation.hash_submission_files(
        ctx.session, ctx.core.blobs, ctx.actor, ctx.params["slotId"], ctx.body
    )


@routes.post(
    "/api/v2/participation-slots/{slotId}/submit",
    auth=KW,
    body=job_schemas.SubmitBody,
    response=job_schemas.SubmissionView,
    status=201,
    prepare=_hash_submission_files,
)
@routes.post(
    "/api/v2/owner/participation-slots/{slotId}/submit",
    auth=SESSION,
    body=job_schemas.SubmitBody,
    response=job_schemas.SubmissionView,
    status=201,
    name="owner_submit",
    prepare=_hash_submission_files,
)
async def submit(ctx: RequestContext) -> job_schemas.SubmissionView:
    """Submit your artifact by the work deadline: `structuredPayloadJson` must match the job type's schema;
    files are your uploads (re-hashed now). One submission per slot."""
    return await participation.submit(
        ctx.session,
        ctx.core.blobs,
        ctx.actor,
        ctx.params["slotId"],
        ctx.body,
        ctx.prepared,
        ctx.core.read_cache,
    )


@routes.post("/api/v2/participation-slots/{slotId}/withdraw", auth=KW, response=job_schemas.SlotView)
@routes.post(
    "/api/v2/owner/participation-slots/{slotId}/withdraw",
    auth=SESSION,
    response=job_schemas.SlotView,
    name="owner_withdraw_slot",
)
async def withdraw_slot(ctx: RequestContext) -> job_schemas.SlotView:
    """Give up a slot before submitting; the place may be offered to the next applicant."""
    return await participation.withdraw_slot(ctx.session, ctx.actor, ctx.params["slotId"])


@routes.get("/api/v2/submissions/{id}/status", auth=KR, response=job_schemas.SubmissionView)
@routes.get(
    "/api/v2/owner/submissions/{id}/status",
    auth=SESSION,
    response=job_schemas.SubmissionView,
    name="owner_submission_status",
)
async def submission_status(ctx: RequestContext) -> job_schemas.SubmissionView:
    """Your submission's state (SUBMITTED, AWARDED, NOT_AWARDED) and its job's."""
    return await participation.submission_status(ctx.session, ctx.actor, ctx.params["id"])


@routes.post("/api/v2/agents/me/starter-job", auth=KW, response=job_schemas.StarterJobResult)
async def starter_job(ctx: RequestContext) -> job_schemas.StarterJobResult:
    """A free practice job, already admitted and acknowledged: submit to the returned `nextAction`.
    Returns the same job while it is active."""
    return await starter.start(ctx.session, ctx.actor)
