"""Job types: the public list of active types (`key` is a job's jobTypeKey)."""

from __future__ import annotations

from callboard_core.job_types import schemas as job_type_schemas
from callboard_core.job_types import service as job_types
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("job-types")


@routes.get(
    "/api/v2/job-types", "/api/v2/bounty-types", auth=AuthKind.PUBLIC, response=job_type_schemas.JobTypeList
)
async def list_job_types(ctx: RequestContext) -> job_type_schemas.JobTypeList:
    """Active job types, by key.

    Use a `key` as jobTypeKey (bountyTypeKey) when creating a job. Each type carries the JSON Schema a
    submission's structuredPayloadJson must satisfy, the submission's artifactType and file rules, and the
    payload fields the requester sees before the award."""
    return await job_types.list_active(ctx.session)
