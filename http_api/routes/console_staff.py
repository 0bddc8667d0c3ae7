"""The console for staff: the overview, tasks with their risk filters (detail, notes and actions), disputes
with the resolve form, payments and the audit log, and read-only lists of users, agents, bug reports, the
taxonomy's tag requests and the waitlist. The same role rules as the JSON routes: the overview and
tasks for every staff role (SUPPORT sees a task's detail redacted), disputes, payments and the audit log for
ADMIN and SUPERADMIN only. Lists share one template (`console/staff_table.html`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from starlette.responses import Response

from callboard_core.bug_reports import schemas as bug_schemas
from callboard_core.bug_reports import service as bug_reports
from callboard_core.capabilities import schemas as capability_schemas
from callboard_core.capabilities import service as capabilities
from callboard_core.disputes import schemas as dispute_schemas
from callboard_core.disputes import service as disputes
from callboard_core.ids import new_id
from callboard_core.principals import Actor
from callboard_core.security.permissions import Permission
from callboard_core.staff import agents as staff_agents_service
from callboard_core.staff import reports, tasks
from callboard_core.staff import schemas as staff_schemas
from callboard_core.staff import users as staff_users_service
from callboard_core.waitlist import schemas as waitlist_schemas
from callboard_core.waitlist import service as waitlist
from http_api.console_support import parsed, viewer
from http_api.pages_support import ErrorPage, money, read_form, redirect, render, shows_errors
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("console_staff")
PAGE_ERROR = ErrorPage("message.html", title="That did not work")
RISKS = get_args(staff_schemas.RiskName)
RESOLUTIONS = get_args(dispute_schemas.ResolutionName)
REASONS = get_args(dispute_schemas.ReasonCodeName)


@dataclass(frozen=True)
class Cell:
    text: str
    href: str | None = None


def _when(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at else "—"


def _table(
    ctx: RequestContext, actor: Actor, title: str, columns: list[str], rows: list[list[Any]], **more: Any
) -> Response:
    cells = [[c if isinstance(c, Cell) else Cell(str(c)) for c in row] for row in rows]
    return render(
        ctx,
        "console/staff_table.html",
        nav="staff",
        **_staff_nav(actor),
        title=title,
        columns=columns,
        rows=cells,
        **more,
    )


def _staff_nav(actor: Actor) -> dict[str, Any]:
    return {"admin": actor.can(Permission.ADMIN_CONSOLE)}


def _params(ctx: RequestContext, **defaults: Any) -> dict[str, Any]:
    """The page's query parameters that a query model takes (empty ones left out)."""
    return {k: v for k, v in ctx.request.query_params.items() if v} | {
        k: v for k, v in defaults.items() if k not in ctx.request.query_params
    }


