"""Email delivery of owner notifications: after the commit that raised one (with an outbox mailer, whose mail
is a row of this database, inside that transaction as its last work), and again by the worker for what
failed (back-off) or was left behind (a process that stopped). Each attempt claims the row with a
compare-and-set (PENDING, or FAILED/SENDING whose retry time has come, to SENDING), so two deliverers never
send one notification; a crash between the hand-over and the SENT mark is the one case that can repeat a
mail, after SENDING_LEASE (SMTP gives no way to ask whether a message went). The outbox's claim moves the
row straight to SENT, in the transaction that writes the mail: nothing can come between them."""

from __future__ import annotations

import functools
import html
import logging
from collections.abc import Callable, Coroutine, Iterator, Mapping
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, bindparam, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, metrics
from callboard_core.config import Settings
from callboard_core.db.uow import UnitsOfWork, after_commit, before_commit
from callboard_core.mail.service import Mail, Mailer
from callboard_core.owner_notifications.models import OwnerNotification
from callboard_core.owner_notifications.service import (
    EmailNotificationQueued,
    MailInTransaction,
    MailsWithNotes,
    NotesCarryMails,
    unsubscribe_token,
)
from callboard_core.owner_notifications.states import (
    MAX_ATTEMPTS,
    RETRY_BASE,
    SENDING_LEASE,
    Channel,
    DeliveryStatus,
)
from callboard_core.users.models import User

log = logging.getLogger("callboard.notifications")
S = DeliveryStatus
AFTER_COMMIT_GRACE = timedelta(
    seconds=30
)  # the worker leaves a new row this long to its after-commit delivery


def _claimable(now: Any, *, include_new: bool, on: Any = OwnerNotification) -> list[ColumnElement[bool]]:
    """Which email notifications are due: `on` the mapped class, or the table's columns (a Core statement)."""
    retry = and_(
        on.status.in_([S.FAILED, S.SENDING]),
        on.next_attempt_at <= now,
        on.attempts < MAX_ATTEMPTS,
    )
    fresh = on.status == S.PENDING
    if not include_new:
        fresh = and_(fresh, on.created_at <= now - AFTER_COMMIT_GRACE)
    return [on.channel == Channel.EMAIL, or_(fresh, retry)]


def compose(row: Any, to: str, settings: Settings) -> Mail:
    """Plain text and simple HTML, with the action URL and a link that turns this type's email off."""
    base = settings.base_url.rstrip("/")
    action = base + row.action_url if row.action_url else None
    stop = (
        f"{base}/notifications/unsubscribe/{unsubscribe_token(settings.secret_key, row.owner_id, row.type)}"
    )
    kind = row.type.replace("_", " ").lower()
    text = (
        row.body + (f"\n\nOpen: {action}" if action else "") + f"\n\nStop emails like this ({kind}): {stop}\n"
    )
    body_html = "".join(f"<p>{html.escape(p)}</p>" for p in row.body.split("\n\n"))
    link = f'<p><a href="{html.escape(action)}">Open in callboard</a></p>' if action else ""
    page = (
        f"<!doctype html><html><body>{body_html}{link}"
        f'<p style="color:#666;font-size:small"><a href="{html.escape(stop)}">Stop emails like this '
        f"({html.escape(kind)})</a></p></body></html>"
    )
    return Mail(kind=f"notification:{row.type}", to=to, subject=row.subject, body=text, html=page)


async def _claim(
    session: AsyncSession, notification_ids: list[str], now: datetime, **values: Any
) -> list[Any]:
    """The claimable rows among these, moved by one compare-and-set: an attempt counted, and `values`
    (default: SENDING under a lease until the answer is recorded)."""
    values = values or {"status": S.SENDING, "next_attempt_at": now + SENDING_LEASE}
    params = {"p_ids": list(notification_ids), "p_now": now, **{f"v_{k}": v for k, v in values.items()}}
    return list(await session.execute(_claim_statement(tuple(values)), params))


@functools.cache
def _claim_statement(names: tuple[str, ...]) -> Any:
    """The claim setting `names` (bound as `v_<name>`; the ids `p_ids`, the time `p_now`), built once: every
    email notification's delivery runs it. The table's own UPDATE returning what a delivery reads (rows,
    not mapped objects): nothing loads them into the session, and nothing there holds them (the rows are
    written by Core inserts, `notify_all`)."""
    c = _TABLE.c
    return (
        update(_TABLE)
        .where(
            c.id.in_(bindparam("p_ids", expanding=True)),
            *_claimable(bindparam("p_now"), include_new=True, on=c),
        )
        .values(attempts=c.attempts + 1, **{name: bindparam(f"v_{name}") for name in names})
        .returning(c.id, c.owner_id, c.type, c.subject, c.body, c.action_url, c.attempts)
    )


