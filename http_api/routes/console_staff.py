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
USER_STATUSES = get_args(staff_schemas.UserStatusName)
ROLES = get_args(staff_schemas.RoleName)
AGENT_STATUSES = get_args(staff_schemas.AgentStatusName)
RESOLUTIONS = get_args(dispute_schemas.ResolutionName)
REASONS = get_args(dispute_schemas.ReasonCodeName)


@dataclass(frozen=True)
class Cell:
    text: str
    href: str | None = None


@dataclass(frozen=True)
class Choice:
    """A select of a staff form (`value` preselected)."""

    name: str
    label: str
    options: tuple[str, ...]
    value: str = ""


@dataclass(frozen=True)
class StaffForm:
    """One action on a record's page: a POST to `action` with a select or two and a reason."""

    action: str
    button: str
    choices: tuple[Choice, ...] = ()
    reason: bool = True


def _when(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at else "—"


def _table(
    ctx: RequestContext, actor: Actor, title: str, columns: list[str], rows: list[list[Any]], **more: Any
) -> Response:
    cells = [[c if isinstance(c, (Cell, StaffForm)) else Cell(str(c)) for c in row] for row in rows]
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
            Cell(u.email, f"/staff/users/{u.id}"),
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
            Cell(f"{a.name} @{a.handle}", f"/staff/agents/{a.id}"),
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


def _signup_cells(s: waitlist_schemas.WaitlistSignup) -> list[Any]:
    return [s.email, s.name, s.role.capitalize(), s.status.capitalize(), s.use_case, _when(s.created_at)]


def _signup_actions(s: waitlist_schemas.WaitlistSignup) -> list[Any]:
    decide = Choice("status", f"Status of {s.email}", ("APPROVED", "REJECTED", "PENDING"), s.status)
    invite = waitlist.convertible(s.status)
    return [
        StaffForm(f"/staff/waitlist/{s.id}", "Set", (decide,), reason=False),
        StaffForm(f"/staff/waitlist/{s.id}/convert", "Invite", reason=False) if invite else "",
    ]


@routes.get("/staff/waitlist", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_waitlist(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    q = parsed(waitlist_schemas.WaitlistQuery, **_params(ctx))
    listed = await waitlist.list_signups(ctx.session, q)
    rows = [[*_signup_cells(s), *_signup_actions(s)] for s in listed.signups]
    return _table(
        ctx,
        actor,
        f"Waitlist ({listed.total})",
        ["Email", "Name", "Role", "Status", "Use case", "Joined", "Decide", "Account"],
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


# --- a user's and an agent's record, with the staff actions on them --------------------------------------


def _record(ctx: RequestContext, actor: Actor, title: str, **more: Any) -> Response:
    return render(ctx, "console/staff_record.html", nav="staff", **_staff_nav(actor), title=title, **more)


@routes.get("/staff/users/{userId}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_user(ctx: RequestContext) -> Response:
    """A user: their agents and keys; for MODERATOR and above their balance and audit entries; suspend or
    reinstate (SUPERADMIN also deletes and changes the role)."""
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    d = await staff_users_service.detail(ctx.session, actor, ctx.params["userId"])
    u = d.user
    base = f"/staff/users/{u.id}"
    forms = [
        StaffForm(
            base + "/status", "Change the status", (Choice("status", "Status", USER_STATUSES, u.status),)
        )
    ]
    if actor.can(Permission.CHANGE_USER_ROLE):
        forms.append(
            StaffForm(base + "/role", "Change the role", (Choice("role", "Role", ROLES, u.role),), False)
        )
    facts = [
        ("Name", u.name or "—"),
        ("Role", u.role.capitalize()),
        ("Status", u.status.capitalize()),
        ("Email verified", "yes" if u.email_verified else "no"),
        ("Joined", _when(u.created_at)),
        ("Live API keys", str(d.active_api_keys)),
    ]
    if d.balance is not None:
        facts.append(("Available balance", money(d.balance.available_cents)))
    return _record(
        ctx,
        actor,
        u.email,
        facts=facts,
        redacted=d.redacted,
        tables=[
            (
                "Agents",
                ["Agent", "Status"],
                [
                    [Cell(f"{a.name} @{a.handle}", f"/staff/agents/{a.id}"), a.status.capitalize()]
                    for a in d.agents
                ],
            )
        ],
        audit=d.audit_entries,
        forms=forms,
    )


@routes.post("/staff/users/{userId}/status", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def staff_user_status(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True, staff=Permission.STAFF_CONSOLE)
    form = await read_form(ctx)
    body = parsed(staff_schemas.StatusUpdate, status=form.get("status"), reason=form.get("reason") or None)
    await staff_users_service.change_status(ctx.session, actor, ctx.params["userId"], body)
    return redirect(f"/staff/users/{ctx.params['userId']}")


@routes.post("/staff/users/{userId}/role", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def staff_user_role(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True, staff=Permission.STAFF_CONSOLE)
    form = await read_form(ctx)
    body = parsed(staff_schemas.RoleUpdate, role=form.get("role"))
    await staff_users_service.change_role(ctx.session, actor, ctx.params["userId"], body)
    return redirect(f"/staff/users/{ctx.params['userId']}")


@routes.get("/staff/agents/{agentId}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def staff_agent(ctx: RequestContext) -> Response:
    """An agent: its owner, keys and (MODERATOR and above) audit entries; set its status (suspending revokes
    its keys)."""
    actor = await viewer(ctx, staff=Permission.STAFF_CONSOLE)
    d = await staff_agents_service.detail(ctx.session, actor, ctx.params["agentId"])
    a = d.agent
    owner = Cell(d.owner.email, f"/staff/users/{d.owner.id}") if d.owner else Cell("unclaimed")
    return _record(
        ctx,
        actor,
        f"{a.name} @{a.handle}",
        facts=[
            ("Status", a.status.capitalize()),
            ("Claim", a.claim_status.capitalize()),
            ("Reputation", f"{a.reputation_score:.1f}"),
            ("Jobs", str(a.total_tasks)),
        ],
        owner=owner,
        redacted=d.redacted,
        tables=[
            (
                "API keys",
                ["Prefix", "Scopes", "State", "Last used"],
                [
                    [k.prefix, ", ".join(k.scopes), "revoked" if k.revoked else "live", _when(k.last_used_at)]
                    for k in d.api_keys
                ],
            )
        ],
        audit=d.audit_entries,
        forms=[
            StaffForm(
                f"/staff/agents/{a.id}/status",
                "Change the status",
                (Choice("status", "Status", AGENT_STATUSES, a.status),),
            )
        ],
    )


@routes.post("/staff/agents/{agentId}/status", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def staff_agent_status(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True, staff=Permission.STAFF_CONSOLE)
    form = await read_form(ctx)
    body = parsed(
        staff_schemas.AgentStatusUpdate, status=form.get("status"), reason=form.get("reason") or None
    )
    await staff_agents_service.change_status(ctx.session, actor, ctx.params["agentId"], body)
    return redirect(f"/staff/agents/{ctx.params['agentId']}")


@routes.post("/staff/waitlist/{signupId}", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def staff_waitlist_update(ctx: RequestContext) -> Response:
    """Approve, reject or set back a signup (audited)."""
    actor = await viewer(ctx, change=True, staff=Permission.STAFF_CONSOLE)
    form = await read_form(ctx)
    body = parsed(waitlist_schemas.WaitlistUpdate, status=form.get("status"))
    await waitlist.update_signup(ctx.session, actor, ctx.params["signupId"], body)
    return redirect("/staff/waitlist")


@routes.post("/staff/waitlist/{signupId}/convert", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def staff_waitlist_convert(ctx: RequestContext) -> Response:
    """Make the approved signup an account and mail the person a sign-in link."""
    actor = await viewer(ctx, change=True, staff=Permission.STAFF_CONSOLE)
    await waitlist.convert(ctx.session, ctx.core.mailer, ctx.core.settings, actor, ctx.params["signupId"])
    return redirect("/staff/waitlist")
