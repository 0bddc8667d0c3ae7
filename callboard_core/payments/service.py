"""Paid jobs' money: the checks at publish, escrow, capture at award, release when a job ends without one.

The flow (docs/decisions.md, "Money: paid jobs"):
- `prepare` (the publish's lock-free step, before the write unit of work): runs the checks, records the
  waiting payment (REQUIRES_ACTION with what is missing) in a short write transaction of its own, so a
  refused publish still leaves the owner a payment to confirm or fund; when only money is short and the
  owner's auto top-up is on, charges the default card off-session (never inside a write transaction) under
  a key made of the payment's id and attempt number.
- `secure` (in the publish's write unit of work, the job locked): locks the owner's buyer profile (the daily
  caps hold under concurrency: one owner's paid publishes that add up earlier spending queue on that row;
  the others share its lock, and their reserve rides with the commit's statement), credits a succeeded auto
  top-up (`topup:<payment intent>`, the key its webhook posts too), re-runs the checks, and reserves pay +
  fee (`reserve:<job>`). A refused check is 409 `payment_not_ready` naming every missing requirement and
  the calls that fix it.
- `capture` (in the award's transaction) and `release` (in the transaction of every move that ends a paid
  job without an award) move the payment by compare-and-set and post once (`capture:<job>`,
  `release:<job>`): of an award and a no-award racing, one moves the job and only its posting exists.

The fee: `CALLBOARD_PLATFORM_FEE_BPS` basis points of the pay (default 1000 = 10%), in whole cents rounded
half up, recorded on the payment and on the job at publish. The requester's owner pays pay + fee.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, exists, func, select, true, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from callboard_core import clock, states
from callboard_core.agents.models import Agent
from callboard_core.billing import service as billing
from callboard_core.billing.models import BuyerProfile
from callboard_core.db.engine import dialect_of
from callboard_core.db.lookup import by_pk, reread
from callboard_core.db.rows import Rider, insert_at_commit, ride_at_commit, row_values
from callboard_core.db.uow import UnitsOfWork
from callboard_core.errors import Conflict, NotFound, PaymentNotReady, PrepareFirst, field_error
from callboard_core.guidance import Act, step
from callboard_core.ids import new_id
from callboard_core.jobs.models import Job
from callboard_core.ledger import service as ledger
from callboard_core.ledger.models import LedgerAccount, TransactionKind
from callboard_core.onboarding.models import OnboardingActivation
from callboard_core.owner_notifications import triggers as notifications
from callboard_core.payments.models import JobPayment
from callboard_core.payments.schemas import JobPaymentView, PaymentFix, PaymentRequirement
from callboard_core.payments.states import PAYMENT_MOVES, SPENT, PaymentStatus
from callboard_core.principals import Actor
from callboard_core.processor.port import Charge, PaymentProcessor

DAILY_WINDOW = timedelta(hours=24)  # the daily caps: a rolling 24 hours of reserved (not released) payments

# The order the requirements are checked and listed in.
CODES = (
    "CLAIMED_OWNER",
    "CONFIRMATION",
    "PER_TASK_CAP",
    "DAILY_CAP",
    "ACTIVATION_CAP",
    "CARD",
    "CARD_DECLINED",
    "BALANCE",
)


def fee_for(pay_cents: int, bps: int) -> int:
    """The platform fee on `pay_cents` at `bps` basis points, whole cents rounded half up
    (1000 bps: 1005 -> 101, 1004 -> 100), and never below one cent when there is a fee at all."""
    if pay_cents <= 0 or bps <= 0:
        return 0
    return max(1, (pay_cents * bps + 5000) // 10000)


def check_reward(job: Job, min_paid_reward_cents: int) -> None:
    """A paid job's reward is at least the minimum (422 `reward_below_minimum`); 0 is a free job."""
    if 0 < job.reward_amount_cents < min_paid_reward_cents:
        raise field_error(
            "rewardAmountCents",
            f"A paid job's reward is at least {min_paid_reward_cents} cents; raise it, or set 0 for a free job.",
            "reward_below_minimum",
        )


def _owner_confirms(actor: Actor) -> bool:
    """A signed-in owner publishing (or retrying) their agent's job is the owner's confirmation."""
    return actor.agent_id is None and actor.user_id is not None and not actor.staff


# --- what a paid publish needs ---------------------------------------------------------------------------


@dataclass
class Standing:
    """Everything the checks read, loaded once."""

    job: Job
    agent: Agent
    profile: BuyerProfile | None
    available_cents: int | None  # None: not read (the money checks are left out)
    owner_spent_cents: int  # the owner's payments reserved in the window, still held or captured
    agent_spent_cents: int
    activation: OnboardingActivation | None
    confirmed: bool
    declined: bool  # the last auto top-up of this payment did not succeed (declined, or needs authentication)

    def can_autotopup(self) -> bool:
        p = self.profile
        return bool(
            p is not None
            and p.autotopup_enabled
            and p.processor_customer_id
            and p.processor_default_payment_method_id
        )


async def _spent(session: AsyncSession, column: Any, holder: str, now: datetime, exclude_job: str) -> int:
    total = await session.scalar(
        select(func.coalesce(func.sum(JobPayment.pay_cents + JobPayment.fee_cents), 0)).where(
            column == holder,
            JobPayment.status.in_(SPENT),
            JobPayment.reserved_at > now - DAILY_WINDOW,
            JobPayment.job_id != exclude_job,
        )
    )
    return int(total or 0)


