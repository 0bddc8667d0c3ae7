"""Email delivery of owner notifications: after the commit that raised one, and again by the worker for what
failed (back-off) or was left behind (a process that stopped). Each attempt claims the row with a
compare-and-set (PENDING, or FAILED/SENDING whose retry time has come, to SENDING), so two deliverers never
send one notification; a crash between the hand-over and the SENT mark is the one case that can repeat a
mail, after SENDING_LEASE (SMTP gives no way to ask whether a message went)."""

from __future__ import annotations

import html
import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, metrics
from callboard_core.config import Settings
from callboard_core.db.uow import UnitsOfWork
from callboard_core.mail.service import DeliveryFailed, Mail, Mailer
from callboard_core.owner_notifications.models import OwnerNotification
from callboard_core.owner_notifications.service import unsubscribe_token
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


def _claimable(now: datetime, *, include_new: bool) -> list[ColumnElement[bool]]:
    retry = and_(
        OwnerNotification.status.in_([S.FAILED, S.SENDING]),
        OwnerNotification.next_attempt_at <= now,
        OwnerNotification.attempts < MAX_ATTEMPTS,
    )
    fresh = OwnerNotification.status == S.PENDING
    if not include_new:
        fresh = and_(fresh, OwnerNotification.created_at <= now - AFTER_COMMIT_GRACE)
    return [OwnerNotification.channel == Channel.EMAIL, or_(fresh, retry)]


def compose(row: OwnerNotification, to: str, settings: Settings) -> Mail:
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


async def _claim(session: AsyncSession, notification_id: str, now: datetime) -> OwnerNotification | None:
    statement = (
        update(OwnerNotification)
        .where(OwnerNotification.id == notification_id, *_claimable(now, include_new=True))
        .values(
            status=S.SENDING, attempts=OwnerNotification.attempts + 1, next_attempt_at=now + SENDING_LEASE
        )
        .returning(OwnerNotification)
        .execution_options(populate_existing=True)
    )
    return (await session.execute(statement)).scalar_one_or_none()


async def deliver(uows: UnitsOfWork, mailer: Mailer, settings: Settings, notification_id: str) -> str | None:
    """One attempt at one email notification; its status after, or None when it was not ours to send. The
    claim and the outcome commit in units of work of their own, around the mail server's answer."""
    now = clock.now()
    async with uows.uow() as claim:
        session = claim.session
        row = await _claim(session, notification_id, now)
        if row is None:
            return None
        user = await session.get(User, row.owner_id)
        attempts = row.attempts
        mail = compose(row, user.email, settings) if user is not None else None
    error = None
    if mail is None:
        error = "the owner has no account any more"
    else:
        try:
            await mailer.transmit(mail)
        except DeliveryFailed as exc:
            error = str(exc) or "the mail server refused the message"
        except Exception as exc:  # a bug or an unexpected failure must not leave the row SENDING for long
            log.exception("notification %s: delivery failed", notification_id)
            error = f"unexpected: {exc!r}"[:1000]
    done = clock.now()
    if error is not None:
        metrics.DELIVERY_FAILURES.labels(channel="mail").inc()
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
    async with uows.uow() as outcome:
        await outcome.session.execute(
            update(OwnerNotification)
            .where(
                OwnerNotification.id == notification_id,
                OwnerNotification.status == S.SENDING,
                OwnerNotification.attempts == attempts,
            )
            .values(**values)
        )
    return str(values["status"])


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
    sent = 0
    for notification_id in due:
        if await deliver(uows, mailer, settings, notification_id) is not None:
            sent += 1
    return sent
