"""Who hears what: the core's one handler table (see bus.py). `Core.build` makes its bus from `table(core)`;
nothing else registers a listener, and each package's handlers stay in that package.

Order matters within an event: handlers run in the order listed (a ledger posting issues its documents
before the payout it queues is read by anyone; both before the commit that counts it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from callboard_core.agents import capability_links, lifecycle
from callboard_core.billing import cards, topups
from callboard_core.bus import AfterCommit, HandlerTable, InTransaction
from callboard_core.capabilities import service as capabilities
from callboard_core.disputes.events import DisputeOpened, DisputeResolved
from callboard_core.documents import issue as documents
from callboard_core.documents.events import DocumentsIssued
from callboard_core.jobs import lifecycle_hooks
from callboard_core.jobs.events import JobEventRecorded
from callboard_core.ledger import counting
from callboard_core.ledger.events import LedgerPosted
from callboard_core.owner_notifications import delivery, triggers
from callboard_core.owner_notifications.service import (
    EmailNotificationQueued,
    MailInTransaction,
    NotesCarryMails,
)
from callboard_core.payouts import accounts as payout_accounts
from callboard_core.payouts import service as payouts
from callboard_core.payouts.events import BankPayoutFailed, PayoutFailed
from callboard_core.processor import events as processor
from callboard_core.setup_links import service as setup_links

if TYPE_CHECKING:
    from callboard_core.container import Core


def table(core: Core) -> HandlerTable:
    # core.bus at the time of each commit (a test may extend it), not the one being built now.
    emails = delivery.Batch(core, core.mailer, core.settings, lambda work: core.bus.spawn(work))

    return {
        # The ledger: every new posting of a documented kind issues its documents; a capture queues the
        # worker's payout; committed postings are counted on /metrics.
        LedgerPosted: [
            InTransaction(documents.on_posted),
            InTransaction(payouts.on_posted),
            AfterCommit(counting.count_posting),
        ],
        # Owner notifications hear the job's history, documents and payouts; their email goes out after
        # the commit (into the outbox: with it, as its last work).
        JobEventRecorded: [InTransaction(triggers.on_job_event)],
        DocumentsIssued: [InTransaction(triggers.on_documents)],
        PayoutFailed: [InTransaction(triggers.on_payout_failed)],
        BankPayoutFailed: [InTransaction(triggers.on_bank_payout_failed)],
        DisputeOpened: [InTransaction(triggers.on_dispute_opened)],
        DisputeResolved: [InTransaction(triggers.on_dispute_resolved)],
        EmailNotificationQueued: [InTransaction(emails.queue)],
        MailInTransaction: [InTransaction(emails.in_transaction)],
        NotesCarryMails: [InTransaction(emails.carry_mails)],
        # The agent lifecycle asks what blocks an archive or delete, and whether there is history.
        lifecycle.BlockersOf: [InTransaction(lifecycle_hooks.job_blockers)],
        lifecycle.HasHistory: [InTransaction(lifecycle_hooks.job_history)],
        # The taxonomy's tag holders are the agents.
        capabilities.AgentOfRequester: [InTransaction(capability_links.check_requester_agent)],
        capabilities.TagRenamed: [InTransaction(capability_links.on_tag_renamed)],
        capabilities.HoldersRepointed: [InTransaction(capability_links.repoint_holders)],
        # The processor's facts (webhooks): saved cards, top-ups, payout accounts, transfers, setup links.
        processor.CardAttached: [InTransaction(cards.on_card_attached)],
        processor.CardSetupSucceeded: [
            InTransaction(cards.on_card_setup_succeeded),
            InTransaction(setup_links.on_card_setup_succeeded),
        ],
        processor.CardDetached: [InTransaction(cards.on_card_detached)],
        processor.CheckoutCompleted: [
            InTransaction(topups.on_checkout_completed),
            InTransaction(setup_links.on_checkout_completed),
        ],
        processor.PaymentSucceeded: [InTransaction(topups.on_payment_succeeded)],
        processor.PaymentFailed: [InTransaction(topups.on_payment_failed)],
        processor.AccountUpdated: [
            InTransaction(payout_accounts.on_account_updated),
            InTransaction(setup_links.on_account_updated),
        ],
        processor.TransferReversed: [InTransaction(payouts.on_transfer_reversed)],
        processor.AccountPayoutFailed: [InTransaction(payout_accounts.on_bank_payout_failed)],
        processor.AccountPayoutPaid: [InTransaction(payout_accounts.on_bank_payout_paid)],
    }
