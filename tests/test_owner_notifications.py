"""Owner notifications on both databases: each type raised by its real trigger (the job lifecycle, paid
publishing, documents, payouts; disputes through their entry points until disputes land), the per-owner log
and its routes, preferences, and email: the outbox by default, a real SMTP server (aiosmtpd) receiving plain
text and HTML with a working unsubscribe link, failures retried with back-off, never sent twice."""

from __future__ import annotations

import email
import email.policy
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import event, literal, select, text

from callboard_core import clock, metrics
from callboard_core.container import Core
from callboard_core.db.engine import dialect_of
from callboard_core.db.rows import insert_at_commit
from callboard_core.jobs.models import Job
from callboard_core.owner_notifications import delivery, service, triggers
from callboard_core.owner_notifications.models import OwnerNotification
from callboard_core.owner_notifications.states import MAX_ATTEMPTS, OwnerNotificationType
from callboard_core.users.models import User
from http_api.app import create_app
from tests.conftest import BASE_URL, ORIGIN, Collector, make_settings
from tests.jobs_helpers import Owner, all_submit, create_published, new_agent, new_owner, to_review
from tests.netutil import free_port
from tests.payments_helpers import buyer, draft, fund, save_card
from tests.payout_helpers import award, deliver, onboard_owner, payout_rows, sandbox

T = OwnerNotificationType


async def _log(owner: Owner) -> list[dict[str, Any]]:
    r = await owner.client.get("/me/notifications", params={"limit": 100})
    assert r.status_code == 200, r.text
    return list(r.json()["notifications"])


async def _types(owner: Owner) -> list[str]:
    return sorted(n["type"] for n in await _log(owner))


async def _rows(core: Core, owner_id: str) -> list[OwnerNotification]:
    async with core.uow(write=False) as uow:
        return list(
            (
                await uow.session.scalars(
                    select(OwnerNotification).where(OwnerNotification.owner_id == owner_id)
                )
            ).all()
        )


async def test_a_job_from_review_to_award_notifies_both_owners_once(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    requester_owner, worker_owner = await new_owner(app, core), await new_owner(app, core)
    requester, worker = await new_agent(requester_owner), await new_agent(worker_owner)
    job = await create_published(requester, client, title="Summarise the memo")
    submission = await to_review(client, job["id"], requester, worker)
    assert await _types(requester_owner) == ["BOUNTY_SUBMISSIONS_READY"]
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": submission}, headers=requester.h
    )
    assert r.status_code == 200, r.text
    assert await _types(requester_owner) == [
        "BOUNTY_AWARDED",
        "BOUNTY_SUBMISSIONS_READY",
        "FIRST_AWARD_GIVEN",
    ]
    assert await _types(worker_owner) == ["BOUNTY_AWARD_WON", "FIRST_AWARD_WON"]
    won = next(n for n in await _log(worker_owner) if n["type"] == "BOUNTY_AWARD_WON")
    assert set(won) == {
        "id",
        "type",
        "channel",
        "status",
        "subject",
        "body",
        "actionUrl",
        "metadata",
        "sentAt",
        "readAt",
        "error",
        "createdAt",
    }
    assert won["channel"] == "IN_APP" and won["status"] == "SENT" and won["actionUrl"].startswith(BASE_URL)
    assert "Summarise the memo" in won["subject"] and won["metadata"]["jobId"] == job["id"]

    # A second job: no second "first" notification; each owner's email copies went to the outbox.
    job2 = await create_published(requester, client)
    sub2 = await to_review(client, job2["id"], requester, worker)
    await client.post(f"/api/v2/jobs/{job2['id']}/award", json={"submissionId": sub2}, headers=requester.h)
    assert (await _types(worker_owner)).count("FIRST_AWARD_WON") == 1
    await core.bus.drain()
    emails = [r for r in await _rows(core, worker_owner.user_id) if r.channel == "EMAIL"]
    assert len(emails) == 3 and {r.status for r in emails} == {"SENT"}