_TABLE = cast(Table, OwnerNotification.__table__)


async def deliver(uows: UnitsOfWork, mailer: Mailer, settings: Settings, notification_id: str) -> str | None:
    """One attempt at one email notification; its status after, or None when it was not ours to send."""
    return (await deliver_many(uows, mailer, settings, [notification_id])).get(notification_id)


Claimed = list[tuple[str, int, bool]]  # (notification id, attempts after the claim, its owner has an account)


async def deliver_many(
    uows: UnitsOfWork, mailer: Mailer, settings: Settings, notification_ids: list[str]
) -> dict[str, str]:
    """One attempt at each of these email notifications: {id: status after} for those that were ours to
    send (the others are absent). The claim and the outcomes commit in one unit of work each, around the
    mail server's answers: three transactions for a commit's notifications, not three per email. A mailer
    whose delivery is a row in this database (the outbox) is answered inside the claim's own unit of work:
    one transaction."""
    if not notification_ids:
        return {}
    async with uows.uow() as claim:
        if mailer.in_database:
            return await deliver_in(claim.session, mailer, settings, notification_ids)
        claimed, mails = await _claim_and_compose(claim.session, notification_ids, settings)
    if not claimed:
        return {}
    try:
        answers = iter(await mailer.transmit_all(mails))
    except Exception as exc:  # a bug or an unexpected failure must not leave the rows SENDING for long
        log.exception("notifications %s: delivery failed", [c[0] for c in claimed])
        answers = iter([f"unexpected: {exc!r}"[:1000]] * len(mails))
    async with uows.uow() as outcome:
        return await _record_outcomes(outcome.session, claimed, answers)