async def _activation(session: AsyncSession, agent_id: str) -> OnboardingActivation | None:
    """The agent's latest activation: its spend caps bound what the agent publishes alone."""
    return await session.scalar(_LATEST_ACTIVATION, {"p_agent": agent_id})


def _latest_activation(agent_id: Any, activations: Any = OnboardingActivation) -> Any:
    """The latest activation of the agent in `agent_id` (a bind, or a column of the caller's read), from
    `activations` (an alias where the caller's read joins the table too)."""
    return (
        select(activations)
        .where(activations.agent_id == agent_id)
        .order_by(activations.created_at.desc(), activations.id.desc())
        .limit(1)
    )


# Every paid publish reads it: built once.
_LATEST_ACTIVATION = _latest_activation(bindparam("p_agent"))


async def _standing(
    session: AsyncSession,
    actor: Actor,
    job: Job,
    payment: JobPayment | None,
    total: int,
    *,
    profile: BuyerProfile | None = None,
    activation: tuple[OnboardingActivation | None] | None = None,
    with_balance: bool = True,
) -> Standing:
    """What the checks read, and only that: a spent total is summed only when a cap needs it, and the
    balance is read only `with_balance` (the write step lets the reserve's guarded debit decide first).
    `activation`: the agent's latest, as the caller read it (in a 1-tuple, as None is an answer)."""
    agent = await by_pk(session, Agent, job.requester_agent_id)
    assert agent is not None
    now = clock.now()
    owner = job.owner_id
    if profile is None and owner:
        profile = await billing.find(session, owner)
    confirmed = _owner_confirms(actor) or (
        payment is not None
        and payment.confirmed_total_cents is not None
        and total <= payment.confirmed_total_cents
    )
    if confirmed:
        latest = None
    else:
        latest = activation[0] if activation is not None else await _activation(session, agent.id)
    daily_cap = profile is not None and profile.daily_spend_cap_cents is not None
    return Standing(
        job=job,
        agent=agent,
        profile=profile,
        available_cents=(
            (await ledger.balances(session, owner)).available_cents if owner and with_balance else None
        ),
        owner_spent_cents=await _spent(session, JobPayment.user_id, owner, now, job.id)
        if owner and daily_cap
        else 0,
        agent_spent_cents=await _spent(session, JobPayment.requester_agent_id, agent.id, now, job.id)
        if latest is not None
        else 0,
        activation=latest,
        confirmed=confirmed,
        declined=payment is not None and payment.autotopup_status not in (None, "succeeded"),
    )


def _missing(s: Standing, total: int) -> list[str]:
    """The requirements a publish of `total` cents lacks, in CODES order. Money (CARD, BALANCE) is missing
    only when the available balance was read, is short, and auto top-up cannot cover it."""
    missing: list[str] = []
    if s.job.owner_id is None:
        return ["CLAIMED_OWNER"]
    if not s.confirmed and (
        s.agent.auto_publish_limit_cents == 0 or total > s.agent.auto_publish_limit_cents
    ):
        missing.append("CONFIRMATION")
    p = s.profile
    if p is not None and p.per_task_cap_cents is not None and total > p.per_task_cap_cents:
        missing.append("PER_TASK_CAP")
    if (
        p is not None
        and p.daily_spend_cap_cents is not None
        and s.owner_spent_cents + total > p.daily_spend_cap_cents
    ):
        missing.append("DAILY_CAP")
    a = s.activation
    if (
        a is not None
        and not s.confirmed
        and (total > a.max_spend_cents_per_task or s.agent_spent_cents + total > a.max_spend_cents_per_day)
    ):
        missing.append("ACTIVATION_CAP")
    if s.available_cents is not None and s.available_cents < total and not s.can_autotopup():
        if p is None or not p.processor_default_payment_method_id:
            missing.append("CARD")
        elif s.declined:
            missing.append("CARD_DECLINED")
        missing.append("BALANCE")
    return missing


def requirement(code: str, job: Job, total: int, available: int = 0) -> PaymentRequirement:
    """What `code` means for this job and the calls that fix it."""
    owner_retry = PaymentFix(
        who="OWNER",
        act=Act.OWNER_CONFIRM_PAYMENT,
        args={"job_id": job.id},
        description="Your owner confirms (and pays) from their session; the job then publishes.",
    )
    agent_retry = PaymentFix(
        who="AGENT",
        act=Act.RETRY_PAYMENT,
        args={"job_id": job.id},
        description="Once fixed, retry: the checks run again and the job publishes.",
    )
    limits = PaymentFix(
        who="OWNER",
        act=Act.OWNER_LIMITS,
        body={"perTaskCapCents": None, "dailySpendCapCents": None},
        description="Raise or clear the spend caps.",
    )
    card_link = PaymentFix(
        who="AGENT",
        act=Act.SETUP_LINK,
        body={"kind": "CARD"},
        description="Get a setup link for your owner to save a card, and hand them its url.",
    )
    card_owner = PaymentFix(
        who="OWNER",
        act=Act.OWNER_SAVE_CARD,
        description="Save a card (then make it the default and turn on auto top-up).",
    )
    topup = PaymentFix(
        who="OWNER",
        act=Act.OWNER_TOPUP,
        description=f"Add at least {max(total - available, 0)} cents to the balance.",
    )
    table: dict[str, tuple[str, list[PaymentFix]]] = {
        "CLAIMED_OWNER": ("The requester agent has no owner to pay; its owner must claim it.", []),
        "CONFIRMATION": (
            f"This publish costs {total} cents, above the agent's autoPublishLimitCents: the owner confirms it.",
            [
                owner_retry,
                PaymentFix(
                    who="OWNER",
                    act=Act.OWNER_RAISE_AUTOPUBLISH,
                    args={"agent_id": job.requester_agent_id},
                    body={"autoPublishLimitCents": total},
                    description="Or raise the agent's limit so it may publish this alone.",
                ),
            ],
        ),
        "PER_TASK_CAP": (
            f"The cost ({total} cents) is above the owner's per-task cap.",
            [limits, agent_retry],
        ),
        "DAILY_CAP": (
            f"The cost ({total} cents) would take the owner past the daily spend cap (rolling 24 hours).",
            [limits, agent_retry],
        ),
        "ACTIVATION_CAP": (
            f"The cost ({total} cents) is above the spend caps the agent was activated with.",
            [owner_retry],
        ),
        "CARD": ("The owner has no default card to pay or top up with.", [card_link, card_owner]),
        "CARD_DECLINED": (
            "The automatic top-up did not go through (the card declined it, or its bank asked for "
            "authentication): save another card and turn auto top-up on again, or add funds.",
            [card_link, card_owner],
        ),
        "BALANCE": (
            f"The owner's available balance ({available} cents) is short of {total} cents.",
            [topup, agent_retry],
        ),
    }
    message, fixes = table[code]
    return PaymentRequirement(code=code, message=message, fixes=fixes)