async def test_first_award_notes_follow_the_owners_history_not_their_past_choices(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """ "First" is the owner's first award given or won, whichever agent: an owner who had the first-award
    notes switched off at the first award and on again later is not told of a "first" award at the second,
    and an owner's second agent winning is not the owner's first win."""
    requester_owner, worker_owner = await new_owner(app, core), await new_owner(app, core)
    requester, worker = await new_agent(requester_owner), await new_agent(worker_owner)
    other_worker = await new_agent(worker_owner)

    async def awarded_with_first_notes(enabled: bool, winner: Any) -> None:
        """The requester's owner sets the first-award note on or off, then awards a new job to `winner`."""
        choice = [{"type": "FIRST_AWARD_GIVEN", "emailEnabled": enabled, "inAppEnabled": enabled}]
        r = await requester_owner.client.patch("/me/notifications/preferences", json={"preferences": choice})
        assert r.status_code == 200, r.text
        job = await create_published(requester, client)
        submission = await to_review(client, job["id"], requester, winner)
        r = await client.post(
            f"/api/v2/jobs/{job['id']}/award", json={"submissionId": submission}, headers=requester.h
        )
        assert r.status_code == 200, r.text

    await awarded_with_first_notes(False, worker)
    assert "FIRST_AWARD_GIVEN" not in await _types(requester_owner)
    assert (await _types(worker_owner)).count("FIRST_AWARD_WON") == 1

    await awarded_with_first_notes(True, other_worker)
    await core.bus.drain()
    assert await _types(requester_owner) == sorted(["BOUNTY_SUBMISSIONS_READY", "BOUNTY_AWARDED"] * 2)
    assert (await _types(worker_owner)).count("BOUNTY_AWARD_WON") == 2
    assert (await _types(worker_owner)).count("FIRST_AWARD_WON") == 1


async def test_whether_an_award_is_the_owners_first_reads_their_awarded_jobs_alone(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """The first-award question looks at the owner's awarded jobs (a partial index), not at every job the
    owner ever drafted: an owner with many drafts pays for it once per award, not once per draft. The
    planner is asked to use an index; the one it names must be the awarded jobs'."""
    owner = await new_owner(app, core)
    requester = await new_agent(owner)
    awarded = await create_published(requester, client)
    check = select(service._given_before(literal(owner.user_id), [literal(awarded["id"])]))
    async with core.uow(write=False) as uow:
        session = uow.session
        sqlite = dialect_of(session) == "sqlite"
        if not sqlite:
            await session.execute(text("SET LOCAL enable_seqscan = off"))
        compiled = check.compile(dialect=session.bind.dialect, compile_kwargs={"literal_binds": True})
        plan = "\n".join(
            str(row[-1])
            for row in await session.execute(
                text(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + str(compiled))
            )
        )
    assert "ix_jobs_owner_awarded" in plan, plan


async def _addresses(core: Core, owners: list[Owner]) -> dict[str, str]:
    """Each owner's email address, by user id."""
    async with core.uow(write=False) as uow:
        users = await uow.session.scalars(select(User).where(User.id.in_([o.user_id for o in owners])))
        return {u.id: u.email for u in users}


async def test_outbox_email_is_delivered_in_the_transaction_that_raised_it(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """With the outbox mailer the award's emails are in the outbox, and SENT, when its answer arrives:
    nothing waits in the background."""
    from callboard_core.mail.models import OutboxMessage

    requester_owner, worker_owner = await new_owner(app, core), await new_owner(app, core)
    requester, worker = await new_agent(requester_owner), await new_agent(worker_owner)
    job = await create_published(requester, client, title="Count the apples")
    submission = await to_review(client, job["id"], requester, worker)
    await core.bus.drain()
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/award", json={"submissionId": submission}, headers=requester.h
    )
    assert r.status_code == 200, r.text
    emails = [row for row in await _rows(core, worker_owner.user_id) if row.channel == "EMAIL"]
    assert {(row.type, row.status, row.attempts) for row in emails} == {
        ("BOUNTY_AWARD_WON", "SENT", 1),
        ("FIRST_AWARD_WON", "SENT", 1),
    }
    async with core.uow(write=False) as uow:
        sent = (
            await uow.session.execute(
                select(OutboxMessage.subject, OutboxMessage.to_address).where(
                    OutboxMessage.kind == "notification:BOUNTY_AWARD_WON"
                )
            )
        ).all()
        address = await uow.session.scalar(select(User.email).where(User.id == worker_owner.user_id))
    assert [tuple(row) for row in sent] == [("Your agent won: Count the apples", address)]
    # Written SENT with its mail (no claim statement: MailInTransaction), so the worker's pass finds nothing.
    from callboard_core.owner_notifications import delivery

    assert await delivery.deliver_due(core, core.mailer, core.settings) == 0


async def test_notes_raised_at_commit_are_written_once_together_and_not_at_all_on_rollback(
    app: Any, core: Core
) -> None:
    from callboard_core.owner_notifications.service import Note, notify_at_commit

    owner = await new_owner(app, core)
    T = OwnerNotificationType

    def note(type_: OwnerNotificationType, key: str) -> Note:
        return Note(owner.user_id, type_, key, f"subject {key}", "body")

    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            await notify_at_commit(uow.session, [note(T.RECEIPT_READY, "doc_a")])
            raise RuntimeError("the transaction fails after raising a note")
    assert await _rows(core, owner.user_id) == []
    async with core.uow() as uow:
        await notify_at_commit(uow.session, [note(T.RECEIPT_READY, "doc_b"), note(T.INVOICE_READY, "doc_c")])
        await notify_at_commit(uow.session, [note(T.RECEIPT_READY, "doc_b")])  # the same event again: once
        pending = await uow.session.scalar(select(OwnerNotification.id).limit(1))
        assert pending is None  # written as the transaction's last work
    written = {(r.type, r.event_key, r.channel) for r in await _rows(core, owner.user_id)}
    assert written == {
        (str(t), key, channel)
        for t, key in ((T.RECEIPT_READY, "doc_b"), (T.INVOICE_READY, "doc_c"))
        for channel in ("IN_APP", "EMAIL")
    }


async def _choosing_owners(app: Any, core: Core) -> list[Any]:
    """Three owners: one with the defaults, one who turned RECEIPT_READY's email off, one its in-app note."""
    plain, no_email, no_in_app = [await new_owner(app, core) for _ in range(3)]
    for owner, choice in ((no_email, {"emailEnabled": False}), (no_in_app, {"inAppEnabled": False})):
        r = await owner.client.patch(
            "/me/notifications/preferences", json={"preferences": [{"type": "RECEIPT_READY", **choice}]}
        )
        assert r.status_code == 200, r.text
    return [plain, no_email, no_in_app]


def _chosen_channels(plain: Any, no_email: Any, no_in_app: Any) -> list[tuple[str, str, str]]:
    """The RECEIPT_READY rows `_choosing_owners`' choices allow: (owner, channel, status), in their order."""
    return [
        (plain.user_id, "IN_APP", "SENT"),
        (plain.user_id, "EMAIL", "SENT"),
        (no_email.user_id, "IN_APP", "SENT"),
        (no_in_app.user_id, "EMAIL", "SENT"),
    ]


@pytest.mark.parametrize("many", [False, True], ids=["one statement", "read then insert"])
async def test_notes_keep_to_each_owners_choices_whichever_way_they_are_written(
    app: Any, core: Core, many: bool
) -> None:
    """Up to TOGETHER_MAX rows go in one INSERT ... SELECT that leaves out, in the database, what the owners'
    choices and accounts rule out; more go by a read of the choices and one insert. Both write the same."""
    from callboard_core.mail.models import OutboxMessage
    from callboard_core.owner_notifications.service import TOGETHER_MAX, Note, notify_all

    plain, no_email, no_in_app = await _choosing_owners(app, core)
    notes = [
        Note(o.user_id, T.RECEIPT_READY, "doc_1", f"subject {i}", "body")
        for i, o in enumerate((plain, no_email, no_in_app))
    ]
    notes += [Note(None, T.RECEIPT_READY, "doc_1", "nobody's", "body")]  # an owner-less agent's
    # Accounts that do not exist write nothing; enough of them take the notes past one statement.
    notes += [
        Note(f"usr_gone{i}", T.RECEIPT_READY, "doc_1", "gone", "body")
        for i in range(TOGETHER_MAX if many else 1)
    ]
    assert (2 * (len(notes) - 1) > TOGETHER_MAX) is many
    async with core.uow() as uow:
        written = await notify_all(uow.session, notes)
        assert await notify_all(uow.session, notes) == []  # the same event again: nothing more
    rows = {r.id: r for o in (plain, no_email, no_in_app) for r in await _rows(core, o.user_id)}
    assert sorted(written) == sorted(rows)
    channels = [(rows[i].owner_id, rows[i].channel, rows[i].status) for i in written]
    # In the notes' order, in-app before email; outbox mail: sent with its row.
    assert channels == _chosen_channels(plain, no_email, no_in_app)
    address = await _addresses(core, [plain, no_email, no_in_app])
    async with core.uow(write=False) as uow:
        mails = (await uow.session.scalars(select(OutboxMessage.to_address))).all()
    assert sorted(m for m in mails if m in address.values()) == sorted(
        [address[plain.user_id], address[no_in_app.user_id]]
    )


async def test_notes_at_commit_write_their_mails_by_each_owners_choices_once(
    app: Any, core: Core, caplog: pytest.LogCaptureFixture
) -> None:
    """A transaction's notes, written as its last work with their outbox mails: each owner's choices kept,
    an account that does not exist left out, the same event again writing nothing (no second mail), and the
    outbox's log line naming each mail's address. On PostgreSQL notes and mails go in one statement (the
    mails' addresses read by the notes' own RETURNING: `service._notes_and_mails`); on SQLite by
    `notify_all`, then the mails with the transaction's rows."""
    from callboard_core.mail.models import OutboxMessage
    from callboard_core.owner_notifications.service import Note, notify_at_commit

    plain, no_email, no_in_app = await _choosing_owners(app, core)
    key = f"doc_{plain.user_id}"
    notes = [
        Note(o.user_id, T.RECEIPT_READY, key, f"Receipt for {i}", f"body {i}")
        for i, o in enumerate((plain, no_email, no_in_app))
    ]
    notes += [
        Note(None, T.RECEIPT_READY, key, "nobody's", "body"),
        Note("usr_gone", T.RECEIPT_READY, key, "x", "y"),
    ]
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    engine = core.db.write_engine.sync_engine
    with caplog.at_level(logging.INFO, "callboard.mail"):
        for _ in range(2):  # the same event twice: written once
            event.listen(engine, "before_cursor_execute", record)
            try:
                async with core.uow() as uow:
                    await notify_at_commit(uow.session, notes)
            finally:
                event.remove(engine, "before_cursor_execute", record)
    rows = [r for o in (plain, no_email, no_in_app) for r in await _rows(core, o.user_id)]
    assert sorted((r.owner_id, r.channel, r.status) for r in rows) == sorted(
        _chosen_channels(plain, no_email, no_in_app)
    )
    address = await _addresses(core, [plain, no_email, no_in_app])
    async with core.uow(write=False) as uow:
        mails = (
            await uow.session.execute(
                select(
                    OutboxMessage.to_address, OutboxMessage.subject, OutboxMessage.kind, OutboxMessage.status
                ).where(OutboxMessage.to_address.in_(list(address.values())))
            )
        ).all()
    assert sorted(tuple(m) for m in mails) == sorted(
        [
            (address[plain.user_id], "Receipt for 0", "notification:RECEIPT_READY", core.mailer.DELIVERED),
            (
                address[no_in_app.user_id],
                "Receipt for 2",
                "notification:RECEIPT_READY",
                core.mailer.DELIVERED,
            ),
        ]
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "callboard.mail"]
    assert sorted(re.match(r"mail \S+ to (\S+):", line)[1] for line in logged) == sorted(  # type: ignore[index]
        [address[plain.user_id], address[no_in_app.user_id]]
    )
    if not core.db.is_sqlite:
        together = [s for s in sent if "INSERT INTO owner_notifications" in s]
        assert len(together) == 2 and all("INSERT INTO mail_outbox" in s for s in together), together


async def test_notes_of_a_transaction_whose_posting_is_refused_at_commit_are_neither_written_nor_logged(
    app: Any, core: Core, caplog: pytest.LogCaptureFixture
) -> None:
    """A reserve posted at commit, a note and a gathered row in one transaction: on PostgreSQL the posting and
    the notes with their mails ride in the commit's one statement. The balance refuses the posting there: the
    commit fails with its 409, and no note, no mail and no outbox log line of it remain (SQLite refuses the
    posting at once, before any note is written)."""
    from callboard_core.errors import Conflict
    from callboard_core.ids import new_id
    from callboard_core.ledger import accounts
    from callboard_core.ledger import service as ledger
    from callboard_core.ledger.models import AccountKind, TransactionKind
    from callboard_core.mail.models import OutboxMessage
    from callboard_core.owner_notifications.service import Note, notify_at_commit

    owner = await new_owner(app, core)
    async with core.uow() as uow:
        await ledger.top_up(uow.session, user_id=owner.user_id, amount_cents=500, processor_ref=new_id("cs"))
    marker = new_id("sub")
    with caplog.at_level(logging.INFO, "callboard.mail"), pytest.raises(Conflict) as refused:
        async with core.uow() as uow:
            await notify_at_commit(
                uow.session, [Note(owner.user_id, T.RECEIPT_READY, marker, marker, "body")]
            )
            await insert_at_commit(
                uow.session,
                [OutboxMessage(kind="test", to_address="x@example.test", subject=marker, body_text="")],
            )
            available, reserved = await accounts.several(
                uow.session,
                (AccountKind.OWNER_AVAILABLE, owner.user_id),
                (AccountKind.OWNER_RESERVED, owner.user_id),
            )
            await ledger.post(
                uow.session,
                key=f"reserve:{new_id('job')}",
                kind=TransactionKind.RESERVE,
                entries=[(available, -600), (reserved, 600)],
                savepoint=False,
                at_commit=True,
            )
    assert refused.value.code == "insufficient_funds"
    assert [r for r in await _rows(core, owner.user_id) if r.event_key == marker] == []
    async with core.uow(write=False) as uow:
        assert (
            await uow.session.scalars(select(OutboxMessage.id).where(OutboxMessage.subject == marker))
        ).all() == []
    assert not [r for r in caplog.records if r.name == "callboard.mail" and marker in r.getMessage()]


async def test_a_close_without_award_tells_every_owner_once_by_their_own_channels(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    """One event, several owners (written together): each gets one notice, on the channels they chose."""
    requester_owner = await new_owner(app, core)
    quiet, plain = await new_owner(app, core), await new_owner(app, core)
    requester = await new_agent(requester_owner)
    workers = [await new_agent(quiet), await new_agent(plain), await new_agent(plain)]  # plain: two workers
    r = await quiet.client.patch(
        "/me/notifications/preferences",
        json={"preferences": [{"type": "BOUNTY_NO_AWARD", "emailEnabled": False}]},
    )
    assert r.status_code == 200, r.text
    job = await create_published(requester, client, participantCap=3)
    await all_submit(client, job["id"], requester, workers)
    r = await client.post(
        f"/api/v2/jobs/{job['id']}/no-award", json={"reasonCode": "OTHER"}, headers=requester.h
    )
    assert r.status_code == 200, r.text
    await core.bus.drain()

    def no_award(rows: list[OwnerNotification]) -> list[tuple[str, str]]:
        return sorted((r.channel, r.subject) for r in rows if r.type == "BOUNTY_NO_AWARD")

    title = job["title"]
    assert no_award(await _rows(core, requester_owner.user_id)) == [
        ("EMAIL", f"Closed without an award: {title}"),
        ("IN_APP", f"Closed without an award: {title}"),
    ]
    assert no_award(await _rows(core, quiet.user_id)) == [("IN_APP", f"No award: {title}")]
    assert no_award(await _rows(core, plain.user_id)) == [
        ("EMAIL", f"No award: {title}"),
        ("IN_APP", f"No award: {title}"),
    ]


async def test_paid_publishing_documents_and_no_award(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=0)
    job_id = await draft(client, b, 1000)
    for _ in range(2):  # refused twice for the same reasons: one notification
        r = await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)
        assert r.status_code == 409
    await fund(core, b.owner.user_id, 5000)  # a top-up: its receipt
    assert await _types(b.owner) == ["BOUNTY_PAYMENT_ACTION_REQUIRED", "RECEIPT_READY"]
    receipt = next(n for n in await _log(b.owner) if n["type"] == "RECEIPT_READY")
    assert receipt["actionUrl"].endswith(f"/billing/documents/{receipt['metadata']['documentId']}")
    assert (await client.post(f"/api/v2/jobs/{job_id}/payment/retry", headers=b.agent.h)).status_code == 200
    # Nobody applies; admission closes the job without an award: the escrow comes back with a credit note.
    assert (await client.post(f"/api/v2/jobs/{job_id}/admission/run", headers=b.agent.h)).status_code == 200
    types = await _types(b.owner)
    assert "BOUNTY_NO_AWARD" in types and "CREDIT_NOTE_READY" in types


async def test_a_declined_auto_topup_is_a_payment_failure(
    app: Any, core: Core, client: httpx.AsyncClient
) -> None:
    b = await buyer(app, core, funds=0)
    await save_card(core, b.owner, card="4000000000000341")  # saves, then declines every charge
    job_id = await draft(client, b, 1000)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 409
    failed = [n for n in await _log(b.owner) if n["type"] == "BOUNTY_PAYMENT_FAILED"]
    assert len(failed) == 1 and "declined" in failed[0]["body"]


async def test_a_failed_payout_and_disputes(app: Any, core: Core, client: httpx.AsyncClient) -> None:
    requester, worker_owner = await new_owner(app, core), await new_owner(app, core)
    worker = await new_agent(worker_owner)
    await onboard_owner(worker_owner, core)
    await award(core, requester.user_id, worker_owner.user_id, worker.id, pay=1_000)
    from callboard_core.worker import run_once

    await run_once(core, housekeeping=False)
    (paid,) = await payout_rows(core, worker_owner.user_id)
    await sandbox(core).reverse_transfer(paid.processor_transfer_id or "")
    await deliver(core)
    assert "BOUNTY_PAYOUT_FAILED" in await _types(worker_owner)

    # Disputes have no routes yet: their entry points raise the notifications (the disputes issue calls them).
    requester_agent = await new_agent(requester)
    published = await create_published(requester_agent, client, title="Disputed")
    async with core.uow() as uow:
        job = await uow.session.get(Job, published["id"])
        assert job is not None
        await triggers.dispute_opened(uow.session, "dsp_1", job, [requester.user_id, worker_owner.user_id])
        await triggers.dispute_resolved(uow.session, "dsp_1", job, [requester.user_id], "upheld")
        await triggers.dispute_opened(uow.session, "dsp_1", job, [requester.user_id])  # again: nothing new
    # The award's capture issued the requester's owner an invoice (the fee) and a receipt (the payment).
    assert {"INVOICE_READY", "RECEIPT_READY"} <= set(await _types(requester))
    disputes = [t for t in await _types(requester) if "DISPUTE" in t]
    assert disputes == ["BOUNTY_DISPUTE_OPENED", "BOUNTY_DISPUTE_RESOLVED"]
    assert "BOUNTY_DISPUTE_OPENED" in await _types(worker_owner)


async def test_routes_preferences_and_isolation(app: Any, core: Core, client: httpx.AsyncClient) -> None:
    owner, other = await new_owner(app, core), await new_owner(app, core)
    agent = await new_agent(owner)
    prefs = (await owner.client.get("/me/notifications/preferences")).json()["preferences"]
    assert [p["type"] for p in prefs] == [str(t) for t in T] and all(
        p["emailEnabled"] and p["inAppEnabled"] for p in prefs
    )
    bad = await owner.client.patch("/me/notifications/preferences", json={"preferences": [{"type": "NOPE"}]})
    assert bad.status_code == 422 and bad.json()["errors"][0]["code"] == "unknown_type"
    r = await owner.client.patch(
        "/me/notifications/preferences",
        json={
            "preferences": [
                {"type": "RECEIPT_READY", "emailEnabled": False},
                {"type": "INVOICE_READY", "inAppEnabled": False},
            ]
        },
    )
    assert r.status_code == 200
    changed = {p["type"]: p for p in r.json()["preferences"]}
    assert changed["RECEIPT_READY"] == {"type": "RECEIPT_READY", "emailEnabled": False, "inAppEnabled": True}
    await fund(core, owner.user_id, 2000)
    rows = await _rows(core, owner.user_id)
    assert [(r.type, r.channel) for r in rows] == [("RECEIPT_READY", "IN_APP")]  # no email: switched off
    [entry] = await _log(owner)
    by_key = await client.get("/me/notifications/api-key", headers=agent.h)
    assert by_key.status_code == 200 and [n["id"] for n in by_key.json()["notifications"]] == [entry["id"]]
    assert (await other.client.patch(f"/me/notifications/{entry['id']}/read")).status_code == 404
    read = await owner.client.patch(f"/me/notifications/{entry['id']}/read")
    assert read.status_code == 200 and read.json()["readAt"]
    again = await owner.client.patch(f"/me/notifications/{entry['id']}/read")
    assert again.json()["readAt"] == read.json()["readAt"]
    assert await _log(other) == []
    unclaimed = (
        await client.post(
            "/api/v2/agents/register",
            json={"name": "U", "endpointUrl": "https://u.example.com", "capabilities": []},
        )
    ).json()
    refused = await client.get("/me/notifications/api-key", headers={"X-API-Key": unclaimed["apiKey"]})
    assert refused.status_code == 403 and refused.json()["code"] == "agent_not_claimed"


async def test_weekly_digest_once_a_week_and_only_with_news(app: Any, core: Core) -> None:
    busy, quiet = await new_owner(app, core), await new_owner(app, core)
    await fund(core, busy.user_id, 1000)
    async with core.uow() as uow:
        assert await triggers.weekly_digests(uow.session) == 1
    async with core.uow() as uow:
        assert await triggers.weekly_digests(uow.session) == 0  # this week's is written
    digest = next(n for n in await _log(busy) if n["type"] == "WEEKLY_DIGEST")
    assert "receipt ready: 1" in digest["body"]
    assert await _log(quiet) == []


# --- email over SMTP ---------------------------------------------------------------------------------------


@pytest.fixture
async def smtp_core(core: Core, tmp_root: Path, smtp_server: tuple[Collector, int]) -> AsyncIterator[Core]:
    settings = make_settings(
        core.settings.database_url,
        tmp_root,
        mail_backend="smtp",
        smtp_host="127.0.0.1",
        smtp_port=smtp_server[1],
    )
    smtp = Core.build(settings)
    try:
        yield smtp
    finally:
        await smtp.bus.drain()
        await smtp.mailer.drain()
        await smtp.db.dispose()


async def test_email_arrives_as_text_and_html_and_its_link_unsubscribes(
    app: Any, core: Core, smtp_core: Core, smtp_server: tuple[Collector, int]
) -> None:
    collector, _ = smtp_server
    owner = await new_owner(app, core)
    await fund(smtp_core, owner.user_id, 2500)  # raised on the SMTP core: delivered right after the commit
    await smtp_core.bus.drain()
    [envelope] = collector.envelopes
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert "Your receipt" in message["Subject"]
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    page = message.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "25.00 USD" in text and "<p>" in page and "/billing/documents/" in page
    link = re.search(r"(http://\S+/notifications/unsubscribe/\S+)", text)
    assert link, text
    path = link.group(1).removeprefix(BASE_URL)
    [row] = [r for r in await _rows(core, owner.user_id) if r.channel == "EMAIL"]
    assert row.status == "SENT" and row.sent_at is not None and row.attempts == 1
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(core=smtp_core)), base_url=BASE_URL
    ) as page_client:
        shown = await page_client.get(path)
        assert shown.status_code == 200 and "receipt ready" in shown.text  # a GET only asks
        assert (await owner.client.get("/me/notifications/preferences")).json()["preferences"][11][
            "emailEnabled"
        ]
        done = await page_client.post(path, headers=ORIGIN)
        assert done.status_code == 200 and "no longer get email" in done.text
        forged = await page_client.post(path[:-3] + "xyz", headers=ORIGIN)
        assert forged.status_code == 404
    prefs = {
        p["type"]: p for p in (await owner.client.get("/me/notifications/preferences")).json()["preferences"]
    }
    assert prefs["RECEIPT_READY"] == {"type": "RECEIPT_READY", "emailEnabled": False, "inAppEnabled": True}
    # Delivering again sends nothing: the row is SENT.
    assert await delivery.deliver(smtp_core, smtp_core.mailer, smtp_core.settings, row.id) is None
    assert len(collector.envelopes) == 1


