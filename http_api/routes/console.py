"""The web console for owners: server-rendered pages that work without JavaScript, calling the same core
services as the JSON routes (no second set of rules). Signed out, a page sends the person to the sign-in
page and back; a form posts with the session from a trusted origin; a refusal shows its message on a page.

Pages: billing (balance, top-up through the processor's hosted page and back to a page that says what
happened, the statement, documents as printable pages), jobs (the list; a job's state, payment, timeline,
review packets with award and no-award, disputes), notifications and their preferences (the page the
unsubscribe mail points to).
The home page is `/` (routes/pages.py)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, get_args

from pydantic import ValidationError
from starlette.responses import Response

from callboard_core import clock
from callboard_core.agents import dashboard, lifecycle
from callboard_core.agents import keys as agent_keys
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.api_keys import schemas as key_schemas
from callboard_core.billing import cards, topups
from callboard_core.billing import schemas as billing_schemas
from callboard_core.billing import service as billing
from callboard_core.directory import schemas as directory_schemas
from callboard_core.directory import service as directory
from callboard_core.disputes import schemas as dispute_schemas
from callboard_core.disputes import service as disputes
from callboard_core.documents import service as documents
from callboard_core.errors import CallboardError, field_error, from_pydantic
from callboard_core.job_types import service as job_types
from callboard_core.jobs import participation, review
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs import service as jobs
from callboard_core.offerings import schemas as offering_schemas
from callboard_core.offerings import service as offerings
from callboard_core.onboarding import schemas as onboarding_schemas
from callboard_core.onboarding import sessions as onboarding
from callboard_core.owner_notifications import service as notifications
from callboard_core.owner_notifications.schemas import PreferenceChange, PreferencesUpdate
from callboard_core.owner_notifications.states import OwnerNotificationType
from callboard_core.payouts import accounts as payout_accounts
from callboard_core.payouts import schemas as payout_schemas
from http_api.console_support import parsed, viewer
from http_api.pages_support import ErrorPage, SignInFirst, read_form, redirect, render, shows_errors
from http_api.route_table import AuthKind, RequestContext, RouteGroup
from runtime_kits import RuntimeTarget

routes = RouteGroup("console")
PAGE_ERROR = ErrorPage("message.html", title="That did not work")
STATEMENT_PAGE = 20
JOB_STATUSES = get_args(job_schemas.JobStatusName)
NO_AWARD_REASONS = get_args(job_schemas.NoAwardReason)
DISPUTE_REASONS = get_args(dispute_schemas.ReasonCodeName)
RUNTIME_TARGETS = get_args(RuntimeTarget)
MINT_ROLES = get_args(onboarding_schemas.MintRole)


def handed_on(step: Callable[[RequestContext], Awaitable[Any]]) -> Callable[[RequestContext], Awaitable[Any]]:
    """A page's prepare step (the processor's calls, outside the write transaction) runs before the page
    handler's error page can catch anything: its refusal is handed on to the handler, which raises it
    (`prepared`) and so shows it on the page."""

    @functools.wraps(step)
    async def run(ctx: RequestContext) -> Any:
        try:
            return await step(ctx)
        except (CallboardError, SignInFirst) as exc:  # a signed-out visitor: the sign-in page, then back
            return exc
        except ValidationError as exc:
            return from_pydantic(exc)

    return run


def prepared(ctx: RequestContext) -> Any:
    """What the route's prepare step made, or its refusal raised here (see `handed_on`)."""
    if isinstance(ctx.prepared, Exception):
        raise ctx.prepared
    return ctx.prepared


def _cents(raw: str | None, field: str) -> int:
    """A dollar amount typed by a person ("25", "25.50", "$1,000") as cents."""
    text = (raw or "").strip().replace("$", "").replace(",", "")
    try:
        whole, _, part = text.partition(".")
        if not whole.isdigit() or (part and (not part.isdigit() or len(part) > 2)):
            raise ValueError(text)
        return int(whole) * 100 + int(part.ljust(2, "0") or 0)
    except ValueError:
        raise field_error(
            field, "Type an amount in dollars, such as 25 or 25.50.", "invalid_amount"
        ) from None


# --- billing ---------------------------------------------------------------------------------------------


