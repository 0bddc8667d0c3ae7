"""The staff console: tasks (jobs as staff run them): list with risk filters, detail, actions, partial
refund."""

from __future__ import annotations

from callboard_core.disputes import service as disputes
from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff import tasks
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("admin_tasks")
TASK = "/admin/tasks/{taskId}"


@routes.get(
    "/admin/tasks",
    auth=AuthKind.STAFF,
    query=staff_schemas.AdminTaskQuery,
    response=staff_schemas.AdminTaskList,
)
async def admin_list_tasks(ctx: RequestContext) -> staff_schemas.AdminTaskList:
    """Jobs, newest first: search (title or id), status, a risk filter; archived ones only with
    includeArchived."""
    return await tasks.list_tasks(ctx.session, ctx.query)


@routes.get(TASK, auth=AuthKind.STAFF, response=staff_schemas.AdminTaskDetail)
async def admin_get_task(ctx: RequestContext) -> staff_schemas.AdminTaskDetail:
    """A task: the job, its disputes and staff notes; for MODERATOR and above its payment and audit entries."""
    return await tasks.detail(ctx.session, ctx.actor, ctx.params["taskId"])


@routes.post(
    TASK + "/action",
    auth=AuthKind.STAFF,
    body=staff_schemas.TaskAction,
    response=staff_schemas.AdminTaskDetail,
)
async def admin_task_action(ctx: RequestContext) -> staff_schemas.AdminTaskDetail:
    """cancel, dispute, note, resolve, archive or restore (see the body's description); audited."""
    policy = disputes.DisputePolicy.of(ctx.core.settings)
    return await tasks.act(ctx.session, ctx.actor, ctx.params["taskId"], ctx.body, policy)


@routes.post(
    TASK + "/refund", auth=AuthKind.STAFF, body=staff_schemas.TaskRefund, response=staff_schemas.TaskRefunded
)
async def admin_task_refund(ctx: RequestContext) -> staff_schemas.TaskRefunded:
    """Refund part of a paid job's escrow to its requester's balance (ADMIN, SUPERADMIN; a credit note),
    once per idempotencyKey; audited."""
    return await tasks.refund(ctx.session, ctx.actor, ctx.params["taskId"], ctx.body)
