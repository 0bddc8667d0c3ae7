"""The Mailer port. Every message is written to the outbox in the caller's transaction; the backend
decides what happens after commit: log it (default), or deliver it over SMTP."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import Any, cast

import aiosmtplib
from sqlalchemy import Table, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.config import Settings
from callboard_core.db import Database
from callboard_core.db.rows import default_value, insert_dicts_at_commit
from callboard_core.db.uow import after_commit
from callboard_core.mail.models import OutboxMessage

log = logging.getLogger("callboard.mail")


@dataclass(frozen=True)
class Mail:
    kind: str
    to: str
    subject: str
    body: str
    html: str | None = None  # an HTML alternative to the plain-text body


class DeliveryFailed(Exception):
    """transmit could not hand the mail over (the caller records it and retries)."""


class Mailer:
    """Outbox mailer: the database row and a log line are the delivery."""

    DELIVERED = "LOGGED"  # an outbox row's status once the backend has done its delivery
    in_database = True  # delivering is writing the outbox row: a caller's transaction can do it (below)

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self._pending: set[asyncio.Task[None]] = set()

    async def send(self, session: AsyncSession, mail: Mail) -> OutboxMessage:
        message = OutboxMessage(kind=mail.kind, to_address=mail.to, subject=mail.subject, body_text=mail.body)
        session.add(message)
        await session.flush()
        message_id = message.id
        after_commit(session, lambda: self._schedule(message_id, mail))
        return message

    async def _schedule(self, message_id: str, mail: Mail) -> None:
        # Delivery runs after the response: a slow mail server must not slow requests, and the
        # time a request takes must not tell whether a mail was sent (account enumeration).
        task = asyncio.create_task(self._deliver(message_id, mail))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait for deliveries under way (shutdown, tests)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def _deliver(self, message_id: str, mail: Mail) -> None:
        log.info("mail %s to %s: %s\n%s", mail.kind, mail.to, mail.subject, mail.body)
        await self._mark(message_id, "LOGGED", None)

    async def transmit_all(self, mails: list[Mail]) -> list[str | None]:
        """Hand these mails over now, outside any transaction, for a caller that keeps its own delivery state
        and retries (owner notifications): each one's error, None where it went. The outbox backend logs
        them and keeps their rows (one transaction for all)."""
        async with self.db.session(write=True) as session, session.begin():
            await self.record_delivered(session, mails)
        return [None] * len(mails)

    async def record_delivered(self, session: AsyncSession, mails: list[Mail]) -> None:
        """For a mailer `in_database`: the delivery of these mails, in the caller's transaction (a caller
        that keeps its own delivery state commits both together)."""
        now = clock.now()
        for mail in mails:
            _log_delivered(mail.kind, mail.to, mail.subject, mail.body)
        await insert_dicts_at_commit(
            session, _OUTBOX, [_outbox_values(mail, self.DELIVERED, None, now) for mail in mails]
        )

    def delivered_row(self, mail: Mail, now: datetime) -> dict[str, Any]:
        """For a mailer `in_database`: the outbox row of a mail another module's statement writes in the
        caller's transaction (owner notifications' own, which reads the address: `to` is left out), every
        other column named, its id new. `logged` tells the log once it is written."""
        values = _outbox_values(mail, self.DELIVERED, None, now)
        del values["to_address"]
        values.update(id=default_value(_OUTBOX.c.id.default), created_at=now)
        return values

    @property
    def outbox(self) -> Table:
        return _OUTBOX

    def logged(self, row: Mapping[str, Any], to: str) -> None:
        """The log line of a mail delivered as an outbox row (`delivered_row`), now its address is known."""
        _log_delivered(row["kind"], to, row["subject"], row["body_text"])

    async def _record(self, outcomes: list[tuple[Mail, str | None]]) -> None:
        """Outbox rows for mails handed over (error None) or refused, in one transaction."""
        if not outcomes:
            return
        now = clock.now()
        async with self.db.session(write=True) as session, session.begin():
            session.add_all(
                OutboxMessage(
                    **_outbox_values(mail, self.DELIVERED if error is None else "FAILED", error, now)
                )
                for mail, error in outcomes
            )

    async def _mark(self, message_id: str, status: str, error: str | None) -> None:
        async with self.db.session(write=True) as session, session.begin():
            await session.execute(
                update(OutboxMessage)
                .where(OutboxMessage.id == message_id)
                .values(status=status, error=error, sent_at=clock.now() if status != "FAILED" else None)
            )


_OUTBOX = cast(Table, OutboxMessage.__table__)


def _log_delivered(kind: str, to: str, subject: str, body: str) -> None:
    """The outbox's delivery: its log line (and the row)."""
    log.info("mail %s to %s: %s\n%s", kind, to, subject, body)


def _outbox_values(mail: Mail, status: str, error: str | None, now: datetime) -> dict[str, Any]:
    """An outbox row's column values (its id and time are filled in when it is gathered or added). Not a
    mapped object for the rows a notification's transaction writes: each is written once and never changed,
    and building the object cost more than its share of the INSERT (documents' rows do the same)."""
    return {
        "kind": mail.kind,
        "to_address": mail.to,
        "subject": mail.subject,
        "body_text": mail.body,
        "status": status,
        "error": error,
        "sent_at": now if status != "FAILED" else None,
    }


class SmtpMailer(Mailer):
    DELIVERED = "SENT"
    in_database = False

    def _message(self, mail: Mail) -> EmailMessage:
        email = EmailMessage()
        email["From"] = self.settings.mail_from
        email["To"] = mail.to
        email["Subject"] = mail.subject
        email.set_content(mail.body)
        if mail.html is not None:
            email.add_alternative(mail.html, subtype="html")
        return email

    async def _send(self, mail: Mail) -> None:
        try:
            await aiosmtplib.send(
                self._message(mail),
                hostname=self.settings.smtp_host,
                port=self.settings.smtp_port,
                username=self.settings.smtp_username,
                password=self.settings.smtp_password,
                start_tls=self.settings.smtp_starttls,
                timeout=15,
            )
        except (aiosmtplib.SMTPException, OSError) as exc:
            log.warning("mail %s to %s failed: %s", mail.kind, mail.to, exc)
            raise DeliveryFailed(str(exc)[:1000]) from exc

    async def _deliver(self, message_id: str, mail: Mail) -> None:
        try:
            await self._send(mail)
        except DeliveryFailed as exc:
            await self._mark(message_id, "FAILED", str(exc))
            return
        await self._mark(message_id, "SENT", None)

    async def transmit_all(self, mails: list[Mail]) -> list[str | None]:
        errors: list[str | None] = []
        for mail in mails:
            try:
                await self._send(mail)
            except DeliveryFailed as exc:
                errors.append(str(exc) or "the mail server refused the message")
            else:
                errors.append(None)
        await self._record(list(zip(mails, errors, strict=True)))
        return errors


def build_mailer(settings: Settings, db: Database) -> Mailer:
    return SmtpMailer(settings, db) if settings.mail_backend == "smtp" else Mailer(settings, db)