@routes.get("/billing", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def billing_page(ctx: RequestContext) -> Response:
    """Billing: the balance, a top-up form, cards and the statement (paged)."""
    actor = await viewer(ctx)
    cursor = ctx.request.query_params.get("cursor") or None
    statement = await billing.statement(ctx.session, actor, cursor=cursor, limit=STATEMENT_PAGE)
    return render(
        ctx,
        "console/billing.html",
        nav="billing",
        statement=statement,
        balance=statement.profile,
        saved=ctx.request.query_params.get("saved") or ctx.request.query_params.get("card"),
    )


@handed_on
async def _start_topup(ctx: RequestContext) -> Any:
    """The prepare step of the top-up form: the processor's hosted checkout."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = billing_schemas.TopUpBody(
        amount_cents=_cents(form.get("amount"), "amount"),
        return_url=ctx.core.settings.base_url.rstrip("/") + "/billing/topup/done",
    )
    return await topups.prepare_topup(ctx.core.processor, ctx.core, ctx.core.settings, actor, body, None)


@routes.post("/billing/topup", auth=AuthKind.PUBLIC, page=True, idempotent=False, prepare=_start_topup)
@shows_errors(PAGE_ERROR)
async def billing_topup(ctx: RequestContext) -> Response:
    """Start a top-up: on to the processor's hosted checkout, which comes back to /billing/topup/done."""
    row, checkout = prepared(ctx)
    started = await topups.record_checkout(ctx.session, row.id, checkout)
    return redirect(started.url)


@routes.get("/billing/topup/done", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def billing_topup_done(ctx: RequestContext) -> Response:
    """Back from the processor's page: what happened to the newest top-up, and the balance now."""
    actor = await viewer(ctx)
    return render(
        ctx,
        "console/topup_done.html",
        nav="billing",
        topup=await topups.latest(ctx.session, actor),
        balance=await billing.balance(ctx.session, actor),
    )


# --- notifications ---------------------------------------------------------------------------------------


@routes.get("/notifications", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def notifications_page(ctx: RequestContext) -> Response:
    """Your notifications, newest first (paged); mark one read."""
    actor = await viewer(ctx)
    listed = await notifications.list_for(
        ctx.session,
        actor.require_user(),
        ctx.core.settings.base_url,
        cursor=ctx.request.query_params.get("cursor") or None,
        limit=STATEMENT_PAGE,
    )
    return render(ctx, "console/notifications.html", nav="notifications", listed=listed)


@routes.post("/notifications/{notificationId}/read", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def notification_read(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True)
    await notifications.mark_read(
        ctx.session, actor.require_user(), ctx.params["notificationId"], ctx.core.settings.base_url
    )
    return redirect("/notifications")


@routes.get("/notifications/preferences", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def preferences_page(ctx: RequestContext) -> Response:
    """Which notifications reach you by email and in the console, per type."""
    actor = await viewer(ctx)
    prefs = await notifications.preferences(ctx.session, actor.require_user())
    return render(
        ctx,
        "console/preferences.html",
        nav="notifications",
        prefs=prefs.preferences,
        label=notifications.type_label,
        saved=ctx.request.query_params.get("saved") == "1",
    )


@routes.post("/notifications/preferences", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def preferences_save(ctx: RequestContext) -> Response:
    """Save every type's two switches at once (an unticked box is off)."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    changes = [
        PreferenceChange(
            type=t.value,
            email_enabled=form.get(f"email:{t.value}") == "on",
            in_app_enabled=form.get(f"in_app:{t.value}") == "on",
        )
        for t in OwnerNotificationType
    ]
    await notifications.update_preferences(
        ctx.session, actor.require_user(), PreferencesUpdate(preferences=changes)
    )
    return redirect("/notifications/preferences?saved=1")


# --- documents -------------------------------------------------------------------------------------------


@routes.get("/billing/documents", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def documents_page(ctx: RequestContext) -> Response:
    """Your receipts, invoices and credit notes, newest first (paged)."""
    actor = await viewer(ctx)
    listed = await documents.list_documents(
        ctx.session, actor, cursor=ctx.request.query_params.get("cursor") or None, limit=STATEMENT_PAGE
    )
    return render(ctx, "console/documents.html", nav="billing", listed=listed)


@routes.get("/billing/documents/{documentId}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def document_page(ctx: RequestContext) -> Response:
    """One document as a printable page (the mail's link: signed out, sign in first and come back)."""
    actor = await viewer(ctx)
    document = await documents.get_document(ctx.session, actor, ctx.params["documentId"])
    return render(ctx, "document.html", doc=document, issuer=documents.issuer(ctx.core.settings))


# --- jobs ------------------------------------------------------------------------------------------------


@routes.get("/jobs", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def jobs_page(ctx: RequestContext) -> Response:
    """The jobs your agents posted, newest first (paged), filtered by status."""
    actor = await viewer(ctx)
    status = ctx.request.query_params.get("status") or None
    query = job_schemas.OwnerJobsQuery.model_validate(
        {"status": status, "cursor": ctx.request.query_params.get("cursor") or None, "limit": STATEMENT_PAGE}
    )
    listed = await jobs.list_for_owner(ctx.session, actor, query)
    work = await participation.outcomes_for_owner(ctx.session, actor, limit=STATEMENT_PAGE)
    return render(
        ctx, "console/jobs.html", nav="jobs", listed=listed, work=work, chosen=status, statuses=JOB_STATUSES
    )


async def _new_job_page(ctx: RequestContext, actor: Any) -> Response:
    listed = await dashboard.list_mine(ctx.session, actor, agent_schemas.AgentListQuery(limit=200))
    return render(
        ctx,
        "console/job_new.html",
        nav="jobs",
        agents=[a for a in listed.agents if a.status == "ACTIVE"],
        job_types=(await job_types.list_active(ctx.session)).job_types,
        default_type=jobs.DEFAULT_JOB_TYPE,
    )


@routes.get("/jobs/new", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def job_new_page(ctx: RequestContext) -> Response:
    """Post a job for one of your agents: a draft, published from its page."""
    return await _new_job_page(ctx, await viewer(ctx))


def _hours(raw: str | None, field: str) -> timedelta:
    text = (raw or "").strip()
    if not text.isdigit() or not 1 <= int(text) <= 24 * 90:
        raise field_error(field, "Type a whole number of hours, from 1 to 2160.", "invalid_hours")
    return timedelta(hours=int(text))


@routes.post("/jobs/new", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def job_create(ctx: RequestContext) -> Response:
    """Create the draft (the same rules as POST /api/v2/owner/jobs): its windows are counted from now in
    hours, each after the one before."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    now = clock.now()
    admission = now + _hours(form.get("admissionHours"), "admissionHours")
    submission = admission + _hours(form.get("submissionHours"), "submissionHours")
    body = parsed(
        job_schemas.OwnerJobCreate,
        requester_agent_id=form.get("requesterAgentId", ""),
        title=form.get("title", ""),
        description=form.get("description") or None,
        job_type_key=form.get("jobTypeKey") or None,
        reward_amount_cents=_cents(form.get("reward") or "0", "reward"),
        participant_cap=form.get("participantCap") or 1,
        admission_closes_at=admission,
        fair_work_duration_ms=int(_hours(form.get("workHours"), "workHours").total_seconds() * 1000),
        latest_submission_deadline_at=submission,
        review_deadline_at=submission + _hours(form.get("reviewHours"), "reviewHours"),
    )
    created = await jobs.create(ctx.session, actor, body)
    return redirect(f"/jobs/{created.id}")


@handed_on
async def _prepare_publish(ctx: RequestContext) -> Any:
    """The prepare step of the publish button: the processor's calls for a paid job's hold."""
    actor = await viewer(ctx, change=True)
    core = ctx.core
    made = await jobs.prepare_publish(
        ctx.session, core.blobs, core, core.processor, core.settings, actor, ctx.params["jobId"]
    )
    return actor, made


@routes.post(
    "/jobs/{jobId}/publish", auth=AuthKind.PUBLIC, page=True, idempotent=False, prepare=_prepare_publish
)
@shows_errors(PAGE_ERROR)
async def job_publish(ctx: RequestContext) -> Response:
    """Publish the draft: a paid job first holds its reward and fee from your balance (your publish is your
    confirmation); what is missing (funds, a card, room under a cap) is shown with its fix."""
    actor, made = prepared(ctx)
    job_id = ctx.params["jobId"]
    await jobs.publish(ctx.session, ctx.core.blobs, ctx.core.settings, actor, job_id, made)
    return redirect(f"/jobs/{job_id}")


@routes.get("/jobs/{jobId}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def job_page(ctx: RequestContext) -> Response:
    """A job of yours: its state, payment, timeline, review packets (award / no award) and disputes."""
    actor = await viewer(ctx)
    job_id = ctx.params["jobId"]
    job_row = await jobs.requester_job(ctx.session, actor, job_id)  # held: loaded once (see _agent_page)
    job = jobs.view(job_row)
    payment = None
    if job.reward_amount_cents > 0 and job.status != "DRAFT":
        payment = await jobs.payment(ctx.session, actor, job_id)
    packets = None
    if job.status in ("IN_REVIEW", "AWARDED", "NO_AWARD"):
        packets = await review.review_packets(ctx.session, ctx.core.blobs, actor, job_id)
    return render(
        ctx,
        "console/job.html",
        nav="jobs",
        job=job,
        payment=payment,
        packets=packets,
        timeline=await review.job_events(ctx.session, actor, job_id),
        disputes=(await disputes.for_party(ctx.session, actor, job_id)).disputes,
        reasons=NO_AWARD_REASONS,
        dispute_reasons=DISPUTE_REASONS,
    )


@routes.post("/jobs/{jobId}/award", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def job_award(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = job_schemas.AwardBody(submission_id=form.get("submissionId", ""))
    await review.award(ctx.session, actor, ctx.params["jobId"], body)
    return redirect(f"/jobs/{ctx.params['jobId']}")


@routes.post("/jobs/{jobId}/no-award", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def job_no_award(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = parsed(
        job_schemas.NoAwardBody,
        reason_code=form.get("reasonCode") or "OTHER",
        reason_text=form.get("reasonText") or None,
    )
    await review.no_award(ctx.session, actor, ctx.params["jobId"], body)
    return redirect(f"/jobs/{ctx.params['jobId']}")


@routes.post("/jobs/{jobId}/disputes", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def job_open_dispute(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = parsed(
        dispute_schemas.DisputeOpen, reason_code=form.get("reasonCode"), reason_text=form.get("reasonText")
    )
    await disputes.open_dispute(
        ctx.session, actor, ctx.params["jobId"], body, disputes.DisputePolicy.of(ctx.core.settings)
    )
    return redirect(f"/jobs/{ctx.params['jobId']}")


# --- agents ----------------------------------------------------------------------------------------------


@routes.get("/my/agents", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def agents_page(ctx: RequestContext) -> Response:
    """Your agents (archived ones too, marked)."""
    return await _agents_page(ctx, await viewer(ctx))


async def _agents_page(ctx: RequestContext, actor: Any, **extra: Any) -> Response:
    listed = await dashboard.list_mine(
        ctx.session, actor, agent_schemas.AgentListQuery(include_archived=True, limit=200)
    )
    return render(ctx, "console/agents.html", nav="agents", agents=listed.agents, **extra)


async def _agent_page(ctx: RequestContext, actor: Any, agent_id: str, **extra: Any) -> Response:
    # Each service below checks the agent is the owner's with `session.get`. The session's identity map
    # holds rows weakly: this local keeps the row (and its capabilities) alive, so it is read once per page.
    agent_row = await agents.get_owned(ctx.session, agent_id, actor.require_user())
    keys = [k for k in (await agent_keys.list_for_owner(ctx.session, actor)).keys if k.agent_id == agent_id]
    return render(
        ctx,
        "console/agent.html",
        nav="agents",
        agent=await agents.to_dashboard(ctx.session, agent_row),
        policy=await agents.policy_of(ctx.session, actor, agent_id),
        keys=keys,
        blockers=await lifecycle.lifecycle_blockers(ctx.session, actor, agent_id),
        offerings=(await offerings.list_for(ctx.session, actor, agent_id)).offerings,
        work=await participation.outcomes(ctx.session, actor, agent_id),
        **extra,
    )


@routes.get("/my/agents/{agentId}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def agent_page(ctx: RequestContext) -> Response:
    """One agent: its state, policy, keys and lifecycle."""
    actor = await viewer(ctx)
    return await _agent_page(ctx, actor, ctx.params["agentId"], saved=ctx.request.query_params.get("saved"))


@routes.post("/my/agents/{agentId}/policy", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def agent_policy(ctx: RequestContext) -> Response:
    """Set how much a paid job of this agent may cost without your confirmation, and whether it takes work
    (its worker role, which lists it in the public directory)."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = parsed(
        agent_schemas.AgentPolicyUpdate,
        auto_publish_limit_cents=_cents(form.get("limit"), "limit"),
        worker_enabled=form.get("worker") == "on",
    )
    await agents.update_policy(ctx.session, actor, ctx.params["agentId"], body)
    return redirect(f"/my/agents/{ctx.params['agentId']}?saved=policy")


@routes.post("/my/agents/{agentId}/keys", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def agent_mint_key(ctx: RequestContext) -> Response:
    """Mint a key for the agent: shown on the answer page once, never again (no redirect carries it)."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    created = await agent_keys.create_for_owner(
        ctx.session,
        actor,
        parsed(key_schemas.ApiKeyCreate, label=form.get("label") or None, agent_id=ctx.params["agentId"]),
    )
    return await _agent_page(ctx, actor, ctx.params["agentId"], new_key=created)


@routes.post("/my/agents/{agentId}/keys/{keyId}/rotate", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def agent_rotate_key(ctx: RequestContext) -> Response:
    """Replace a key: the new one shown on the answer page once, the old one stops working now."""
    actor = await viewer(ctx, change=True)
    created = await agent_keys.rotate_for_owner(
        ctx.session, actor, ctx.params["agentId"], ctx.params["keyId"]
    )
    return await _agent_page(ctx, actor, ctx.params["agentId"], new_key=created)


@routes.post("/my/agents/{agentId}/delete", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def agent_delete(ctx: RequestContext) -> Response:
    """Delete the agent for good (its handle typed to confirm); refused with the blockers while work or
    money is in flight."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = parsed(agent_schemas.AgentDeleteBody, confirm_handle=form.get("confirmHandle", ""))
    await lifecycle.delete_agent(ctx.session, actor, ctx.params["agentId"], body)
    return redirect("/my/agents?saved=deleted")


@routes.post("/my/agents/{agentId}/keys/{keyId}/revoke", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def agent_revoke_key(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True)
    await agent_keys.revoke_for_owner_key(ctx.session, actor, ctx.params["keyId"])
    return redirect(f"/my/agents/{ctx.params['agentId']}?saved=revoked")


@routes.post("/my/agents/{agentId}/lifecycle", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def agent_lifecycle(ctx: RequestContext) -> Response:
    """Deactivate, reactivate, archive or unarchive (the blockers, if any, are shown as the refusal)."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    agent_id, reason = ctx.params["agentId"], (form.get("reason") or None)
    moves = {
        "deactivate": lambda: lifecycle.deactivate(ctx.session, actor, agent_id, reason),
        "reactivate": lambda: lifecycle.reactivate(ctx.session, actor, agent_id),
        "archive": lambda: lifecycle.archive(ctx.session, actor, agent_id, reason),
        "unarchive": lambda: lifecycle.unarchive(ctx.session, actor, agent_id),
    }
    move = moves.get(form.get("move", ""))
    if move is None:
        raise field_error("move", "Choose deactivate, reactivate, archive or unarchive.", "unknown_move")
    await move()
    return redirect(f"/my/agents/{agent_id}?saved={form['move']}")


@routes.post("/my/agents/{agentId}/offerings", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def agent_add_offering(ctx: RequestContext) -> Response:
    """Publish a Service Offering in the directory (an empty price: on request)."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = parsed(
        offering_schemas.OfferingCreate,
        title=form.get("title", ""),
        description=form.get("description") or None,
        capability_slug=form.get("capabilitySlug") or None,
        price_cents=_optional_cents(form.get("price"), "price"),
        delivery_hours=form.get("deliveryHours") or None,
    )
    await offerings.create(ctx.session, actor, body, ctx.params["agentId"])
    return redirect(f"/my/agents/{ctx.params['agentId']}?saved=offering")


@routes.post(
    "/my/agents/{agentId}/offerings/{offeringId}/archive", auth=AuthKind.PUBLIC, page=True, idempotent=False
)
@shows_errors(PAGE_ERROR)
async def agent_archive_offering(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True)
    await offerings.archive(ctx.session, actor, ctx.params["offeringId"], ctx.params["agentId"])
    return redirect(f"/my/agents/{ctx.params['agentId']}?saved=offering_archived")


@routes.post("/my/enroll-tokens", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def enroll_token(ctx: RequestContext) -> Response:
    """Mint an enroll token: an agent that registers with it is yours at once (shown once, one hour)."""
    actor = await viewer(ctx, change=True)
    minted = await agents.mint_enroll_token(ctx.session, ctx.core.settings, actor)
    return await _agents_page(ctx, actor, enroll=minted)


# --- connect an agent (onboarding sessions and runtime kits) ----------------------------------------------


@routes.get("/connect", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def connect_page(ctx: RequestContext) -> Response:
    """Connect an agent: start an onboarding session (a prompt to paste to the agent), then activate it for
    its runtime and copy the kit."""
    actor = await viewer(ctx)
    listed = await onboarding.list_for_owner(ctx.session, actor)
    return render(
        ctx, "console/connect.html", nav="agents", listed=listed, targets=RUNTIME_TARGETS, roles=MINT_ROLES
    )


@routes.post("/connect", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def connect_start(ctx: RequestContext) -> Response:
    """Mint an onboarding session: its prompt and token are shown on this answer once."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = parsed(onboarding_schemas.MintBody, role=form.get("role") or None)
    minted = await onboarding.mint(ctx.session, ctx.core.settings, actor, body)
    listed = await onboarding.list_for_owner(ctx.session, actor)
    return render(
        ctx,
        "console/connect.html",
        nav="agents",
        listed=listed,
        targets=RUNTIME_TARGETS,
        roles=MINT_ROLES,
        minted=minted,
    )


@routes.post("/connect/{sessionId}/activate", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def connect_activate(ctx: RequestContext) -> Response:
    """Activate the session for a runtime with safe defaults: the agent, its key (shown once), the install
    command and the kit's MCP configuration to copy."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    body = parsed(onboarding_schemas.ActivationBody, runtime_target=form.get("runtimeTarget"))
    if form.get("agentName"):  # the owner names the agent here when it has not named itself yet
        named = parsed(onboarding_schemas.OwnerDraftUpdate, agent_name=form["agentName"])
        await onboarding.update(ctx.session, actor, ctx.params["sessionId"], named)
    activated = await onboarding.activate(
        ctx.session, ctx.core.settings, actor, ctx.params["sessionId"], body
    )
    return render(ctx, "console/kit.html", nav="agents", activated=activated)


# --- payouts ---------------------------------------------------------------------------------------------


@routes.get("/payouts", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def payouts_page(ctx: RequestContext) -> Response:
    """Your payout account (as the processor reports it now) and your recent payouts."""
    actor = await viewer(ctx)
    status = await payout_accounts.status(ctx.session, ctx.core, ctx.core.processor, actor)
    return render(ctx, "console/payouts.html", nav="billing", account=status)


@handed_on
async def _payout_link(ctx: RequestContext) -> Any:
    """The prepare step of the payout setup form: the processor's account and onboarding link."""
    actor = await viewer(ctx, change=True)
    back = ctx.core.settings.base_url.rstrip("/") + "/payouts"
    body = payout_schemas.OnboardingLinkBody(return_url=back, refresh_url=back)
    prepared = await payout_accounts.prepare_link(
        ctx.session, ctx.core, ctx.core.processor, ctx.core.settings, actor, None, body
    )
    return actor, prepared


@routes.post("/payouts/setup", auth=AuthKind.PUBLIC, page=True, idempotent=False, prepare=_payout_link)
@shows_errors(PAGE_ERROR)
async def payouts_setup(ctx: RequestContext) -> Response:
    """On to the processor's hosted payout onboarding, which comes back to /payouts."""
    actor, link_prepared = prepared(ctx)
    link = await payout_accounts.onboarding_link(ctx.session, actor, None, link_prepared)
    return redirect(link.url)


# --- the public directory --------------------------------------------------------------------------------


@routes.get("/directory", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def directory_page(ctx: RequestContext) -> Response:
    """The public directory of worker agents (no sign-in): search, a capability, pages."""
    query = parsed(
        directory_schemas.DirectoryQuery, **{k: v for k, v in ctx.request.query_params.items() if v}
    )
    found = await directory.search(ctx.session, query)
    return render(ctx, "console/directory.html", found=found, query=query)


@routes.get("/directory/{handle}", auth=AuthKind.PUBLIC, page=True)
@shows_errors(PAGE_ERROR)
async def directory_profile_page(ctx: RequestContext) -> Response:
    """A worker agent's public profile with its Service Offerings."""
    return render(ctx, "console/profile.html", p=await directory.profile(ctx.session, ctx.params["handle"]))


# --- billing settings: cards, auto top-up, caps ----------------------------------------------------------


@handed_on
async def _card_setup(ctx: RequestContext) -> Any:
    """The prepare step of "add a card": the processor's hosted card form."""
    actor = await viewer(ctx, change=True)
    back = ctx.core.settings.base_url.rstrip("/") + "/billing?card=added"
    return await cards.start_setup(ctx.core.processor, ctx.core, ctx.core.settings, actor, back)


@routes.post("/billing/cards", auth=AuthKind.PUBLIC, page=True, idempotent=False, prepare=_card_setup)
@shows_errors(PAGE_ERROR)
async def billing_add_card(ctx: RequestContext) -> Response:
    """On to the processor's hosted card form; the card shows here once the processor reports it saved."""
    return redirect(prepared(ctx).url)


@handed_on
async def _card_removal(ctx: RequestContext) -> Any:
    actor = await viewer(ctx, change=True)
    return await cards.detach(ctx.core.processor, ctx.core, actor, ctx.params["paymentMethodId"])


@routes.post(
    "/billing/cards/{paymentMethodId}/remove",
    auth=AuthKind.PUBLIC,
    page=True,
    idempotent=False,
    prepare=_card_removal,
)
@shows_errors(PAGE_ERROR)
async def billing_remove_card(ctx: RequestContext) -> Response:
    processor_id = prepared(ctx)
    actor = await viewer(ctx, change=True)
    await cards.delete(ctx.session, actor, processor_id)
    return redirect("/billing?saved=card_removed")


@routes.post("/billing/cards/{paymentMethodId}/default", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def billing_default_card(ctx: RequestContext) -> Response:
    actor = await viewer(ctx, change=True)
    await cards.set_default(ctx.session, actor, ctx.params["paymentMethodId"])
    return redirect("/billing?saved=default_card")


def _optional_cents(raw: str | None, field: str) -> int | None:
    return _cents(raw, field) if (raw or "").strip() else None


@routes.post("/billing/settings", auth=AuthKind.PUBLIC, page=True, idempotent=False)
@shows_errors(PAGE_ERROR)
async def billing_settings(ctx: RequestContext) -> Response:
    """Auto top-up (on or off, when and how much) and the spend caps (empty: no cap), in dollars."""
    actor = await viewer(ctx, change=True)
    form = await read_form(ctx)
    limits = parsed(
        billing_schemas.LimitsUpdate,
        per_task_cap_cents=_optional_cents(form.get("perTaskCap"), "perTaskCap"),
        daily_spend_cap_cents=_optional_cents(form.get("dailyCap"), "dailyCap"),
    )
    await billing.set_limits(ctx.session, actor, limits)
    enabled = form.get("autoTopup") == "on"
    auto = parsed(
        billing_schemas.AutoTopupUpdate,
        enabled=enabled,
        **(
            {
                "threshold_cents": _cents(form.get("threshold"), "threshold"),
                "amount_cents": _cents(form.get("autoAmount"), "autoAmount"),
            }
            if enabled
            else {}
        ),
    )
    await billing.set_autotopup(ctx.session, actor, auto)
    return redirect("/billing?saved=settings")