def _mail_failures() -> float:
    return metrics.REGISTRY.get_sample_value("callboard_delivery_failures_total", {"channel": "mail"}) or 0.0


async def test_a_failed_delivery_is_retried_with_back_off_then_sent_once(
    app: Any, core: Core, tmp_root: Path, frozen_clock: clock.FrozenClock
) -> None:
    port = free_port()  # nothing listens here yet
    settings = make_settings(
        core.settings.database_url, tmp_root, mail_backend="smtp", smtp_host="127.0.0.1", smtp_port=port
    )
    down = Core.build(settings)
    collector = Collector()
    try:
        owner = await new_owner(app, core)
        await down.bus.drain()
        before = _mail_failures()
        await fund(down, owner.user_id, 1000)
        await down.bus.drain()
        [row] = [r for r in await _rows(core, owner.user_id) if r.channel == "EMAIL"]
        assert row.status == "FAILED" and row.error and row.attempts == 1
        assert _mail_failures() - before == 1  # /metrics counts the failed delivery
        assert row.next_attempt_at == clock.now() + delivery.RETRY_BASE
        # Not due yet: the worker's pass leaves it.
        assert await delivery.deliver_due(down, down.mailer, down.settings) == 0
        controller = Controller(collector, hostname="127.0.0.1", port=port)
        controller.start()
        try:
            frozen_clock.advance(seconds=delivery.RETRY_BASE.total_seconds() + 1)
            assert await delivery.deliver_due(down, down.mailer, down.settings) == 1
            assert await delivery.deliver_due(down, down.mailer, down.settings) == 0
        finally:
            controller.stop()
        [row] = [r for r in await _rows(core, owner.user_id) if r.channel == "EMAIL"]
        assert row.status == "SENT" and row.attempts == 2 and row.error is None
        assert len(collector.envelopes) == 1
        assert MAX_ATTEMPTS > 2
    finally:
        await down.bus.drain()
        await down.db.dispose()