def not_ready(job: Job, total: int, available: int, missing: list[str]) -> PaymentNotReady:
    reqs = [requirement(code, job, total, available) for code in missing]
    return PaymentNotReady(
        "This paid job cannot be published yet: "
        + "; ".join(f"{r.code}: {r.message}" for r in reqs)
        + " Each requirement lists the calls that fix it; then retry.",
        missing=missing,
        requirements=reqs,
        next_action=step(Act.JOB_PAYMENT, "What the publish waits for, and who fixes each.", job_id=job.id),
        job_id=job.id,
        total_cents=total,
        available_cents=available,
    )


# --- the payment row ------------------------------------------------------------------------------------


_BY_JOB = (
    select(JobPayment)
    .where(JobPayment.job_id == bindparam("job_id"))
    .execution_options(populate_existing=True)
)


def row_exists(job_id: Any) -> ColumnElement[bool]:
    """Whether the job (`job_id`, a column of the caller's read) has a payment row: a column of the
    publish's locked read, so a free job that never had one skips `secure`'s look for a leftover."""
    return exists().where(JobPayment.job_id == job_id)


async def find(session: AsyncSession, job_id: str) -> JobPayment | None:
    return await session.scalar(_BY_JOB, {"job_id": job_id})


async def _open_row(
    session: AsyncSession,
    job: Job,
    fee_bps: int,
    *,
    add: bool = True,
    found: tuple[JobPayment | None] | None = None,
) -> JobPayment:
    """The job's payment, created or reopened (VOID -> REQUIRES_ACTION) for a publish attempt, with the
    job's current pay and fee. The job row is locked by the caller (or the transaction is SQLite's only
    writer), so no two create it. `add=False`: a new row is left out of the session (with its id), for
    the caller to insert once in its final state. `found`: the job's payment (None: it has none), when the
    caller read it (a 1-tuple: None is an answer)."""
    payment = found[0] if found is not None else await find(session, job.id)
    pay = job.reward_amount_cents
    if payment is None:
        assert job.owner_id is not None
        payment = JobPayment(
            id=new_id("jpy"),
            job_id=job.id,
            requester_agent_id=job.requester_agent_id,
            user_id=job.owner_id,
            currency=job.currency,
            status=PaymentStatus.REQUIRES_ACTION,
            missing=[],
            autotopup_attempt=0,
        )
        if not add:
            payment.pay_cents, payment.fee_bps, payment.fee_cents = pay, fee_bps, fee_for(pay, fee_bps)
            return payment
        session.add(payment)
    elif payment.status == PaymentStatus.VOID:
        payment = await _move(session, payment, PaymentStatus.REQUIRES_ACTION)
    if payment.status == PaymentStatus.REQUIRES_ACTION:
        payment.pay_cents, payment.fee_bps, payment.fee_cents = pay, fee_bps, fee_for(pay, fee_bps)
    await session.flush()
    return payment


async def _move(
    session: AsyncSession, payment: JobPayment, target: PaymentStatus, **values: Any
) -> JobPayment:
    return await states.move(
        session,
        JobPayment,
        payment.id,
        PAYMENT_MOVES,
        target,
        what="job payment",
        current=payment.status,
        details={"job_id": payment.job_id, "target_state": target},
        updated_at=clock.now(),
        **values,
    )


# --- publish: prepare (no write transaction held) and secure (the write unit of work) -------------------


@dataclass(frozen=True)
class Funding:
    """What the prepare step did: an off-session charge (its payment intent), if any."""

    charge: Charge | None = None
    amount_cents: int = 0


async def _short_write(uows: UnitsOfWork, job_id: str, fee_bps: int, step: Any) -> Any:
    """Run `step(session, payment)` in a unit of work of its own (committed on return), the job row locked
    first so two publishes of one draft create or update its payment one after the other."""
    async with uows.uow() as write:
        writer = write.session
        job = await writer.scalar(select(Job).where(Job.id == job_id).with_for_update())
        assert job is not None
        return await step(writer, await _open_row(writer, job, fee_bps))


