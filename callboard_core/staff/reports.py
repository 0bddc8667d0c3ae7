"""The console's read-only surfaces: the overview and the moderation queue (any staff role), and the
financial ones hidden from SUPPORT (the routes are ADMIN's): analytics, the audit log, payments, ledger
transactions. Figures come from the rows themselves (the ledger for money), never from a cache.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.audit.models import AuditEvent
from callboard_core.bug_reports.models import BugReport, BugReportStatus
from callboard_core.capabilities.models import CapabilityTagRequest, TagRequestStatus
from callboard_core.errors import NotFound
from callboard_core.jobs.models import Job
from callboard_core.jobs.states import JobStatus
from callboard_core.ledger.models import LedgerAccount, LedgerEntry, LedgerTransaction, TransactionKind
from callboard_core.payments.models import JobPayment
from callboard_core.staff import schemas as staff_schemas
from callboard_core.users.models import User
from callboard_core.waitlist.models import WaitlistSignup, WaitlistStatus

MODERATION_LIMIT = 100
ESCROW_KINDS = {
    "HELD": TransactionKind.RESERVE,
    "CAPTURED": TransactionKind.CAPTURE,
    "RELEASED": TransactionKind.RELEASE,
}


async def count_of(session: AsyncSession, statement: Any) -> int:
    """A count statement's answer as an int (0 for none)."""
    return int(await session.scalar(statement) or 0)


async def _by(session: AsyncSession, column: Any, *where: Any) -> dict[str, int]:
    rows = await session.execute(select(column, func.count()).where(*where).group_by(column))
    return {str(value): int(count) for value, count in rows.all()}


async def overview(session: AsyncSession) -> staff_schemas.Overview:
    return staff_schemas.Overview(
        users=await _by(session, User.status),
        agents=await _by(session, Agent.status, Agent.deleted_at.is_(None)),
        jobs=await _by(session, Job.status, Job.is_starter.is_(False)),
        bug_reports=await _by(session, BugReport.status),
        pending_tag_requests=int(
            await session.scalar(
                select(func.count())
                .select_from(CapabilityTagRequest)
                .where(CapabilityTagRequest.status == TagRequestStatus.PENDING)
            )
            or 0
        ),
        pending_waitlist=int(
            await session.scalar(
                select(func.count())
                .select_from(WaitlistSignup)
                .where(WaitlistSignup.status == WaitlistStatus.PENDING)
            )
            or 0
        ),
    )


async def moderation(session: AsyncSession) -> staff_schemas.ModerationQueue:
    """What waits on staff: tag requests to review, bug reports not yet addressed, suspended agents."""
    Item = staff_schemas.ModerationItem
    tags = await session.scalars(
        select(CapabilityTagRequest)
        .where(CapabilityTagRequest.status == TagRequestStatus.PENDING)
        .order_by(CapabilityTagRequest.created_at)
        .limit(MODERATION_LIMIT)
    )
    bugs = await session.scalars(
        select(BugReport)
        .where(BugReport.status.in_([BugReportStatus.PENDING, BugReportStatus.UNADDRESSED]))
        .order_by(BugReport.created_at)
        .limit(MODERATION_LIMIT)
    )
    suspended = await session.scalars(
        select(Agent)
        .where(Agent.status == AgentStatus.SUSPENDED, Agent.deleted_at.is_(None))
        .order_by(Agent.updated_at)
        .limit(MODERATION_LIMIT)
    )
    items = [
        *(Item(kind="TAG_REQUEST", id=t.id, summary=t.raw_text, created_at=t.created_at) for t in tags),
        *(Item(kind="BUG_REPORT", id=b.id, summary=b.summary[:200], created_at=b.created_at) for b in bugs),
        *(
            Item(kind="SUSPENDED_AGENT", id=a.id, summary=f"@{a.handle}", created_at=a.updated_at)
            for a in suspended
        ),
    ]
    return staff_schemas.ModerationQueue(items=sorted(items, key=lambda i: (i.created_at, i.id)))


async def analytics(session: AsyncSession, days: int) -> staff_schemas.Analytics:
    since = clock.now() - timedelta(days=days)
    credits = func.sum(LedgerEntry.amount_cents).filter(LedgerEntry.amount_cents > 0)
    money_rows = await session.execute(
        select(LedgerTransaction.kind, credits)
        .join(LedgerEntry, LedgerEntry.transaction_id == LedgerTransaction.id)
        .where(LedgerTransaction.created_at >= since)
        .group_by(LedgerTransaction.kind)
    )
    money = {str(kind): int(total or 0) for kind, total in money_rows.all()}
    fees = await session.scalar(
        select(func.coalesce(func.sum(LedgerEntry.amount_cents), 0))
        .join(LedgerAccount, LedgerAccount.id == LedgerEntry.account_id)
        .join(LedgerTransaction, LedgerTransaction.id == LedgerEntry.transaction_id)
        .where(LedgerAccount.kind == "PLATFORM_FEES", LedgerTransaction.created_at >= since)
    )

    async def count(model: Any, *where: Any) -> int:
        return await count_of(session, select(func.count()).select_from(model).where(*where))

    return staff_schemas.Analytics(
        days=days,
        since=since,
        new_users=await count(User, User.created_at >= since),
        new_agents=await count(Agent, Agent.created_at >= since),
        jobs_published=await count(Job, Job.published_at >= since, Job.is_starter.is_(False)),
        jobs_awarded=await count(
            Job, Job.status == JobStatus.AWARDED, Job.updated_at >= since, Job.is_starter.is_(False)
        ),
        money=money,
        platform_fees_cents=int(fees or 0),
    )


