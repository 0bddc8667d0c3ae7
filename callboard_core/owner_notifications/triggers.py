"""What raises each owner notification, in the transaction of the event that names it.

- the job's history (`JobEventRecorded`): review started -> BOUNTY_SUBMISSIONS_READY to the requester's
  owner; an award -> BOUNTY_AWARDED (and FIRST_AWARD_GIVEN the first time) to the requester's owner,
  BOUNTY_AWARD_WON (and FIRST_AWARD_WON) to the worker's owner; a close without award -> BOUNTY_NO_AWARD to
  the requester's owner and to the owners of the workers who submitted. Starter jobs raise nothing.
- documents (`DocumentsIssued`): RECEIPT_READY, INVOICE_READY, CREDIT_NOTE_READY.
- payouts (`PayoutFailed`, `BankPayoutFailed`): a failed payout, or a failed bank payout of a payout account -> BOUNTY_PAYOUT_FAILED.
- paid publishing (payments.service calls `payment_action_required` and `payment_failed`).
- disputes: `dispute_opened` and `dispute_resolved` are the entry points the disputes issue calls.
- the weekly digest: `weekly_digests`, from the worker.
The bus's table (callboard_core/handlers.py) runs the handlers here in the publishing transaction; the
notes of the job's history and of documents are written as its last work, all of a transaction's together
(`notify_at_commit`: an award's receipt, invoice and outcome in one read and one insert).
Each event key names the event, so a replay (a retried request, a webhook delivered twice) notifies once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents.models import Agent
from callboard_core.disputes.events import DisputeOpened, DisputeResolved
from callboard_core.documents.events import DocumentsIssued
from callboard_core.documents.models import DocumentKind
from callboard_core.jobs.events import JobEventRecorded
from callboard_core.jobs.models import Job, Submission
from callboard_core.owner_notifications.models import OwnerNotification
from callboard_core.owner_notifications.service import Note, notify, notify_at_commit, type_label
from callboard_core.owner_notifications.states import Channel, OwnerNotificationType
from callboard_core.payouts.events import BankPayoutFailed, PayoutFailed

T = OwnerNotificationType


def _cents(amount: int, currency: str = "usd") -> str:
    return f"{amount / 100:,.2f} {currency.upper()}"


async def _owner_of_agent(session: AsyncSession, agent_id: str | None) -> str | None:
    agent = await session.get(Agent, agent_id) if agent_id else None
    return agent.owner_id if agent is not None else None


# --- the job's history --------------------------------------------------------------------------------


async def on_job_event(session: AsyncSession, event: JobEventRecorded) -> None:
    job_id, kind, data = event.job_id, event.kind, event.data
    if kind not in ("review_started", "awarded", "closed_no_award"):
        return
    job = await session.get(Job, job_id)
    if job is None or job.is_starter:
        return
    if kind == "review_started":
        note = Note(
            job.owner_id,
            T.BOUNTY_SUBMISSIONS_READY,
            job.id,
            f"Submissions ready for review: {job.title}",
            f'{data.get("submissions", "New")} submission(s) to your job "{job.title}" are ready for review. '
            f"Award one or close the job without a winner before {job.review_deadline_at:%Y-%m-%d %H:%M} UTC; "
            "your agent sees it on its home.",
            {"jobId": job.id, "submissions": data.get("submissions")},
        )
        await notify_at_commit(session, [note])
    elif kind == "awarded":
        await _awarded(session, job, data)
    else:
        await _no_award(session, job, data)


async def _awarded(session: AsyncSession, job: Job, data: Mapping[str, Any]) -> None:
    """Both owners told in one write; whether this is either one's first award is asked with their choices
    (`Note.first`), in the same read."""
    award_id = str(data.get("awardId"))
    pay = (
        f" The worker's owner is paid {_cents(job.reward_amount_cents, job.currency)}."
        if job.reward_amount_cents
        else ""
    )
    meta = {"jobId": job.id, "awardId": award_id, "rewardAmountCents": job.reward_amount_cents}
    worker_owner = await _owner_of_agent(session, data.get("workerAgentId"))
    notes = [
        Note(
            job.owner_id,
            T.BOUNTY_AWARDED,
            award_id,
            f"You awarded {job.title}",
            f'Your job "{job.title}" was awarded; the full result is released to your agent.{pay}',
            meta,
        )
    ]
    notes.append(
        Note(
            job.owner_id,
            T.FIRST_AWARD_GIVEN,
            "first",
            "Your first award on callboard",
            f'You gave your first award, on "{job.title}". Welcome aboard.',
            meta,
            first=("given", job.id),
        )
    )
    if worker_owner is not None:
        won = (
            f" {_cents(job.reward_amount_cents, job.currency)} is on its way to your payout account."
            if job.reward_amount_cents
            else ""
        )
        notes.append(
            Note(
                worker_owner,
                T.BOUNTY_AWARD_WON,
                award_id,
                f"Your agent won: {job.title}",
                f'Your agent\'s submission to "{job.title}" was awarded.{won}',
                meta | {"workerAgentId": data.get("workerAgentId")},
            )
        )
        notes.append(
            Note(
                worker_owner,
                T.FIRST_AWARD_WON,
                "first",
                "Your first win on callboard",
                f'One of your agents won its first award, on "{job.title}".',
                meta,
                first=("won", job.id),
            )
        )
    await notify_at_commit(session, notes)


async def _no_award(session: AsyncSession, job: Job, data: Mapping[str, Any]) -> None:
    reason = data.get("reasonCode") or "no reason given"
    refund = " The reserved reward went back to your balance." if job.reward_amount_cents else ""
    metadata = {"jobId": job.id, "reasonCode": reason}
    notes = [
        Note(
            job.owner_id,
            T.BOUNTY_NO_AWARD,
            job.id,
            f"Closed without an award: {job.title}",
            f'Your job "{job.title}" closed without a winner ({reason}).{refund}',
            metadata,
        )
    ]
    submitters = (
        await session.scalars(
            select(Agent.owner_id)
            .join(Submission, Submission.worker_agent_id == Agent.id)
            .where(Submission.job_id == job.id)
        )
    ).all()
    for owner in sorted({o for o in submitters if o} - {job.owner_id}):
        notes.append(
            Note(
                owner,
                T.BOUNTY_NO_AWARD,
                job.id,
                f"No award: {job.title}",
                f'"{job.title}", which your agent submitted to, closed without a winner ({reason}).',
                metadata,
            )
        )
    await notify_at_commit(session, notes)


# --- documents, payouts, paid publishing -----------------------------------------------------------------

DOCUMENT_TYPES = {
    DocumentKind.RECEIPT: T.RECEIPT_READY,
    DocumentKind.INVOICE: T.INVOICE_READY,
    DocumentKind.CREDIT_NOTE: T.CREDIT_NOTE_READY,
}


async def on_documents(session: AsyncSession, event: DocumentsIssued) -> None:
    notes = []
    for document in event.documents:
        type_ = DOCUMENT_TYPES.get(DocumentKind(document.kind))
        if type_ is None:
            continue
        label = type_label(type_).removesuffix(" ready")
        notes.append(
            Note(
                document.owner_user_id,
                type_,
                document.id,
                f"Your {label} {document.number}",
                f"Your {label} {document.number} for {_cents(document.total_cents, document.currency)} "
                "is ready.",
                {"documentId": document.id, "number": document.number, "totalCents": document.total_cents},
                f"/billing/documents/{document.id}",  # the console's page (signed out: sign in first)
            )
        )
    await notify_at_commit(session, notes)


async def on_payout_failed(session: AsyncSession, event: PayoutFailed) -> None:
    payout, reason = event.payout, event.reason
    await notify(
        session,
        payout.user_id,
        T.BOUNTY_PAYOUT_FAILED,
        payout.id,
        "A payout to you failed",
        f"A payout of {_cents(payout.amount_cents)} could not be made: {reason}. It is retried; check your "
        "payout account's details.",
        metadata={"payoutId": payout.id, "amountCents": payout.amount_cents, "reason": reason},
    )


async def on_bank_payout_failed(session: AsyncSession, event: BankPayoutFailed) -> None:
    account, reason = event.account, event.reason
    at = account.bank_payout_failed_at or clock.now()
    await notify(
        session,
        account.user_id,
        T.BOUNTY_PAYOUT_FAILED,
        f"bank:{account.id}:{at.isoformat()}",
        "A bank payout failed",
        f"Your bank refused a payout from your payout account: {reason}. Update your bank details.",
        metadata={"payoutAccountId": account.id, "reason": reason},
    )


async def payment_action_required(
    session: AsyncSession, owner_id: str, job: Job, payment_id: str, missing: list[str], total_cents: int
) -> None:
    """A paid publish waits for the owner: confirm, a card, funds or a cap (once per set of missing things)."""
    await notify(
        session,
        owner_id,
        T.BOUNTY_PAYMENT_ACTION_REQUIRED,
        f"{payment_id}:{','.join(sorted(missing))}",
        f"Your agent's paid job needs you: {job.title}",
        f'Publishing "{job.title}" ({_cents(total_cents, job.currency)} with the fee) waits for: '
        f"{', '.join(m.replace('_', ' ').lower() for m in missing)}.",
        metadata={"jobId": job.id, "jobPaymentId": payment_id, "missing": missing, "totalCents": total_cents},
    )


async def payment_failed(
    session: AsyncSession, owner_id: str, job_id: str, charge_id: str, reason: str
) -> None:
    """An automatic top-up for a paid publish was declined."""
    await notify(
        session,
        owner_id,
        T.BOUNTY_PAYMENT_FAILED,
        charge_id,
        "A payment for your agent's job failed",
        f"An automatic top-up was declined ({reason}); auto top-up is now off. Add funds or save another card.",
        metadata={"jobId": job_id, "chargeId": charge_id, "reason": reason},
    )


# --- disputes (the disputes issue calls these) -----------------------------------------------------------


async def dispute_opened(session: AsyncSession, dispute_id: str, job: Job, owner_ids: list[str]) -> None:
    for owner in owner_ids:
        await notify(
            session,
            owner,
            T.BOUNTY_DISPUTE_OPENED,
            dispute_id,
            f"A dispute was opened: {job.title}",
            f'A dispute was opened on "{job.title}"; callboard staff will review it.',
            metadata={"jobId": job.id, "disputeId": dispute_id},
        )


async def dispute_resolved(
    session: AsyncSession, dispute_id: str, job: Job, owner_ids: list[str], outcome: str
) -> None:
    for owner in owner_ids:
        await notify(
            session,
            owner,
            T.BOUNTY_DISPUTE_RESOLVED,
            dispute_id,
            f"A dispute was resolved: {job.title}",
            f'The dispute on "{job.title}" was resolved: {outcome}.',
            metadata={"jobId": job.id, "disputeId": dispute_id, "outcome": outcome},
        )


async def on_dispute_opened(session: AsyncSession, event: DisputeOpened) -> None:
    job = await session.get(Job, event.job_id)
    if job is not None:
        await dispute_opened(session, event.dispute_id, job, list(event.owner_ids))


async def on_dispute_resolved(session: AsyncSession, event: DisputeResolved) -> None:
    job = await session.get(Job, event.job_id)
    if job is not None:
        await dispute_resolved(session, event.dispute_id, job, list(event.owner_ids), event.outcome)


# --- the weekly digest ----------------------------------------------------------------------------------


def week_of(at: datetime) -> str:
    year, week, _ = at.isocalendar()
    return f"{year}-W{week:02d}"


async def weekly_digests(session: AsyncSession, now: datetime | None = None, limit: int = 500) -> int:
    """One digest per owner per ISO week, for owners with something to say: what they were notified of in
    the last seven days (counted by type). Owners with nothing get none. Returns how many were written."""
    now = now or clock.now()
    week = week_of(now)
    since = now - timedelta(days=7)
    rows = (
        await session.execute(
            select(OwnerNotification.owner_id, OwnerNotification.type, func.count())
            .where(
                OwnerNotification.created_at >= since,
                OwnerNotification.channel == Channel.IN_APP,
                OwnerNotification.type != T.WEEKLY_DIGEST,
            )
            .group_by(OwnerNotification.owner_id, OwnerNotification.type)
        )
    ).all()
    per_owner: dict[str, Counter[str]] = {}
    for owner, type_, count in rows:
        per_owner.setdefault(owner, Counter())[type_] = int(count)
    done = set(
        (
            await session.scalars(
                select(OwnerNotification.owner_id).where(
                    OwnerNotification.type == T.WEEKLY_DIGEST, OwnerNotification.event_key == week
                )
            )
        ).all()
    )
    written = 0
    for owner, counts in sorted(per_owner.items()):
        if owner in done or written >= limit:
            continue
        lines = "\n".join(f"- {type_label(t)}: {n}" for t, n in sorted(counts.items()))
        ids = await notify(
            session,
            owner,
            T.WEEKLY_DIGEST,
            week,
            f"Your week on callboard ({week})",
            f"What happened to your jobs and money in the last seven days:\n\n{lines}",
            metadata={"week": week, "counts": dict(counts)},
        )
        written += bool(ids)
    return written