async def prepare(
    session: AsyncSession,
    uows: UnitsOfWork,
    processor: PaymentProcessor,
    fee_bps: int,
    actor: Actor,
    job: Job,
) -> Funding | None:
    """The publish's step before its write transaction (the job is the actor's draft): record the waiting
    payment and what it lacks; charge the default card off-session when only money is short and auto
    top-up is on. Returns what the write step must credit."""
    if job.reward_amount_cents <= 0 or job.owner_id is None:
        return None
    existing = await find(session, job.id)
    if existing is not None and existing.status not in (PaymentStatus.REQUIRES_ACTION, PaymentStatus.VOID):
        return None
    total = job.reward_amount_cents + fee_for(job.reward_amount_cents, fee_bps)
    s = await _standing(session, actor, job, existing, total)
    missing = _missing(s, total)
    available = s.available_cents or 0
    charge_amount = 0
    if not missing and available < total and s.can_autotopup():
        assert s.profile is not None
        charge_amount = max(s.profile.autotopup_amount_cents or 0, total - available)
    if not missing and not charge_amount:
        # The publish will go through: its write step makes the payment row (no extra write transaction
        # here). Should a concurrent spend get there first, its refusal names the same fixes.
        return None

    # The auto top-up attempt the checks above saw: a charge is made for it only.
    seen_attempt = existing.autotopup_attempt if existing is not None else 0

    async def record(w: AsyncSession, payment: JobPayment) -> tuple[str, int, int]:
        if charge_amount and payment.autotopup_attempt != seen_attempt:
            # A concurrent publish charged (or was declined) after this one read the balance: what was
            # read is stale and a second charge would top up twice. The write step sees that charge's
            # money (or its decline).
            return payment.id, payment.autotopup_attempt, 0
        if payment.status == PaymentStatus.REQUIRES_ACTION:
            payment.missing = missing
            if missing:  # the owner hears of it (once per set of missing things)
                await notifications.payment_action_required(
                    w, payment.user_id, job, payment.id, missing, total
                )
            if _owner_confirms(actor):
                payment.confirmed_total_cents, payment.confirmed_at = total, clock.now()
            if charge_amount and payment.autotopup_pending_cents is None:
                payment.autotopup_pending_cents = charge_amount  # fixed for this attempt, retries reuse it
            payment.updated_at = clock.now()
        return payment.id, payment.autotopup_attempt, payment.autotopup_pending_cents or 0

    payment_id, attempt, amount = await _short_write(uows, job.id, fee_bps, record)
    if not charge_amount or not amount:
        return None
    profile = s.profile
    assert (
        profile is not None and profile.processor_customer_id and profile.processor_default_payment_method_id
    )
    charge = await processor.charge_off_session(
        profile.processor_customer_id,
        profile.processor_default_payment_method_id,
        amount,
        metadata={
            "purpose": "autotopup",
            "userId": job.owner_id,
            "jobId": job.id,
            "jobPaymentId": payment_id,
        },
        idempotency_key=f"jobpay-autotopup:{payment_id}:{attempt}",
    )

    async def outcome(w: AsyncSession, payment: JobPayment) -> None:
        if payment.autotopup_attempt != attempt:
            return  # a concurrent retry recorded this attempt already
        payment.autotopup_charge_id, payment.autotopup_status = charge.id, charge.status
        payment.autotopup_attempt, payment.autotopup_pending_cents = attempt + 1, None
        if charge.status == "succeeded":
            await ledger.top_up(
                w,
                user_id=payment.user_id,
                amount_cents=amount,
                processor_ref=charge.id,
                key=f"topup:{charge.id}",
            )
        else:
            payment.missing = ["CARD_DECLINED", "BALANCE"]
            await notifications.payment_failed(
                w, payment.user_id, payment.job_id, charge.id, charge.failure_code or charge.status
            )
            owner_profile = await billing.find(w, payment.user_id)
            if owner_profile is not None:
                await billing.turn_off_autotopup(
                    w,
                    owner_profile,
                    f"An automatic top-up of {amount} cents was declined "
                    f"({charge.failure_code or charge.status}).",
                )
        await w.flush()

    await _short_write(uows, job.id, fee_bps, outcome)
    return Funding(charge=charge, amount_cents=amount)


# The profile locked, with the publishing agent's latest activation beside it (its caps: `_standing`) and the
# job's payment (`_open_row`), in one statement. The activation is as the statement found it before any wait
# for the lock: it changes only when the agent is activated again, which a publish racing it may see either
# side of. The payment's writers all hold the job's lock, which the publish holds. The reserve's accounts only
# name what moves: their balances move by the posting's guarded update, whatever the read found (as read,
# without a lock, they say whether the reserve may wait for the commit: `secure`).
def _lock_profile_read(*, exclusive: bool) -> Any:
    """`_lock_profile`'s statement: the profile, the latest activation, the job's payment and the accounts
    the reserve moves (`ledger.with_flow_accounts`), each outer-joined; the profile locked FOR UPDATE
    (`exclusive`) or FOR SHARE."""
    statement = (
        select(BuyerProfile, OnboardingActivation, JobPayment)
        .select_from(BuyerProfile)
        .outerjoin(
            OnboardingActivation,
            OnboardingActivation.id
            == _LATEST_ACTIVATION.with_only_columns(OnboardingActivation.id).scalar_subquery(),
        )
        .outerjoin(JobPayment, JobPayment.job_id == bindparam("p_job"))
    )
    return (
        ledger.with_flow_accounts(statement, TransactionKind.RESERVE, BuyerProfile.user_id, true())
        .where(BuyerProfile.user_id == bindparam("p_user"))
        .with_for_update(of=BuyerProfile, read=not exclusive)
        .execution_options(populate_existing=True)
    )


_LOCK_PROFILE = {exclusive: _lock_profile_read(exclusive=exclusive) for exclusive in (True, False)}