@routes.get("/staff", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_home(ctx: RequestContext) -> Response:
    """Counts by status, and the way to each list."""
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    overview = await reports.overview(ctx.session)
    return render(ctx, "console/staff_home.html", nav="staff", **_staff_nav(actor), overview=overview)


@routes.get("/staff/tasks", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_tasks(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    q = parsed(staff_schemas.AdminTaskQuery, **_params(ctx))
    listed = await tasks.list_tasks(ctx.session, q)
    rows = [
        [
            Cell(t.title, f"/staff/tasks/{t.id}"),
            t.status.replace("_", " ").capitalize(),
            money(t.reward_amount_cents),
            (t.dispute_sla_state or "—").replace("_", " ").capitalize(),
            "overdue" if t.overdue else "",
            _when(t.created_at),
        ]
        for t in listed.tasks
    ]
    return _table(
        ctx,
        actor,
        f"Tasks ({listed.total})",
        ["Job", "Status", "Reward", "Dispute", "Review", "Created"],
        rows,
        filters=[{"name": "risk", "label": "Risk", "options": RISKS, "value": q.risk}],
        search={"name": "query", "label": "Title or job id", "value": q.query or ""},
    )


@routes.get("/staff/tasks/{taskId}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_task(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    detail = await tasks.detail(ctx.session, actor, ctx.params["taskId"])
    return render(
        ctx,
        "console/staff_task.html",
        nav="staff",
        **_staff_nav(actor),
        d=detail,
        manage=actor.can(Permission.MANAGE_TASKS),
        resolve=actor.can(Permission.RESOLVE_DISPUTE),
        resolutions=RESOLUTIONS,
        reasons=REASONS,
    )


@routes.post("/staff/tasks/{taskId}/action", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def staff_task_action(ctx: RequestContext) -> Response:
    """A note, cancel, dispute, archive or restore (audited; the role rules of the JSON route)."""
    actor = await viewer(ctx, change=True, staff=Permission.STAFF_CONSOLE)
    form = await read_form(ctx)
    body = parsed(
        staff_schemas.TaskAction,
        action=form.get("action"),
        note=form.get("note"),
        reason_code=form.get("reasonCode") or "OTHER",
    )
    await tasks.act(
        ctx.session, actor, ctx.params["taskId"], body, disputes.DisputePolicy.of(ctx.core.settings)
    )
    return redirect(f"/staff/tasks/{ctx.params['taskId']}")


@routes.get("/staff/disputes", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_disputes(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.ADMIN_CONSOLE)
    q = parsed(dispute_schemas.DisputeQuery, **_params(ctx))
    listed = await disputes.list_disputes(ctx.session, q)
    rows = [
        [
            Cell(d.reason_code.replace("_", " ").capitalize(), f"/staff/disputes/{d.id}"),
            Cell(d.job_id, f"/staff/tasks/{d.job_id}"),
            d.status.capitalize(),
            d.sla_state.replace("_", " ").capitalize(),
            (d.resolution or "—").replace("_", " ").capitalize(),
            _when(d.created_at),
        ]
        for d in listed.disputes
    ]
    return _table(
        ctx,
        actor,
        "Disputes",
        ["Reason", "Job", "Status", "SLA", "Resolution", "Opened"],
        rows,
        filters=[
            {"name": "status", "label": "Status", "options": ("OPEN", "RESOLVED"), "value": q.status or ""}
        ],
    )


@routes.get("/staff/disputes/{disputeId}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_dispute(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.ADMIN_CONSOLE)
    dispute = await disputes.detail(ctx.session, ctx.params["disputeId"])
    # The form's own key: sent twice, it resolves once; another staff member's form is a 409.
    return render(
        ctx,
        "console/staff_dispute.html",
        nav="staff",
        **_staff_nav(actor),
        d=dispute,
        resolutions=RESOLUTIONS,
        form_key=new_id("frm"),
    )


@routes.post("/staff/disputes/{disputeId}/resolve", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def staff_resolve(ctx: RequestContext) -> Response:
    """Resolve a dispute (ADMIN, SUPERADMIN), exactly once: the form carries its own idempotency key, so a
    form sent twice resolves once."""
    actor = await viewer(ctx, change=True, staff=Permission.RESOLVE_DISPUTE)
    form = await read_form(ctx)
    amount = form.get("adjustmentAmountCents") or None
    body = parsed(
        dispute_schemas.DisputeResolve,
        resolution=form.get("resolution"),
        resolution_notes=form.get("resolutionNotes"),
        submission_id=form.get("submissionId") or None,
        worker_agent_id=form.get("workerAgentId") or None,
        adjustment_amount_cents=amount,
        idempotency_key=form.get("idempotencyKey") or None,
    )
    await disputes.resolve(ctx.session, actor, ctx.params["disputeId"], body)
    return redirect(f"/staff/disputes/{ctx.params['disputeId']}")


@routes.get("/staff/payments", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_payments(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.ADMIN_CONSOLE)
    q = parsed(staff_schemas.PaymentQuery, **_params(ctx))
    listed = await reports.payments(ctx.session, q)
    rows = [
        [
            Cell(p.job_id, f"/staff/tasks/{p.job_id}"),
            p.status.capitalize(),
            money(p.pay_cents),
            money(p.fee_cents),
            p.user_id,
            _when(p.created_at),
        ]
        for p in listed.payments
    ]
    return _table(
        ctx,
        actor,
        "Payments",
        ["Job", "Status", "Pay", "Fee", "Requester's owner", "Created"],
        rows,
        search={"name": "query", "label": "A payment's, job's or owner's id", "value": q.query or ""},
    )


@routes.get("/staff/audit", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_audit(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.ADMIN_CONSOLE)
    q = parsed(staff_schemas.AuditLogQuery, **_params(ctx))
    listed = await reports.audit_log(ctx.session, q)
    rows = [
        [
            _when(e.created_at),
            e.action,
            f"{e.actor_type} {e.actor_id or ''}".strip(),
            e.actor_role or "—",
            f"{e.target_type} {e.target_id or ''}".strip(),
            e.request_id or "—",
        ]
        for e in listed.entries
    ]
    return _table(
        ctx,
        actor,
        "Audit log",
        ["When", "Action", "Who", "Role", "Target", "Request"],
        rows,
        search={"name": "query", "label": "An actor's or target's id", "value": q.query or ""},
    )


# --- people, agents, bug reports, the taxonomy's requests and the waitlist (read-only lists) ------------


@routes.get("/staff/users", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_users(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    q = parsed(staff_schemas.AdminUserQuery, **_params(ctx))
    listed = await staff_users_service.list_users(ctx.session, q)
    rows = [
        [
            u.email,
            u.name or "—",
            u.role.capitalize(),
            u.status.capitalize(),
            "yes" if u.email_verified else "no",
            _when(u.created_at),
        ]
        for u in listed.users
    ]
    return _table(
        ctx,
        actor,
        f"Users ({listed.total})",
        ["Email", "Name", "Role", "Status", "Verified", "Joined"],
        rows,
        search={"name": "query", "label": "Email or name", "value": q.query or ""},
    )


@routes.get("/staff/agents", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_agents(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    q = parsed(staff_schemas.AdminAgentQuery, **_params(ctx))
    listed = await staff_agents_service.list_agents(ctx.session, q)
    rows = [
        [
            f"{a.name} @{a.handle}",
            a.status.capitalize(),
            a.claim_status.capitalize(),
            f"{a.reputation_score:.1f}",
            a.total_tasks,
            "house" if a.is_house else "",
        ]
        for a in listed.agents
    ]
    return _table(
        ctx,
        actor,
        "Agents",
        ["Agent", "Status", "Claim", "Reputation", "Jobs", ""],
        rows,
        search={"name": "query", "label": "Handle or name", "value": q.query or ""},
    )


@routes.get("/staff/bug-reports", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_bug_reports(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    q = parsed(bug_schemas.BugReportQuery, **_params(ctx))
    listed = await bug_reports.feed(ctx.session, q)
    rows = [
        [
            r.summary,
            r.status.replace("_", " ").capitalize(),
            "yes" if r.redacted_secrets else "no",
            r.triage_notes or "—",
        ]
        for r in listed.reports
    ]
    return _table(
        ctx, actor, f"Bug reports ({listed.total})", ["Summary", "Status", "Secrets redacted", "Triage"], rows
    )


@routes.get("/staff/waitlist", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_waitlist(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    q = parsed(waitlist_schemas.WaitlistQuery, **_params(ctx))
    listed = await waitlist.list_signups(ctx.session, q)
    rows = [
        [s.email, s.name, s.role.capitalize(), s.status.capitalize(), s.use_case, _when(s.created_at)]
        for s in listed.signups
    ]
    return _table(
        ctx,
        actor,
        f"Waitlist ({listed.total})",
        ["Email", "Name", "Role", "Status", "Use case", "Joined"],
        rows,
        search={"name": "query", "label": "Email or name", "value": q.query or ""},
    )


@routes.get("/staff/tag-requests", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_tag_requests(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    q = parsed(capability_schemas.TagRequestQuery, **_params(ctx))
    listed = await capabilities.list_requests(ctx.session, q)
    rows = [
        [r.raw_text, r.status.capitalize(), r.explanation or "—", r.agent_id or "—"] for r in listed.requests
    ]
    return _table(ctx, actor, "Capability tag requests", ["Requested", "Status", "Why", "Agent"], rows)
