"""Jobs, requester side: create, update (drafts), publish, read; the shared lookups and views.

Object-level authorization happens here: a job is its requester agent's (and that agent's owner's); a job
of anyone else is a 404 to them, whatever the credential.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from callboard_core import clock, states
from callboard_core.agents.models import Agent
from callboard_core.blobs import BlobStore
from callboard_core.capabilities.models import CapabilityTag, TaxonomyStatus
from callboard_core.config import Settings
from callboard_core.db.engine import writes_serialised
from callboard_core.db.lookup import by_pk, note_locked
from callboard_core.db.readcache import ReadCache
from callboard_core.db.rows import insert_at_commit, write_gathered
from callboard_core.db.scopes import TAXONOMY
from callboard_core.db.uow import UnitsOfWork
from callboard_core.directory import service as directory
from callboard_core.errors import Conflict, NotFound, PrepareFirst, ValidationFailed, field_error
from callboard_core.files import service as files
from callboard_core.files.models import FileStatus
from callboard_core.guidance import Act, step
from callboard_core.job_types import service as job_types
from callboard_core.jobs import events
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs.access import (
    WITHOUT_CAPABILITIES,
    AgentStanding,
    acting_standing,
    actor_kind,
    require_can_work,
)
from callboard_core.jobs.models import Job, JobInvitation
from callboard_core.jobs.states import JOB_MOVES, JobStatus, check_job
from callboard_core.pagination import decode_cursor, encode_cursor
from callboard_core.payments import service as payments
from callboard_core.payments.schemas import JobPaymentView
from callboard_core.principals import Actor
from callboard_core.processor.port import PaymentProcessor

DEFAULT_JOB_TYPE = "general"
DEFAULT_APPLICATION_CAP = 50
DEFAULT_PARTICIPANT_CAP = 3
ENDED_WITHOUT_AWARD = frozenset({JobStatus.NO_AWARD, JobStatus.CANCELLED})
MONEY_MOVES = ENDED_WITHOUT_AWARD | {JobStatus.AWARDED}  # the moves that capture or release a job's escrow


# --- views ---------------------------------------------------------------------------------------


def view(job: Job) -> job_schemas.JobView:
    return job_schemas.JobView(
        id=job.id,
        status=job.status,
        title=job.title,
        description=job.description,
        job_type_key=job.job_type_key,
        job_type_id=job.job_type_id,
        capability_slug=job.capability_slug,
        capability_tag_id=job.capability_tag_id,
        preview_json=job.preview_json,
        work_brief_json=job.work_brief_json,
        requirements_json=job.requirements_json,
        submission_requirements_json=job.submission_requirements_json,
        reward_amount_cents=job.reward_amount_cents,
        platform_fee_cents=job.platform_fee_cents,
        currency=job.currency,
        application_cap=job.application_cap,
        participant_cap=job.participant_cap,
        new_worker_reserved_application_count=job.new_worker_reserved_application_count,
        new_worker_reserved_slot_count=job.new_worker_reserved_slot_count,
        admission_closes_at=job.admission_closes_at,
        fair_work_duration_ms=job.fair_work_duration_ms,
        latest_submission_deadline_at=job.latest_submission_deadline_at,
        review_deadline_at=job.review_deadline_at,
        requester_agent_id=job.requester_agent_id,
        is_house=job.is_house,
        is_starter=job.is_starter,
        direct_hire_worker_agent_id=job.direct_hire_worker_agent_id,
        offering_id=job.offering_id,
        application_count=job.application_count,
        reserved_participants=job.reserved_participants,
        no_award_reason_code=job.no_award_reason_code,
        no_award_reason_text=job.no_award_reason_text,
        awarded_submission_id=job.awarded_submission_id,
        open_dispute_id=job.open_dispute_id,
        published_at=job.published_at,
        admission_closed_at=job.admission_closed_at,
        review_started_at=job.review_started_at,
        closed_at=job.closed_at,
        created_at=job.created_at,
        updated_at=job.updated_at,
    )


def preview(job: Job, *, rookie: bool = False) -> job_schemas.JobPreview:
    return job_schemas.JobPreview(
        id=job.id,
        status=job.status,
        title=job.title,
        description=job.description,
        job_type_key=job.job_type_key,
        capability_slug=job.capability_slug,
        preview_json=job.preview_json,
        requirements_json=job.requirements_json,
        submission_requirements_json=job.submission_requirements_json,
        reward_amount_cents=job.reward_amount_cents,
        currency=job.currency,
        application_cap=job.application_cap,
        participant_cap=job.participant_cap,
        application_count=job.application_count,
        admission_closes_at=job.admission_closes_at,
        fair_work_duration_ms=job.fair_work_duration_ms,
        latest_submission_deadline_at=job.latest_submission_deadline_at,
        review_deadline_at=job.review_deadline_at,
        requester_agent_id=job.requester_agent_id,
        is_house=job.is_house,
        direct_hire=job.direct_hire_worker_agent_id is not None,
        rookie=rookie,
        published_at=job.published_at,
    )


# --- lookups -------------------------------------------------------------------------------------


async def get(session: AsyncSession, job_id: str) -> Job:
    job = await by_pk(session, Job, job_id)
    if job is None:
        raise NotFound("No such job.", code="job_not_found")
    return job


def check_not_frozen(job: Job) -> None:
    """An open dispute freezes the job's money: no award, no-award, cancellation or refund until staff
    resolve it (callboard_core/disputes)."""
    if job.open_dispute_id is not None:
        raise Conflict(
            "A dispute is open on this job: its money is frozen until staff resolve the dispute.",
            code="dispute_open",
            dispute_id=job.open_dispute_id,
            next_action=step(Act.DISPUTE_STATUS, "Follow the dispute; staff will resolve it.", job_id=job.id),
        )


def is_requester(actor: Actor, job: Job) -> bool:
    if actor.staff:
        return True
    if actor.agent_id is not None:
        return job.requester_agent_id == actor.agent_id
    return actor.user_id is not None and job.owner_id == actor.user_id


async def lock(session: AsyncSession, job_id: str) -> Job:
    """The job row, locked until the transaction ends (FOR UPDATE on PostgreSQL; SQLite's writers are already
    serialised by BEGIN IMMEDIATE). Every write that changes a job's participants takes this lock before it
    touches any child row (application, slot, invitation, submission), so such writes queue in one order:
    no deadlock between them, and no write skew (two last submissions each missing the other's)."""
    job = await _locked(session, job_id)
    if job is None:
        raise NotFound("No such job.", code="job_not_found")
    return job


async def _locked(session: AsyncSession, job_id: str) -> Job | None:
    job = (await session.scalars(_LOCKED, {"p_job": job_id})).one_or_none()
    if job is not None:
        note_locked(session, [job])
    return job


# Every write to a job reads it so: built once.
_LOCKED = (
    select(Job)
    .where(Job.id == bindparam("p_job"))
    .with_for_update()
    .execution_options(populate_existing=True)
)


# `is_requester` as a condition on the `jobs` row, per kind of actor (`access.actor_kind`; staff: none, any
# job), for a statement that must lock only the requester's job: the check is in the statement, so another
# actor's read locks nothing (the row lock is the requester's to take), and the requester's check and lock
# are one read.
REQUESTED_BY: dict[str, Any] = {
    "staff": None,
    "agent": Job.requester_agent_id == bindparam("p_actor"),
    "owner": Job.owner_id == bindparam("p_actor"),
}


def _requested_by(statement: Any, kind: str) -> Any:
    condition = REQUESTED_BY[kind]
    return statement if condition is None else statement.where(condition)


@functools.cache
def _locked_by(kind: str) -> Any:
    return _requested_by(_LOCKED, kind)


def requester_locked(statement: Any, kind: str) -> Any:
    """`statement` (a read of `jobs`, joined to what the caller reads with it) as the requester's locked read
    of one job (`p_job`): FOR UPDATE OF jobs, only where `REQUESTED_BY[kind]` holds; the agents it joins
    load without their capability links. Rows joined to the job are as the statement found them (not
    locked; on PostgreSQL, from before any wait for the job's lock)."""
    return _requested_by(
        statement.where(Job.id == bindparam("p_job"))
        .options(*WITHOUT_CAPABILITIES)
        .with_for_update(of=Job)
        .execution_options(populate_existing=True),
        kind,
    )


async def locked_requester_row(
    session: AsyncSession, actor: Actor, build: Callable[[str], Any], job_id: str, **params: Any
) -> Any:
    """The first row of `build(kind)` (a `requester_locked` statement for the actor's kind) for this job, if
    the actor is its requester; else 404, nothing locked."""
    acting = actor_kind(actor)
    found = None
    if acting is not None:
        kind, who = acting
        found = (await session.execute(build(kind), {"p_job": job_id, **who, **params})).first()
    if found is None or not is_requester(actor, found[0]):
        raise NotFound("No such job.", code="job_not_found")
    note_locked(session, [found[0]])
    return found


@functools.cache
def _for_publish(kind: str) -> Any:
    """The publish's locked read: the job, its requester agent, whether it has input files and whether it
    has a payment row. Whether it has input files is read off the job's row (its count, which staging and
    removing a file move under the job's lock): a publish that waited for the lock reads the row's newest
    version, where a sub-select would still see the statement's snapshot and miss a file staged meanwhile."""
    return requester_locked(_publish_read(), kind)


@functools.cache
def _for_paid_publish(kind: str, serialised: bool) -> Any:
    """`_for_publish` with what a paid publish reads (`payments.with_paid_reads`). The job is locked in a
    sub-select (PostgreSQL), so that its lock is taken before the profile's, as on every other path."""
    locked = _requested_by(_LOCKED, kind).subquery("locked_job")
    job = aliased(Job, locked)
    statement = _publish_read(job).options(*WITHOUT_CAPABILITIES).execution_options(populate_existing=True)
    return payments.with_paid_reads(statement, job, serialised=serialised)


def _publish_read(job: Any = Job) -> Any:
    return select(
        job,
        Agent,
        (job.input_file_count > 0).label("has_inputs"),
        payments.row_exists(job.id).label("has_payment"),
    ).join(Agent, Agent.id == job.requester_agent_id)


async def requester_job(session: AsyncSession, actor: Actor, job_id: str, *, for_update: bool = False) -> Job:
    """The job, if the actor is its requester (or the requester's owner); else 404. With for_update the
    row is locked (see `lock`), in the same read."""
    if for_update:
        return cast(Job, (await locked_requester_row(session, actor, _locked_by, job_id))[0])
    job = await session.get(Job, job_id)
    if job is None or not is_requester(actor, job):
        raise NotFound("No such job.", code="job_not_found")
    return job


async def move(session: AsyncSession, job: Job, move_name: str, target: JobStatus, **values: Any) -> Job:
    """Move the job along `JOB_MOVES[move_name]` (compare-and-set); a lost race is a 409 with the current state.
    A move that ends a paid job without an award (no-award, a cancelled Direct Hire, the deadlines) releases
    its escrow in the same transaction (payments.release); the award captures it (review.award_submission).
    While a dispute is open on the job its money is frozen: such a move is 409 `dispute_open`."""
    if target in MONEY_MOVES:
        check_not_frozen(job)
    moved = await states.move(
        session,
        Job,
        job.id,
        JOB_MOVES[move_name],
        target,
        what="job",
        current=job.status,
        details={"target_state": target, "job_id": job.id},
        **values,
    )
    if target in ENDED_WITHOUT_AWARD:
        await payments.release(session, moved.id)
    return moved


def input_file_list(blobs: BlobStore, rows: list[Any]) -> job_schemas.InputFileList:
    """A job's input files as its requester and its acknowledged workers see them (links once verified)."""
    out = []
    for f in rows:
        link = files.download(blobs, f) if f.status == FileStatus.VERIFIED else None
        out.append(
            job_schemas.InputFileView(
                id=f.id,
                filename=f.filename,
                mime_type=f.mime_type,
                size_bytes=f.size_bytes,
                sha256=f.sha256,
                status=f.status,
                download_url=link.download_url if link else None,
                download_expires_at=link.download_expires_at if link else None,
                created_at=f.created_at,
            )
        )
    return job_schemas.InputFileList(files=out)


# --- create, update, publish ---------------------------------------------------------------------


# Every draft names its capability one of these ways: built once.
_ACTIVE_TAG_BY_SLUG = select(CapabilityTag).where(
    CapabilityTag.status == TaxonomyStatus.ACTIVE, CapabilityTag.slug == bindparam("p_slug")
)
_ACTIVE_TAG_BY_ID = select(CapabilityTag).where(
    CapabilityTag.status == TaxonomyStatus.ACTIVE, CapabilityTag.id == bindparam("p_id")
)


async def _resolve_capability(
    session: AsyncSession, slug: str | None, tag_id: str | None, cache: ReadCache | None = None
) -> tuple[str, str] | None:
    """The (id, slug) of the active capability tag a draft names, through the read cache's taxonomy scope
    when given (only found tags are kept: the error is raised by the load)."""
    if slug is None and tag_id is None:
        return None
    wanted = slug.strip().lower() if slug else None

    async def load() -> tuple[str, str]:
        if wanted:
            found = await session.scalars(_ACTIVE_TAG_BY_SLUG, {"p_slug": wanted})
        else:
            found = await session.scalars(_ACTIVE_TAG_BY_ID, {"p_id": tag_id})
        tag = found.one_or_none()
        if tag is None or (wanted and tag_id and tag.id != tag_id):
            field = "capabilitySlug" if slug else "capabilityTagId"
            raise ValidationFailed(
                "Unknown capability: name an active capability tag by its slug (the public capability list "
                "has them).",
                errors=[
                    {
                        "field": field,
                        "code": "unknown_capability",
                        "message": f"no active capability tag {slug or tag_id!r}",
                    }
                ],
            )
        return tag.id, tag.slug

    if cache is None:
        return await load()
    return await cache.get_or_load(("capability", wanted, tag_id), load, TAXONOMY)


def _check_schedule(job: Job, now: datetime, *, publishing: bool = False) -> None:
    """Deadlines in the future and ordered, the fair work duration fitting, reserved counts within caps."""
    errors: list[dict[str, str]] = []

    def err(field: str, code: str, message: str) -> None:
        errors.append({"field": field, "code": code, "message": message})

    admission, latest, review = (
        job.admission_closes_at,
        job.latest_submission_deadline_at,
        job.review_deadline_at,
    )
    if admission <= now:
        err(
            "admissionClosesAt",
            "in_past",
            "must be in the future" + (" at publish time" if publishing else ""),
        )
    if latest <= admission:
        err("latestSubmissionDeadlineAt", "out_of_order", "must be after admissionClosesAt")
    elif admission + timedelta(milliseconds=job.fair_work_duration_ms) > latest:
        err(
            "fairWorkDurationMs",
            "does_not_fit",
            "the fair work duration must fit between admissionClosesAt and latestSubmissionDeadlineAt",
        )
    if review < latest:
        err("reviewDeadlineAt", "out_of_order", "must be at or after latestSubmissionDeadlineAt")
    if job.new_worker_reserved_application_count > job.application_cap:
        err("newWorkerReservedApplicationCount", "exceeds_cap", "must not exceed applicationCap")
    if job.new_worker_reserved_slot_count > job.participant_cap:
        err("newWorkerReservedSlotCount", "exceeds_cap", "must not exceed participantCap")
    if job.direct_hire_worker_agent_id and job.participant_cap != 1:
        err("participantCap", "direct_hire", "a Direct Hire has exactly one participant")
    if errors:
        raise ValidationFailed(
            "The job is not valid: " + "; ".join(f"{e['field']} {e['message']}" for e in errors),
            errors=errors,
        )


_SIMPLE_FIELDS = (
    "title",
    "description",
    "preview_json",
    "work_brief_json",
    "requirements_json",
    "submission_requirements_json",
    "reward_amount_cents",
    "application_cap",
    "participant_cap",
    "new_worker_reserved_application_count",
    "new_worker_reserved_slot_count",
    "admission_closes_at",
    "fair_work_duration_ms",
    "latest_submission_deadline_at",
    "review_deadline_at",
)


async def _apply_offering(session: AsyncSession, job: Job, body: job_schemas.JobFields) -> set[str]:
    """A job hired from a Service Offering: a Direct Hire of its agent, the reward and tag defaulting to the
    offering's. Returns the fields it filled in (as if the body had given them)."""
    job.offering_id = body.offering_id
    if body.offering_id is None:
        return set()
    offering = await directory.hireable_offering(session, body.offering_id)
    worker = body.direct_hire_worker_agent_id
    if worker is not None and worker != offering.agent_id:
        raise field_error(
            "offeringId", "The offering belongs to another agent than directHireWorkerAgentId.", "mismatch"
        )
    body.direct_hire_worker_agent_id = offering.agent_id
    filled = {"direct_hire_worker_agent_id"}
    if body.reward_amount_cents is None and offering.price_cents is not None:
        body.reward_amount_cents, filled = offering.price_cents, filled | {"reward_amount_cents"}
        body.currency = body.currency or offering.currency
        filled.add("currency")
    if body.capability_slug is None and body.capability_tag_id is None and offering.capability_slug:
        body.capability_slug, filled = offering.capability_slug, filled | {"capability_slug"}
    return filled


async def _apply_fields(
    session: AsyncSession,
    job: Job,
    body: job_schemas.JobFields,
    requester: Agent | AgentStanding,
    cache: ReadCache | None = None,
) -> None:
    given = set(body.model_fields_set)
    if "offering_id" in given:
        given |= await _apply_offering(session, job, body)
    for name in _SIMPLE_FIELDS:
        if name in given:
            setattr(job, name, getattr(body, name))  # a required field is never null (Omittable)
    for name, default in (
        ("application_cap", DEFAULT_APPLICATION_CAP),
        ("participant_cap", DEFAULT_PARTICIPANT_CAP),
        ("new_worker_reserved_application_count", 0),
        ("new_worker_reserved_slot_count", 0),
        ("reward_amount_cents", 0),
    ):
        if getattr(job, name) is None:
            setattr(job, name, default)
    if "currency" in given and body.currency:
        job.currency = body.currency.lower()
    if {"capability_slug", "capability_tag_id"} & given:
        tag = await _resolve_capability(session, body.capability_slug, body.capability_tag_id, cache)
        job.capability_tag_id, job.capability_slug = tag if tag else (None, None)
    if {"job_type_key", "job_type_id"} & given or job.job_type_id is None:
        if body.job_type_key is None and body.job_type_id is None:
            jt = await job_types.active_rules(session, cache, key=DEFAULT_JOB_TYPE)
        else:
            jt = await job_types.active_rules(session, cache, key=body.job_type_key, type_id=body.job_type_id)
        job.job_type_id, job.job_type_key = jt.id, jt.key
        if job.submission_requirements_json is None:
            job.submission_requirements_json = copy.deepcopy(jt.submission_requirements_json)  # shared
    if "direct_hire_worker_agent_id" in given:
        worker_id = body.direct_hire_worker_agent_id
        if worker_id is not None:
            worker = await session.get(Agent, worker_id)
            if worker is None or worker.deleted_at is not None:
                raise ValidationFailed(
                    "No such worker agent.",
                    errors=[
                        {
                            "field": "directHireWorkerAgentId",
                            "code": "unknown_agent",
                            "message": "no such agent",
                        }
                    ],
                )
            if worker.owner_id is not None and worker.owner_id == requester.owner_id:
                raise ValidationFailed(
                    "A Direct Hire cannot name an agent of the same owner.",
                    errors=[
                        {
                            "field": "directHireWorkerAgentId",
                            "code": "same_owner",
                            "message": "same owner as requester",
                        }
                    ],
                )
            if "participant_cap" not in given:
                job.participant_cap = 1
        job.direct_hire_worker_agent_id = worker_id


async def create(
    session: AsyncSession, actor: Actor, body: job_schemas.JobCreate, cache: ReadCache | None = None
) -> job_schemas.JobView:
    """A DRAFT job for the acting requester agent (owners name it with requesterAgentId). With the read
    cache, the agent's standing and the taxonomy may come from it (a draft moves no money)."""
    requester_id = body.requester_agent_id if isinstance(body, job_schemas.OwnerJobCreate) else None
    requester = await acting_standing(session, actor, requester_id, cache)
    require_can_work(requester, role="requester")
    job = Job(
        requester_agent_id=requester.id,
        owner_id=requester.owner_id,
        status=JobStatus.DRAFT,
        is_house=requester.is_house,
    )
    await _apply_fields(session, job, body, requester, cache)
    _check_schedule(job, clock.now())
    # Nothing edits or reads a new draft in its request: its row goes with its "created" event, at commit.
    await insert_at_commit(session, [job])
    await events.record(session, job.id, "created", actor, {"title": job.title})
    return view(job)


async def update_draft(
    session: AsyncSession, actor: Actor, job_id: str, body: job_schemas.JobUpdate
) -> job_schemas.JobView:
    job = await requester_job(session, actor, job_id)
    if job.status != JobStatus.DRAFT:
        raise Conflict("Only a draft can be edited.", code="invalid_state", current_state=job.status)
    requester = await by_pk(session, Agent, job.requester_agent_id, options=WITHOUT_CAPABILITIES)
    assert requester is not None
    await _apply_fields(session, job, body, requester)
    _check_schedule(job, clock.now())
    job.updated_at = clock.now()
    await session.flush()
    await events.record(session, job.id, "updated", actor, {"fields": sorted(body.model_fields_set)})
    return view(job)


@dataclass(frozen=True)
class PublishPrep:
    """What publish's step before its write transaction did: the staged input files re-hashed, and for a
    paid job what payments.prepare did (the waiting payment recorded, an auto top-up charged)."""

    hashed: files.Hashed = files.NOT_HASHED
    funding: payments.Funding | None = None


async def prepare_publish(
    session: AsyncSession,
    blobs: BlobStore,
    uows: UnitsOfWork,
    processor: PaymentProcessor,
    settings: Settings,
    actor: Actor,
    job_id: str,
) -> PublishPrep:
    """publish's slow part, run before its write transaction: re-hash a draft's staged input files; for a
    paid draft that passes publish's own checks, the payment's prepare step (no write lock is held while
    the processor is called)."""
    job = await requester_job(session, actor, job_id)
    if job.status != JobStatus.DRAFT:
        return PublishPrep()  # publish refuses it without looking further
    hashed = await files.prehash(blobs, await files.list_for_job(session, job.id))
    if job.reward_amount_cents <= 0:
        return PublishPrep(hashed)  # no payment to prepare: publish makes every check
    requester = await by_pk(session, Agent, job.requester_agent_id, options=WITHOUT_CAPABILITIES)
    assert requester is not None
    require_can_work(requester, role="requester")
    _check_schedule(job, clock.now(), publishing=True)
    payments.check_reward(job, settings.min_paid_reward_cents)
    funding = await payments.prepare(session, uows, processor, settings.platform_fee_bps, actor, job)
    return PublishPrep(hashed, funding)


async def publish(
    session: AsyncSession,
    blobs: BlobStore,
    settings: Settings,
    actor: Actor,
    job_id: str,
    prepared: PublishPrep | None = None,
) -> job_schemas.JobView:
    """DRAFT to ADMISSION_OPEN (or PENDING_ACCEPTANCE for a Direct Hire). Input files are re-hashed now,
    unless `prepare_publish` matched them just before. A paid job reserves pay + fee from the requester
    owner's balance first (payments.secure: 409 `payment_not_ready` naming what is missing).
    `prepared` None: the first attempt of an on-demand prepare (pipeline.run_write), which raises
    PrepareFirst where `prepare_publish` has work (input files to re-hash, a paid job's payment that is not
    ready); `PublishPrep()` runs without a prepare step (files hashed here)."""
    first_attempt = prepared is None
    prepared = prepared or PublishPrep()
    # The requester agent is kept (`requester`): the paid checks find it in the session (payments.secure).
    # The same read says whether there are input files to verify, or a payment row a free job must look at:
    # most jobs have neither, and skip both reads. A requester whose last publish was paid has the first
    # attempt's read bring what a paid publish reads, too (`paid`: `payments.with_paid_reads`).
    fold = first_attempt and payments.reads_paid_with_job(actor)
    serialised = writes_serialised(session)
    build = functools.partial(_for_paid_publish, serialised=serialised) if fold else _for_publish
    job, requester, has_inputs, has_payment, *paid = await locked_requester_row(session, actor, build, job_id)
    payments.note_publish(actor, job)
    check_job("publish", job.status, JobStatus.ADMISSION_OPEN, job_id=job.id)
    require_can_work(requester, role="requester")
    now = clock.now()
    _check_schedule(job, now, publishing=True)
    payments.check_reward(job, settings.min_paid_reward_cents)
    inputs = await files.list_for_job(session, job.id) if has_inputs else []
    if first_attempt and inputs:
        raise PrepareFirst  # re-hash them with no write lock held
    payment = await payments.secure(
        session,
        settings.platform_fee_bps,
        actor,
        job,
        prepared.funding,
        first_attempt=first_attempt,
        has_row=has_payment,
        read=paid or None,
    )
    fee = payment.fee_cents if payment is not None else None
    await files.verify_all(session, blobs, inputs, prepared.hashed)
    if job.direct_hire_worker_agent_id:
        worker = await session.get(Agent, job.direct_hire_worker_agent_id)
        if worker is None or worker.deleted_at is not None:
            raise Conflict("The Direct Hire worker no longer exists.", code="worker_unavailable")
        require_can_work(worker, role="worker")
        job = await move(
            session,
            job,
            "publish_direct_hire",
            JobStatus.PENDING_ACCEPTANCE,
            published_at=now,
            reserved_participants=1,
            platform_fee_cents=fee,
        )
        invitation = JobInvitation(
            job_id=job.id,
            worker_agent_id=worker.id,
            expires_at=job.admission_closes_at,
            message="Direct Hire",
        )
        session.add(invitation)
        await session.flush()
        await events.record(
            session, job.id, "published", actor, {"directHire": True, "invitationId": invitation.id}
        )
        await events.record(
            session,
            job.id,
            "invitation_sent",
            actor,
            {"invitationId": invitation.id, "workerAgentId": worker.id, "directHire": True},
            notify=[worker.id],
            title=f"Direct Hire offer: {job.title}",
            body=f"Accept or decline invitation {invitation.id}: home lists it with the call to make.",
        )
        return view(job)
    job = await move(
        session, job, "publish", JobStatus.ADMISSION_OPEN, published_at=now, platform_fee_cents=fee
    )
    await events.record(session, job.id, "published", actor, {})
    return view(job)


async def payment(session: AsyncSession, actor: Actor, job_id: str) -> JobPaymentView:
    """The payment of the actor's job (another owner's job: 404); a free job's is 404 `no_payment`."""
    return await payments.view(session, await requester_job(session, actor, job_id))


async def retry_payment(
    session: AsyncSession,
    blobs: BlobStore,
    settings: Settings,
    actor: Actor,
    job_id: str,
    prepared: PublishPrep | None = None,
) -> JobPaymentView:
    """Run a paid draft's checks again and publish it when they pass (409 `payment_not_ready` naming what is
    still missing); the owner's retry is their confirmation. On a job already published it changes nothing
    and returns the payment as it stands, so repeating it is harmless."""
    job = await requester_job(session, actor, job_id, for_update=True)
    if job.status == JobStatus.DRAFT:
        if job.reward_amount_cents <= 0:
            raise payments.no_payment(job)
        await publish(session, blobs, settings, actor, job_id, prepared)
        await write_gathered(session)  # the new payment goes with the commit otherwise
    return await payments.view(session, job)


async def get_for_requester(session: AsyncSession, actor: Actor, job_id: str) -> job_schemas.JobView:
    return view(await requester_job(session, actor, job_id))


async def list_for_owner(
    session: AsyncSession, actor: Actor, query: job_schemas.OwnerJobsQuery
) -> job_schemas.OwnerJobList:
    stmt = select(Job).where(Job.owner_id == actor.require_user())
    if query.status:
        stmt = stmt.where(Job.status == query.status)
    if query.cursor:
        created, ident = decode_cursor(query.cursor)
        stmt = stmt.where((Job.created_at < created) | ((Job.created_at == created) & (Job.id < ident)))
    rows = list(
        (
            await session.scalars(stmt.order_by(Job.created_at.desc(), Job.id.desc()).limit(query.limit + 1))
        ).all()
    )
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    return job_schemas.OwnerJobList(
        jobs=[view(j) for j in rows],
        next_cursor=encode_cursor(rows[-1].created_at, rows[-1].id) if more and rows else None,
    )