# Owners whose publishes, as this process last saw them, add up earlier spending (`_sums_spending`): their
# publishes lock the profile FOR UPDATE from the first attempt. Bounded: emptied when full (a forgotten owner
# costs one more attempt, never a rule).
_SUMMING_OWNERS: set[str] = set()
_HINTS_MAX = 10_000  # the bound of this set and the next

# Requesters (the acting agent, or owner) whose last publish in this process was of a paid job: their next
# publish's first read brings what a paid publish reads (`with_paid_reads`). Only a hint of which read to
# send, bounded like the set above: a miss costs a paid publish its separate profile read, or a free one a
# few empty columns, never a rule.
_PAYING_REQUESTERS: set[str] = set()


def _requester_key(actor: Actor) -> str | None:
    return actor.agent_id or actor.user_id


def reads_paid_with_job(actor: Actor) -> bool:
    """Whether a publish's first attempt reads its job with `with_paid_reads`: the actor's last publish here
    was paid, and its owner's publishes (as far as this process knows) share the profile."""
    key = _requester_key(actor)
    owner = actor.key.owner_id if actor.key is not None else actor.user_id
    return key in _PAYING_REQUESTERS and owner not in _SUMMING_OWNERS


def note_publish(actor: Actor, job: Job) -> None:
    """Remember whether the actor's publish was of a paid job (`reads_paid_with_job`)."""
    key = _requester_key(actor)
    if key is None:
        return
    if job.reward_amount_cents > 0:
        if len(_PAYING_REQUESTERS) >= _HINTS_MAX:
            _PAYING_REQUESTERS.clear()
        _PAYING_REQUESTERS.add(key)
    else:
        _PAYING_REQUESTERS.discard(key)


def with_paid_reads(statement: Any, job: Any, *, serialised: bool) -> Any:
    """A publish's read of its job (`statement`, whose `job` is the `Job` entity read from a sub-select that
    locks the row FOR UPDATE on PostgreSQL) with what the first attempt of a paid publish reads, each only
    where the job has a reward: the owner's buyer profile, the publishing agent's latest activation and the
    reserve's accounts, as `_lock_profile` reads them. One round trip where there were two. PostgreSQL: the
    profile locked FOR SHARE in a LATERAL sub-select, which runs once the job's lock is held (the order every
    paid publish takes them in), so it finds the profile's newest version; the activation and the accounts
    unlocked, as found. SQLite (`serialised`: the transaction's writer holds the whole database) joins the
    profile as it is. Not the job's payment: on PostgreSQL, read so, it could predate its writers' last work,
    done under the job's lock this read may have waited for (the caller reads it after, or guards its
    insert: `secure`). Pass the two further entities and the accounts to `secure(read=...)`."""
    paid = job.reward_amount_cents > 0
    if serialised:
        statement = statement.add_columns(BuyerProfile).outerjoin(
            BuyerProfile, and_(paid, BuyerProfile.user_id == job.owner_id)
        )
        return _with_activation_and_accounts(statement, job, paid)
    locked = (
        select(BuyerProfile)
        .where(BuyerProfile.user_id == job.owner_id, paid)
        .with_for_update(read=True)
        .lateral("locked_profile")
    )
    statement = statement.add_columns(aliased(BuyerProfile, locked)).outerjoin(locked, true())
    return _with_activation_and_accounts(statement, job, paid)


def _with_activation_and_accounts(statement: Any, job: Any, paid: Any) -> Any:
    activations = aliased(OnboardingActivation)
    latest = (
        _latest_activation(job.requester_agent_id, activations)
        .with_only_columns(activations.id)
        .correlate(sa_inspect(job).selectable)
        .scalar_subquery()
    )
    statement = statement.add_columns(OnboardingActivation).outerjoin(
        OnboardingActivation, and_(paid, OnboardingActivation.id == latest)
    )
    # The accounts by the job's owner (the profile's user where there is one): found by index from the job.
    return ledger.with_flow_accounts(statement, TransactionKind.RESERVE, job.owner_id, paid)


def _payment_once(columns: tuple[str, ...]) -> tuple[tuple[Any, ...], Any]:
    """A new payment's insert as a `Rider`: nothing where the job has one already (made by a writer that held
    the job's lock while this publish waited for it), and a count of what it wrote."""
    table: Any = JobPayment.__table__
    inserted = (
        postgresql.insert(table)
        .values({c: bindparam(f"jp_{c}", type_=table.c[c].type) for c in columns})
        .on_conflict_do_nothing(index_elements=[table.c.job_id])
        .returning(table.c.id)
        .cte("payment_once")
    )
    return (inserted,), select(func.count()).select_from(inserted).scalar_subquery()


async def _insert_once(session: AsyncSession, payment: JobPayment) -> None:
    """Insert a publish's new payment with the commit's statement, unless the job has one by then: then the
    commit stores nothing and the pipeline runs the prepare step (PrepareFirst), whose next attempt finds it."""
    values = row_values(payment)
    await ride_at_commit(
        session,
        Rider(
            build=_payment_once,
            args=(tuple(values),),
            params={f"jp_{c}": v for c, v in values.items()},
            expected=1,
            refused=PrepareFirst,
        ),
    )


def _sums_spending(profile: BuyerProfile, activation: OnboardingActivation | None) -> bool:
    """Whether a publish's checks add up the owner's or the agent's earlier spending (a daily cap, an
    activation's caps): such checks must see every earlier publish, so they run one at a time per owner."""
    return profile.daily_spend_cap_cents is not None or activation is not None


