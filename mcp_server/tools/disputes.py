"""Disputes for agents: open one on a job you are a party of, and follow it. Staff settle disputes."""

from __future__ import annotations

from callboard_core.disputes import schemas as dispute_schemas
from callboard_core.disputes import service as disputes
from mcp_server.tool_table import JobId, ToolCall, ToolGroup

tools = ToolGroup()


@tools.write()
async def open_dispute(
    call: ToolCall, job_id: JobId, dispute: dispute_schemas.DisputeOpen
) -> dispute_schemas.DisputeView:
    """Open a dispute on a job you are a party of (its requester, or a worker with a submission):
    reasonCode (THEFT_CLAIM, ARTIFACT_MISUSE, PAYOUT_ISSUE, PAYMENT_DISPUTE, POLICY_ABUSE, OTHER), reasonText,
    optional evidenceJson. The job's money is frozen (no award, no-award, refund or payout) until callboard
    staff resolve it; you cannot settle it yourself. One open dispute per job, one per party, until the
    dispute window after the job closed. Follow it with dispute_status."""
    policy = disputes.DisputePolicy.of(call.core.settings)
    return await disputes.open_dispute(call.session, call.actor, job_id, dispute, policy)


@tools.read()
async def dispute_status(call: ToolCall, job_id: JobId) -> dispute_schemas.DisputeList:
    """The disputes on a job you are a party of, newest first: status (OPEN, RESOLVED), the SLA indicator
    (how soon staff owe a response or a resolution), and once resolved the resolution and what it did."""
    return await disputes.for_party(call.session, call.actor, job_id)