async def test_the_job_notifications_arrive_over_smtp_to_the_right_owner(
    app: Any, core: Core, smtp_core: Core, smtp_server: tuple[Collector, int]
) -> None:
    collector, _ = smtp_server
    requester_owner, worker_owner = await new_owner(app, core), await new_owner(app, core)
    requester, worker = await new_agent(requester_owner), await new_agent(worker_owner)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(core=smtp_core)), base_url=BASE_URL
    ) as c:
        job = await create_published(requester, c, title="Mailed job")
        submission = await to_review(c, job["id"], requester, worker)
        r = await c.post(
            f"/api/v2/jobs/{job['id']}/award", json={"submissionId": submission}, headers=requester.h
        )
        assert r.status_code == 200, r.text
    await smtp_core.bus.drain()
    async with core.uow(write=False) as uow:
        emails = {
            u.id: u.email
            for u in (
                await uow.session.scalars(
                    select(User).where(User.id.in_([requester_owner.user_id, worker_owner.user_id]))
                )
            ).all()
        }
    received = {
        (
            envelope.rcpt_tos[0],
            email.message_from_bytes(envelope.content, policy=email.policy.default)["Subject"],
        )
        for envelope in collector.envelopes
    }
    assert received == {
        (emails[requester_owner.user_id], "Submissions ready for review: Mailed job"),
        (emails[requester_owner.user_id], "You awarded Mailed job"),
        (emails[requester_owner.user_id], "Your first award on callboard"),
        (emails[worker_owner.user_id], "Your agent won: Mailed job"),
        (emails[worker_owner.user_id], "Your first win on callboard"),
    }