async def _lock_profile(session: AsyncSession, job: Job, user_id: str, *, exclusive: bool) -> Any:
    """The owner's buyer profile, locked until the transaction ends (PostgreSQL; SQLite's writers are
    serialised): FOR UPDATE (`exclusive`), so that one owner's paid publishes check the daily caps one at a
    time, or FOR SHARE, for a publish whose checks add up no earlier spending: such publishes of one owner
    run side by side, and a change of the owner's limits waits for them. With it, the publishing agent's
    latest activation (None: never activated), the job's payment (None: none yet) and the owner's accounts
    the reserve moves (None where missing): a row of five."""
    params = {"p_user": user_id, "p_agent": job.requester_agent_id, "p_job": job.id}
    statement = _LOCK_PROFILE[exclusive]
    locked = (await session.execute(statement, params)).one_or_none()
    if locked is None:  # the owner's first paid publish: make the row (race-safe), then lock it
        await billing.ensure(session, user_id)
        locked = (await session.execute(statement, params)).one()
    return locked


async def secure(
    session: AsyncSession,
    fee_bps: int,
    actor: Actor,
    job: Job,
    funding: Funding | None = None,
    *,
    first_attempt: bool = False,
    has_row: bool = True,
    read: Sequence[Any] | None = None,
) -> JobPayment | None:
    """In the publish's write unit of work (the job locked, still a draft): reserve pay + fee from the
    requester owner's balance, or raise 409 `payment_not_ready` naming what is missing. A free job needs
    nothing (a payment left waiting from a paid version of the draft is voided; `has_row` False: the
    caller's read found the job has no payment row, so there is none to look for). `first_attempt` (the
    publish ran before its prepare step): raise PrepareFirst instead of refusing, so `prepare` records the
    waiting payment, tells the owner, or charges an auto top-up, and the publish runs again. `read`: what the
    caller's read of the job brought of a paid job (`with_paid_reads`: the profile, the activation, the
    reserve's accounts; the profile None where it was not read), or None."""
    if job.reward_amount_cents <= 0:
        leftover = await find(session, job.id) if has_row else None
        if leftover is not None and leftover.status == PaymentStatus.REQUIRES_ACTION:
            await _move(session, leftover, PaymentStatus.VOID, missing=[])
        return None
    if job.owner_id is None:
        raise not_ready(job, job.reward_amount_cents, 0, ["CLAIMED_OWNER"])
    # A first attempt on PostgreSQL shares the profile's lock unless its checks add up earlier spending
    # (this process saw the owner's so, or finds them so now: the next attempt then locks it FOR UPDATE).
    postgres = dialect_of(session) == "postgresql"
    exclusive = not (postgres and first_attempt) or job.owner_id in _SUMMING_OWNERS
    folded = read is not None and read[0] is not None  # the profile came with the job (PostgreSQL: shared)
    if folded and exclusive and postgres:
        raise PrepareFirst  # this owner's checks need the profile alone: the next attempt locks it so
    if folded:
        assert read is not None
        profile, activation, *reserve_accounts = read
        # The payment is read now, after the job's lock: on PostgreSQL the job's read may predate its
        # writers' last work (SQLite's writer holds the database: the job's read is current).
        found = await find(session, job.id) if has_row else None
    else:
        profile, activation, found, *reserve_accounts = await _lock_profile(
            session, job, job.owner_id, exclusive=exclusive
        )
    if postgres and first_attempt and _sums_spending(profile, activation) != exclusive:
        if exclusive:
            _SUMMING_OWNERS.discard(job.owner_id)
        else:
            if len(_SUMMING_OWNERS) >= _HINTS_MAX:
                _SUMMING_OWNERS.clear()
            _SUMMING_OWNERS.add(job.owner_id)
            raise PrepareFirst
    # A first publish inserts its payment once, already RESERVED (one statement less than insert + move).
    payment = await _open_row(session, job, fee_bps, add=False, found=(found,))
    fresh = sa_inspect(payment).transient
    total = payment.pay_cents + payment.fee_cents
    if funding is not None and funding.charge is not None and funding.charge.status == "succeeded":
        await ledger.top_up(
            session,
            user_id=job.owner_id,
            amount_cents=funding.amount_cents,
            processor_ref=funding.charge.id,
            key=f"topup:{funding.charge.id}",
        )
    if _owner_confirms(actor):
        payment.confirmed_total_cents, payment.confirmed_at = total, clock.now()
    # The rules first; the money is the reserve's guarded debit to decide (no balance read on success).
    s = await _standing(
        session, actor, job, payment, total, profile=profile, activation=(activation,), with_balance=False
    )
    if _missing(s, total):
        if first_attempt:
            raise PrepareFirst
        s.available_cents = (await ledger.balances(session, job.owner_id)).available_cents
        raise not_ready(job, total, s.available_cents, _missing(s, total))
    # The balance as read (no lock) covers it: the reserve rides with the commit's statement (PostgreSQL),
    # so the owner's accounts are locked from there to the commit only. A first attempt only: a refusal
    # there (another spend got there first) raises PrepareFirst: the prepare step reads the balance again,
    # and the next attempt reserves at once and says what is missing.
    source = reserve_accounts[0] if reserve_accounts else None
    at_commit = first_attempt and source is not None and source.balance_cents >= total
    try:
        txn = await ledger.reserve(
            session,
            user_id=job.owner_id,
            amount_cents=total,
            job_id=job.id,
            key=f"reserve:{job.id}",
            metadata={
                "jobPaymentId": payment.id,
                "payCents": payment.pay_cents,
                "feeCents": payment.fee_cents,
            },
            savepoint=False,  # a refusal ends this publish: nothing of the write step may commit
            accounts_read=reserve_accounts,
            at_commit=at_commit,
            refused=PrepareFirst,
        )
    except Conflict as exc:
        if exc.code != "insufficient_funds":
            raise
        if first_attempt:
            raise PrepareFirst from exc
        s.available_cents = (await ledger.balances(session, job.owner_id)).available_cents
        # Short: what fixes it (a card, a declined one); or auto top-up would cover it, but the prepare
        # step did not charge (or not enough): the balance then.
        raise not_ready(job, total, s.available_cents, _missing(s, total) or ["BALANCE"]) from exc
    now = clock.now()
    if fresh:
        payment.status, payment.missing = PaymentStatus.RESERVED, []
        payment.reserve_transaction_id, payment.reserved_at = txn.id, now
        # In its final state, with the transaction's last statement (db/rows.py): nothing in the publish
        # reads it back but a retry's answer, which writes it first. Where the job's read said it had no
        # payment (`folded`, PostgreSQL), one made meanwhile refuses the commit instead (`_insert_once`).
        if folded and postgres:
            await _insert_once(session, payment)
        else:
            await insert_at_commit(session, [payment])
        return payment
    return await _move(
        session,
        payment,
        PaymentStatus.RESERVED,
        missing=[],
        reserve_transaction_id=txn.id,
        reserved_at=now,
    )