async def audit_log(session: AsyncSession, q: staff_schemas.AuditLogQuery) -> staff_schemas.AuditLog:
    conditions = []
    if q.action:
        conditions.append(AuditEvent.action == q.action)
    if q.target_type:
        conditions.append(AuditEvent.target_type == q.target_type)
    if q.query and q.query.strip():
        conditions.append(
            or_(AuditEvent.actor_id == q.query.strip(), AuditEvent.target_id == q.query.strip())
        )
    rows = await session.scalars(
        select(AuditEvent)
        .where(*conditions)
        .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
        .limit(q.limit)
    )
    return staff_schemas.AuditLog(
        entries=[
            staff_schemas.AuditLogEntry(
                id=e.id,
                actor_type=e.actor_type,
                actor_id=e.actor_id,
                actor_role=e.actor_role,
                request_id=e.request_id,
                action=e.action,
                target_type=e.target_type,
                target_id=e.target_id,
                data=e.data,
                created_at=e.created_at,
            )
            for e in rows
        ]
    )


async def payments(session: AsyncSession, q: staff_schemas.PaymentQuery) -> staff_schemas.AdminPaymentList:
    conditions = []
    if q.query and q.query.strip():
        ref = q.query.strip()
        conditions.append(or_(JobPayment.id == ref, JobPayment.job_id == ref, JobPayment.user_id == ref))
    rows = await session.scalars(
        select(JobPayment)
        .where(*conditions)
        .order_by(JobPayment.created_at.desc(), JobPayment.id.desc())
        .limit(q.limit)
    )
    return staff_schemas.AdminPaymentList(
        payments=[
            staff_schemas.AdminPayment(
                id=p.id,
                job_id=p.job_id,
                user_id=p.user_id,
                requester_agent_id=p.requester_agent_id,
                worker_agent_id=p.worker_agent_id,
                status=p.status,
                pay_cents=p.pay_cents,
                fee_cents=p.fee_cents,
                currency=p.currency,
                created_at=p.created_at,
            )
            for p in rows
        ]
    )


def _transaction(txn: LedgerTransaction, amount: int) -> staff_schemas.AdminTransaction:
    return staff_schemas.AdminTransaction(
        id=txn.id,
        kind=txn.kind,
        idempotency_key=txn.idempotency_key,
        user_id=txn.user_id,
        job_id=txn.job_id,
        processor_ref=txn.processor_ref,
        reverses_id=txn.reverses_id,
        amount_cents=amount,
        metadata=dict(txn.meta or {}),
        created_at=txn.created_at,
    )


async def transactions(
    session: AsyncSession, q: staff_schemas.TransactionQuery
) -> staff_schemas.AdminTransactionList:
    conditions = []
    if q.query and q.query.strip():
        ref = q.query.strip()
        conditions.append(
            or_(
                LedgerTransaction.user_id == ref,
                LedgerTransaction.job_id == ref,
                LedgerTransaction.processor_ref == ref,
                LedgerTransaction.id == ref,
            )
        )
    if q.escrow_status:
        conditions.append(LedgerTransaction.kind == ESCROW_KINDS[q.escrow_status])
    if q.payment_method == "CARD":
        conditions.append(LedgerTransaction.kind == TransactionKind.TOPUP)
    elif q.payment_method == "BALANCE":
        conditions.append(LedgerTransaction.kind != TransactionKind.TOPUP)
    credits = (
        select(func.coalesce(func.sum(LedgerEntry.amount_cents), 0))
        .where(LedgerEntry.transaction_id == LedgerTransaction.id, LedgerEntry.amount_cents > 0)
        .scalar_subquery()
    )
    rows = await session.execute(
        select(LedgerTransaction, credits)
        .where(*conditions)
        .order_by(LedgerTransaction.created_at.desc(), LedgerTransaction.id.desc())
        .limit(q.limit)
    )
    return staff_schemas.AdminTransactionList(transactions=[_transaction(t, int(a)) for t, a in rows.all()])


async def transaction(session: AsyncSession, transaction_id: str) -> staff_schemas.AdminTransactionDetail:
    txn = await session.get(LedgerTransaction, transaction_id)
    if txn is None:
        raise NotFound(
            "No such ledger transaction.", code="transaction_not_found", transactionId=transaction_id
        )
    rows = await session.execute(
        select(LedgerEntry, LedgerAccount)
        .join(LedgerAccount, LedgerAccount.id == LedgerEntry.account_id)
        .where(LedgerEntry.transaction_id == transaction_id)
        .order_by(LedgerEntry.id)
    )
    entries = [
        staff_schemas.AdminEntry(
            id=e.id,
            account_kind=a.kind,
            holder_id=a.holder_id,
            amount_cents=e.amount_cents,
            balance_after_cents=e.balance_after_cents,
        )
        for e, a in rows.all()
    ]
    return staff_schemas.AdminTransactionDetail(
        transaction=_transaction(txn, sum(e.amount_cents for e in entries if e.amount_cents > 0)),
        entries=entries,
    )
