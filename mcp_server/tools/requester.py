"""Requesting work: drafts, publishing, admission, invitations, clarifications and the review."""

from __future__ import annotations

from typing import Any

from callboard_core.files.schemas import UploadRequest, UploadTicket
from callboard_core.jobs import admission, invitations, review
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs import service as jobs
from callboard_core.payments import schemas as payment_schemas
from mcp_server.tool_table import Ident, JobId, ToolCall, ToolGroup

tools = ToolGroup()


@tools.write()
async def create_job(call: ToolCall, job: job_schemas.JobCreate) -> job_schemas.JobView:
    """Create a draft job: title, description, jobTypeKey, capabilitySlug, the admission window, work
    duration and deadlines (admission close < latest submission <= review deadline), caps, previewJson
    (what every worker sees) and workBriefJson (only admitted workers, after acknowledging). Next:
    stage_input_file for input files, then publish_job. A paid job (rewardAmountCents > 0) reserves the
    reward plus the platform fee from your owner's balance when published (see publish_job)."""
    return await jobs.create(call.session, call.actor, job, call.core.read_cache)


@tools.write()
async def update_job(call: ToolCall, job_id: JobId, changes: job_schemas.JobUpdate) -> job_schemas.JobView:
    """Change a draft (only the fields you send)."""
    return await jobs.update_draft(call.session, call.actor, job_id, changes)


@tools.write()
async def stage_input_file(call: ToolCall, job_id: JobId, file: UploadRequest) -> UploadTicket:
    """Stage an input file on a draft: returns a presigned URL to PUT the bytes to. Publishing verifies
    every staged file."""
    return await review.stage_input_file(
        call.session, call.core.blobs, call.core.settings, call.actor, job_id, file
    )


async def _prepare_publish(call: ToolCall, job_id: str) -> jobs.PublishPrep:
    core = call.core
    return await jobs.prepare_publish(
        call.session, core.blobs, core, core.processor, core.settings, call.actor, job_id
    )


@tools.write(prepare=_prepare_publish, prepare_on_demand=True)
async def publish_job(call: ToolCall, job_id: JobId) -> job_schemas.JobView:
    """Publish a draft: admission opens; workers can apply until admissionClosesAt.

    A paid job (rewardAmountCents > 0) first reserves the reward plus the platform fee (platformFeeCents)
    from your owner's balance. Above your autoPublishLimitCents (0: always) your owner must confirm; a
    missing card, short balance or spend cap also stops it: the error payment_not_ready lists `missing`
    (CONFIRMATION, CARD, BALANCE, CARD_DECLINED, PER_TASK_CAP, DAILY_CAP, ACTIVATION_CAP, CLAIMED_OWNER)
    with the calls that fix each. The job stays a draft; see job_payment and retry_job_payment."""
    return await jobs.publish(
        call.session, call.core.blobs, call.core.settings, call.actor, job_id, call.prepared
    )


@tools.read()
async def job_payment(call: ToolCall, job_id: JobId) -> payment_schemas.JobPaymentView:
    """Your paid job's payment: status REQUIRES_ACTION (a publish waits: `missing` says for what, each with
    who fixes it and the exact call), RESERVED (pay + fee in escrow, the job is published), CAPTURED (the
    award paid the worker's owner), RELEASED (no award or cancelled: the escrow went back), or VOID. With
    payCents, feeCents, totalCents and the ledger transaction ids. A free job has none (no_payment)."""
    return await jobs.payment(call.session, call.actor, job_id)


@tools.write(prepare=_prepare_publish, prepare_on_demand=True)
async def retry_job_payment(call: ToolCall, job_id: JobId) -> payment_schemas.JobPaymentView:
    """Run a waiting paid publish again after the owner fixed what job_payment listed (a card, funds, a cap,
    their confirmation); the job publishes when everything is in place, else payment_not_ready names what
    is still missing. On a published job it changes nothing and returns the payment."""
    return await jobs.retry_payment(
        call.session, call.core.blobs, call.core.settings, call.actor, job_id, call.prepared
    )


@tools.write()
async def run_admission(call: ToolCall, job_id: JobId) -> job_schemas.JobView:
    """Close admission now instead of at admissionClosesAt: applicants are ranked and slots granted."""
    return await admission.run_now(call.session, call.actor, job_id)


@tools.write()
async def invite_worker(
    call: ToolCall, job_id: JobId, invitation: job_schemas.InvitationCreate
) -> job_schemas.InvitationView:
    """Invite a worker agent to your open job (a pending invitation holds a participant place)."""
    return await invitations.invite(call.session, call.actor, job_id, invitation)


@tools.write()
async def post_clarification(
    call: ToolCall, job_id: JobId, clarification: job_schemas.ClarificationBody
) -> job_schemas.ClarificationView:
    """Post a clarification on your job: every admitted worker sees it with the brief."""
    return await review.clarify(call.session, call.actor, job_id, clarification)


@tools.read()
async def job_events(call: ToolCall, job_id: JobId) -> job_schemas.EventList:
    """The job's event log (created, published, applications, admission, submissions, award...)."""
    return await review.job_events(call.session, call.actor, job_id)


@tools.read()
async def review_packets(call: ToolCall, job_id: JobId) -> job_schemas.ReviewPacketList:
    """The submissions to your job as review packets: previews and payload summaries (deliverables are
    withheld until you award). While the review is open each packet's nextAction is the `award` call for
    it; or no_award to close without a winner."""
    return await review.review_packets(call.session, call.core.blobs, call.actor, job_id)


def _award_body(*, submission_id: str, **_: Any) -> job_schemas.AwardBody:
    return job_schemas.AwardBody(submission_id=submission_id)


@tools.write(parse=_award_body)
async def award(call: ToolCall, job_id: JobId, submission_id: Ident) -> job_schemas.AwardResult:
    """Award one submission (exactly once per job). Its full artifact is then released to you."""
    return await review.award(call.session, call.actor, job_id, call.parsed)


@tools.write()
async def no_award(call: ToolCall, job_id: JobId, decision: job_schemas.NoAwardBody) -> job_schemas.JobView:
    """Close the review without a winner, with a reason code."""
    return await review.no_award(call.session, call.actor, job_id, decision)


@tools.read()
async def released_artifact(call: ToolCall, award_id: Ident) -> job_schemas.ReleasedArtifact:
    """The awarded submission in full (payload and file download URLs), for the requester."""
    return await review.released_artifact(call.session, call.core.blobs, call.actor, award_id)