# --- the end of a paid job --------------------------------------------------------------------------------


async def capture(
    session: AsyncSession,
    job_id: str,
    worker: Agent,
    *,
    source: PaymentStatus = PaymentStatus.RESERVED,
    payment: JobPayment | None = None,
    accounts_read: Sequence[LedgerAccount | None] = (),
) -> JobPayment | None:
    """In the award's transaction: the escrow pays the worker's owner the pay and the platform the fee.
    A free job has no payment (None). The worker must still have an owner (409 `worker_has_no_owner`).
    (`source` RELEASED: staff's award after a no-award, the escrow taken again by `capture_released`.)
    `payment`: the job's, as the caller read it with the job's lock held (None: read here);
    `accounts_read`: the accounts the capture moves, as the caller read them (`ledger.capture`)."""
    if payment is None:
        payment = await find(session, job_id)
    if payment is None or payment.status != source:
        return None
    if worker.owner_id is None:
        raise Conflict(
            "The winning worker has no owner to pay (its owner's account is gone): award another "
            "submission, or close the job with no-award (the escrow then goes back to you).",
            code="worker_has_no_owner",
            worker_agent_id=worker.id,
        )
    # The posting first (its key `capture:<job>` lands once), then the payment's move records it in the
    # same statement; a concurrent end of the job fails that compare-and-set and rolls both back.
    txn = await ledger.capture(
        session,
        requester_user_id=payment.user_id,
        worker_owner_user_id=worker.owner_id,
        pay_cents=payment.pay_cents,
        fee_cents=payment.fee_cents,
        job_id=job_id,
        key=f"capture:{job_id}",
        metadata={"jobPaymentId": payment.id, "workerAgentId": worker.id},
        savepoint=False,  # the award's transaction: any failure here fails the award
        accounts_read=accounts_read,
        # The reserved escrow cannot refuse its capture (staff's after a no-award reserved it again first):
        # written with the commit's statement (PostgreSQL), so the shared accounts it locks are held only
        # from there to the commit. Every capture so: each takes the documents' counters (in the request)
        # before those accounts, in one order, where a capture posted at once would take them the other way
        # round and could deadlock with one at commit.
        at_commit=True,
    )
    return await _move(
        session,
        payment,
        PaymentStatus.CAPTURED,
        captured_at=clock.now(),
        worker_agent_id=worker.id,
        worker_owner_id=worker.owner_id,
        capture_transaction_id=txn.id,
    )


async def release(session: AsyncSession, job_id: str) -> JobPayment | None:
    """In the transaction of the move that ended the job without an award (no-award, a cancelled or
    declined Direct Hire, the deadlines): the whole escrow, pay and fee, goes back to the owner."""
    payment = await find(session, job_id)
    if payment is None or payment.status != PaymentStatus.RESERVED:
        if payment is not None and payment.status == PaymentStatus.REQUIRES_ACTION:
            await _move(session, payment, PaymentStatus.VOID, missing=[])
        return None
    payment = await _move(session, payment, PaymentStatus.RELEASED, released_at=clock.now())
    txn = await ledger.release(
        session,
        user_id=payment.user_id,
        amount_cents=payment.pay_cents + payment.fee_cents,
        job_id=job_id,
        key=f"release:{job_id}",
        # The split lets the credit note show the pay and the fee it gives back (documents.issue).
        metadata={"jobPaymentId": payment.id, "payCents": payment.pay_cents, "feeCents": payment.fee_cents},
    )
    payment.release_transaction_id = txn.id
    await session.flush()
    return payment


async def capture_released(
    session: AsyncSession, job_id: str, worker: Agent, *, held_cents: int, key: str
) -> JobPayment | None:
    """Staff's FORCE_AWARD after a no-award: the escrow had gone back, so the job's pay and fee are taken
    from the requester's balance again (what a dispute held, plus any shortfall: 409 `insufficient_funds`
    when the balance is short), then captured as an award's would be."""
    payment = await find(session, job_id)
    if payment is None or payment.status != PaymentStatus.RELEASED:
        return await capture(session, job_id, worker)
    shortfall = payment.pay_cents + payment.fee_cents - held_cents
    if shortfall > 0:
        await ledger.reserve(
            session,
            user_id=payment.user_id,
            amount_cents=shortfall,
            job_id=job_id,
            key=f"{key}:reserve",
            metadata={"jobPaymentId": payment.id},
            savepoint=False,
        )
    return await capture(session, job_id, worker, source=PaymentStatus.RELEASED)