async def deliver_in(
    session: AsyncSession,
    mailer: Mailer,
    settings: Settings,
    notification_ids: list[str],
    addresses: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """For a mailer `in_database` (the outbox), whose delivery is a row of this database: one attempt at
    each of these email notifications inside the caller's transaction, so the notification, its mail and
    its outcome commit (or roll back) together. The claim is the outcome (a compare-and-set from a claimable
    state straight to SENT: no SENDING lease is needed where the mail commits with it). {id: status after},
    as `deliver_many`. `addresses` (notification id -> address), when the caller read them in this
    transaction, spare reading them again."""
    now = clock.now()
    rows = await _claim(
        session, notification_ids, now, status=S.SENT, sent_at=now, next_attempt_at=None, error=None
    )
    if not rows:
        return {}
    known = addresses or {}
    if all(row.id in known for row in rows):
        emails = {row.owner_id: known[row.id] for row in rows}
    else:
        emails = await _addresses(session, rows)
    await mailer.record_delivered(
        session, [compose(r, emails[r.owner_id], settings) for r in rows if r.owner_id in emails]
    )
    statuses = {row.id: str(S.SENT) for row in rows}
    orphans = [(row.id, row.attempts, False) for row in rows if row.owner_id not in emails]
    if orphans:  # an owner whose account went: nobody to send to
        statuses.update(await _record_outcomes(session, orphans, iter(()), claimed_as=S.SENT))
    return statuses


async def _addresses(session: AsyncSession, rows: list[Any]) -> dict[str, str]:
    owners = select(User.id, User.email).where(User.id.in_({row.owner_id for row in rows}))
    return {user_id: email for user_id, email in (await session.execute(owners)).all()}


async def _claim_and_compose(
    session: AsyncSession, notification_ids: list[str], settings: Settings
) -> tuple[Claimed, list[Mail]]:
    rows = await _claim(session, notification_ids, clock.now())
    if not rows:
        return [], []
    emails = await _addresses(session, rows)
    claimed = [(row.id, row.attempts, row.owner_id in emails) for row in rows]
    mails = [compose(row, emails[row.owner_id], settings) for row in rows if row.owner_id in emails]
    return claimed, mails


async def _record_outcomes(
    session: AsyncSession, claimed: Claimed, answers: Iterator[str | None], *, claimed_as: str = S.SENDING
) -> dict[str, str]:
    """Each claimed row SENT or FAILED (with its retry time) by the mail's answer, in claim order."""
    errors = {
        notification_id: next(answers) if has_owner else "the owner has no account any more"
        for notification_id, _, has_owner in claimed
    }
    done = clock.now()
    failures = sum(error is not None for error in errors.values())
    if failures:
        metrics.DELIVERY_FAILURES.labels(channel="mail").inc(failures)
    # One UPDATE per outcome (usually one: all sent); each still compares-and-sets its rows' claim.
    groups: dict[tuple[str | None, int], list[str]] = {}
    for notification_id, attempts, _ in claimed:
        groups.setdefault((errors[notification_id], attempts), []).append(notification_id)
    statuses: dict[str, str] = {}
    for (error, attempts), ids in groups.items():
        if error is None:
            values: dict[str, object] = {
                "status": S.SENT,
                "sent_at": done,
                "error": None,
                "next_attempt_at": None,
            }
        else:
            retry = done + RETRY_BASE * 2 ** (attempts - 1) if attempts < MAX_ATTEMPTS else None
            values = {"status": S.FAILED, "error": error[:1000], "next_attempt_at": retry}
        await session.execute(
            update(OwnerNotification)
            .where(
                OwnerNotification.id.in_(ids),
                OwnerNotification.status == claimed_as,
                OwnerNotification.attempts == attempts,
            )
            .values(**values)
        )
        statuses.update(dict.fromkeys(ids, str(values["status"])))
    return statuses


class Batch:
    """Email notifications queued by commits, delivered together: with a mail server, in the background
    once the commit is done (the after-commit hooks of one commit, an award raises several, add their ids
    one after another, and the one delivery they start takes them all: `deliver_many`), so the answer
    never waits for a mail server; with the outbox, in the raising transaction (`queue`). The worker
    retries what fails."""

    def __init__(
        self,
        uows: UnitsOfWork,
        mailer: Mailer,
        settings: Settings,
        spawn: Callable[[Coroutine[Any, Any, object]], None],
    ) -> None:
        self.uows, self.mailer, self.settings, self.spawn = uows, mailer, settings, spawn
        self._ids: list[str] = []
        self._carried = MailsWithNotes(table=mailer.outbox, row=self._mail_row, logged=mailer.logged)

    async def queue(self, session: AsyncSession, event: EmailNotificationQueued) -> None:
        """In the transaction that wrote the row. A mailer whose delivery is a row of this database (the
        outbox) delivers once, as the transaction's last work, every email it raised (`deliver_in`): no
        second transaction, nothing left for the background. Any other mailer sends after the commit
        (`add`), so the answer never waits for a mail server."""
        if not self.mailer.in_database:
            after_commit(session, lambda: self.add(event))
            return
        delivery = before_commit(
            session, "owner-notification-email", _OutboxBatch(self.mailer, self.settings)
        )
        if event.sent is not None:  # written SENT (MailInTransaction), with the address it read
            assert event.to is not None, "a row written SENT comes with its owner's address"
            delivery.sent.append(compose(SimpleNamespace(**event.sent), event.to, self.settings))
            return
        delivery.ids.append(event.notification_id)
        if event.to is not None:
            delivery.addresses[event.notification_id] = event.to

    async def in_transaction(self, _session: AsyncSession, _question: MailInTransaction) -> bool:
        """`MailInTransaction`'s answer: this mailer's."""
        return self.mailer.in_database

    async def carry_mails(self, _session: AsyncSession, _question: NotesCarryMails) -> MailsWithNotes | None:
        """`NotesCarryMails`' answer: with an outbox mailer, each email row's mail as its outbox row."""
        return self._carried if self.mailer.in_database else None

    def _mail_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        # The address is the statement's to read: the mail's text does not name it.
        return self.mailer.delivered_row(
            compose(SimpleNamespace(**row), "", self.settings), row["created_at"]
        )

    async def add(self, event: EmailNotificationQueued) -> None:
        self._ids.append(event.notification_id)
        if len(self._ids) == 1:  # the first since the last delivery took its ids
            self.spawn(self._deliver())

    async def _deliver(self) -> None:
        ids, self._ids = self._ids, []
        await deliver_many(self.uows, self.mailer, self.settings, ids)


class _OutboxBatch:
    """The emails one transaction raised, delivered together as its last work (an outbox mailer)."""

    def __init__(self, mailer: Mailer, settings: Settings) -> None:
        self.mailer, self.settings = mailer, settings
        self.ids: list[str] = []
        self.addresses: dict[str, str] = {}  # notification id -> the address its transaction read
        self.sent: list[Mail] = []  # the mails of rows written SENT: nothing to claim

    async def __call__(self, session: AsyncSession) -> None:
        if self.sent:
            await self.mailer.record_delivered(session, self.sent)
        if self.ids:
            await deliver_in(session, self.mailer, self.settings, self.ids, self.addresses)


async def deliver_due(uows: UnitsOfWork, mailer: Mailer, settings: Settings, limit: int = 100) -> int:
    """The worker's pass: every email notification whose (first or next) attempt is due."""
    now = clock.now()
    async with uows.uow(write=False) as read:
        due = (
            await read.session.scalars(
                select(OwnerNotification.id)
                .where(*_claimable(now, include_new=False))
                .order_by(OwnerNotification.created_at)
                .limit(limit)
            )
        ).all()
    return len(await deliver_many(uows, mailer, settings, list(due)))