async def refund_captured(session: AsyncSession, job_id: str) -> JobPayment | None:
    """A dispute's REFUND_REQUESTER after an award whose payout was not sent (the caller cancelled it): the
    worker's owner's earnings and the fee go back to the requester's balance (a credit note)."""
    payment = await find(session, job_id)
    if payment is None or payment.status != PaymentStatus.CAPTURED:
        return None
    assert payment.worker_owner_id is not None
    txn = await ledger.reverse_capture(
        session,
        requester_user_id=payment.user_id,
        worker_owner_user_id=payment.worker_owner_id,
        pay_cents=payment.pay_cents,
        fee_cents=payment.fee_cents,
        job_id=job_id,
        metadata={"jobPaymentId": payment.id},
    )
    return await _move(
        session, payment, PaymentStatus.REFUNDED, refunded_at=clock.now(), refund_transaction_id=txn.id
    )


async def refund_part(session: AsyncSession, job_id: str, amount_cents: int, key: str) -> JobPayment:
    """Staff's partial refund of a job's escrow (RESERVED): `amount_cents` of the pay goes back to the
    requester's balance (a credit note) and the reward shrinks by it; at least a cent of pay stays (cancel
    the job to return it all). The fee, charged at publish, is unchanged."""
    payment = await find(session, job_id)
    if payment is None or payment.status != PaymentStatus.RESERVED:
        raise Conflict(
            "Only a job whose reward is in escrow (a paid, published job not yet awarded) can be refunded "
            "in part.",
            code="payment_not_reserved",
            current_state=payment.status if payment else None,
        )
    if amount_cents >= payment.pay_cents:
        raise field_error(
            "amountCents",
            f"A partial refund leaves at least a cent of the {payment.pay_cents} cents of pay (at most "
            f"{payment.pay_cents - 1}); cancel the job to return the whole escrow.",
            "refund_too_large",
        )
    await ledger.release(
        session,
        user_id=payment.user_id,
        amount_cents=amount_cents,
        job_id=job_id,
        key=key,
        metadata={"jobPaymentId": payment.id, "payCents": amount_cents, "feeCents": 0, "partial": True},
    )
    moved = await session.execute(
        update(JobPayment)
        .where(JobPayment.id == payment.id, JobPayment.status == PaymentStatus.RESERVED)
        .values(
            pay_cents=JobPayment.pay_cents - amount_cents,
            refunded_cents=JobPayment.refunded_cents + amount_cents,
            refunded_at=clock.now(),
        )
        .returning(JobPayment.id)
        .execution_options(synchronize_session=False)
    )
    if moved.scalar() is None:
        raise Conflict("The job's payment changed while this request ran; try again.", code="payment_changed")
    await session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(reward_amount_cents=Job.reward_amount_cents - amount_cents)
        .execution_options(synchronize_session=False)
    )
    await reread(session, payment)
    return payment


# --- reads ----------------------------------------------------------------------------------------------


def no_payment(job: Job) -> NotFound:
    return NotFound(
        "This job has no payment: it is free (rewardAmountCents 0), or its paid publish has not been tried "
        "yet.",
        code="no_payment",
        job_id=job.id,
        next_action=step(Act.PUBLISH_JOB, "Publish the job (a paid one reserves its reward).", job_id=job.id),
    )


async def view(session: AsyncSession, job: Job) -> JobPaymentView:
    """The job's payment (the caller checked the job is the actor's); 404 `no_payment` when there is none.
    A waiting payment shows what it lacks with the current balance."""
    payment = await find(session, job.id)
    if payment is None:
        raise no_payment(job)
    return await render(session, job, payment)


async def render(session: AsyncSession, job: Job, payment: JobPayment) -> JobPaymentView:
    total = payment.pay_cents + payment.fee_cents
    missing: list[PaymentRequirement] = []
    if payment.status == PaymentStatus.REQUIRES_ACTION:
        available = (await ledger.balances(session, payment.user_id)).available_cents
        missing = [requirement(code, job, total, available) for code in payment.missing or []]
    return JobPaymentView(
        id=payment.id,
        job_id=payment.job_id,
        requester_agent_id=payment.requester_agent_id,
        status=payment.status,
        pay_cents=payment.pay_cents,
        fee_cents=payment.fee_cents,
        fee_bps=payment.fee_bps,
        total_cents=total,
        currency=payment.currency,
        missing=missing,
        confirmed_at=payment.confirmed_at,
        autotopup_charge_id=payment.autotopup_charge_id,
        reserve_transaction_id=payment.reserve_transaction_id,
        capture_transaction_id=payment.capture_transaction_id,
        release_transaction_id=payment.release_transaction_id,
        worker_agent_id=payment.worker_agent_id,
        reserved_at=payment.reserved_at,
        captured_at=payment.captured_at,
        released_at=payment.released_at,
        created_at=payment.created_at,
        updated_at=payment.updated_at,
    )


async def waiting(session: AsyncSession, job_ids: list[str]) -> dict[str, JobPayment]:
    """The waiting (REQUIRES_ACTION) payments of these jobs, by job id (the agent's home)."""
    if not job_ids:
        return {}
    rows = await session.scalars(
        select(JobPayment).where(
            JobPayment.job_id.in_(job_ids), JobPayment.status == PaymentStatus.REQUIRES_ACTION
        )
    )
    return {p.job_id: p for p in rows}
