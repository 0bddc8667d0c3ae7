"""Owner notifications: raise (in the event's transaction), read, mark read, preferences, unsubscribe.

`notify` writes one row per channel the owner's preference for the type allows, keyed by the event (a
second `notify` for the same event writes nothing), and asks for the email rows to be delivered after
commit (delivery.py); the worker retries what failed."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    String,
    Table,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus, clock
from callboard_core.agents.models import Agent
from callboard_core.db.engine import dialect_of, insert_for
from callboard_core.db.lookup import reread
from callboard_core.db.rows import Rider, naming_its_tables, ride_at_commit
from callboard_core.db.uow import at_commit
from callboard_core.errors import NotFound, ValidationFailed
from callboard_core.ids import new_id
from callboard_core.jobs.models import Award, Job
from callboard_core.owner_notifications.models import OwnerNotification, OwnerNotificationPreference
from callboard_core.owner_notifications.schemas import (
    OwnerNotificationList,
    OwnerNotificationView,
    Preference,
    Preferences,
    PreferencesUpdate,
)
from callboard_core.owner_notifications.states import Channel, DeliveryStatus, OwnerNotificationType
from callboard_core.pagination import decode_cursor, encode_cursor
from callboard_core.users.models import User

# Where each type's action URL points (relative to the base URL): the signed-in home page until the owner's
# web console lands (its pages go here, this one table); a document's own printable page.
ACTION_PATHS: dict[OwnerNotificationType, str] = {t: "/" for t in OwnerNotificationType}


@dataclass(frozen=True)
class EmailNotificationQueued(bus.Event):
    """An email notification row was written: delivered with the transaction's last work when the mail is
    a row of this database (the outbox), else right after the commit (`delivery.Batch.queue`); what fails
    is retried by the worker's pass. `to`: the owner's address as the transaction read it (None: unknown;
    the delivery reads it)."""

    notification_id: str
    to: str | None = None
    # The row as written, when it was written SENT (its mailer delivers in this transaction: `MailInTransaction`):
    # the delivery writes its mail from this, with no claim to make.
    sent: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class MailInTransaction(bus.Question[bool]):
    """Whether the mailer delivers inside the raising transaction (the outbox: a mail is a row of this
    database). Then an email notification is written SENT, with its mail, and never claimed."""


@dataclass(frozen=True)
class MailsWithNotes:
    """How the mails of email notifications are written by the notes' own statement (`NotesCarryMails`):
    the outbox's table; `row(email_row)`, the mail's outbox row (its address left to the statement, which
    reads it with the note); `logged(mail_row, address)`, the outbox's log line once written."""

    table: Table
    row: Callable[[Mapping[str, Any]], dict[str, Any]]
    logged: Callable[[Mapping[str, Any], str], None]


@dataclass(frozen=True)
class NotesCarryMails(bus.Question["MailsWithNotes | None"]):
    """Whether a transaction's notes can write their mails in the same statement (the mailer delivers by
    writing an outbox row: `MailInTransaction`): how, or None."""


def _channels(type_: str, row: Any) -> Preference:
    """An owner's channels for one type from its preference row (or the row's two columns); no row means
    every channel on: the one place that default is stated."""
    return Preference(
        type=type_,
        email_enabled=row is None or row.email_enabled is not False,
        in_app_enabled=row is None or row.in_app_enabled is not False,
    )


async def preference(session: AsyncSession, owner_id: str, type_: str) -> Preference:
    return _channels(type_, await session.get(OwnerNotificationPreference, (owner_id, type_)))


# The owners' accounts and their choices for these types: built once, every notification reads it.
_OWNERS_AND_CHOICES = (
    select(
        User.id,
        User.email,
        OwnerNotificationPreference.type,
        OwnerNotificationPreference.email_enabled,
        OwnerNotificationPreference.in_app_enabled,
    )
    .select_from(User)
    .outerjoin(
        OwnerNotificationPreference,
        and_(
            OwnerNotificationPreference.owner_id == User.id,
            OwnerNotificationPreference.type.in_(bindparam("p_types", expanding=True)),
        ),
    )
    .where(User.id.in_(bindparam("p_owners", expanding=True)))
)


def _given_before(owner: Any, jobs: Any) -> Any:
    """Whether `owner` has awarded a job other than `jobs`: one probe of the owner's awarded jobs
    (ix_jobs_owner_awarded), however many jobs the owner has (a job is awarded exactly when it has its award
    row: both are written by the award's transaction, and neither is undone)."""
    return exists().where(
        Job.owner_id == owner, Job.awarded_submission_id.is_not(None), _besides(Job.id, jobs)
    )


def _won_before(owner: Any, jobs: Any) -> Any:
    """Whether one of `owner`'s agents won a job other than `jobs` (a job has at most one award)."""
    return exists().where(
        Award.worker_agent_id == Agent.id, Agent.owner_id == owner, _besides(Award.job_id, jobs)
    )


def _besides(column: Any, jobs: Any) -> Any:
    """`column NOT IN jobs` (an expanding parameter, or a list of parameters: an empty list leaves out none)."""
    return column.not_in(jobs) if not isinstance(jobs, list) or jobs else true()


# The same, and whether each owner has an award given (a job of theirs awarded) or won (by one of their
# agents) other than the notes' own (`Note.first`): an award's first-award notes need no read of their own.
_OTHER_JOBS: Any = bindparam("p_jobs", expanding=True)
_OWNERS_CHOICES_AND_FIRSTS = _OWNERS_AND_CHOICES.add_columns(
    _given_before(User.id, _OTHER_JOBS).label("given_before"),
    _won_before(User.id, _OTHER_JOBS).label("won_before"),
)


@dataclass(frozen=True)
class Note:
    """One notification to raise: for `owner_id` (None: an owner-less agent, nothing is written), of a type,
    once per event (`event_key`)."""

    owner_id: str | None
    type: OwnerNotificationType
    event_key: str
    subject: str
    body: str
    metadata: Mapping[str, Any] | None = None
    action_path: str | None = None
    # ("given" | "won", the awarded job's id): written only if the owner has no other award given (or won)
    # than that job's, which the owners' read answers in the same statement.
    first: tuple[str, str] | None = None


async def notify(
    session: AsyncSession,
    owner_id: str | None,
    type_: OwnerNotificationType,
    event_key: str,
    subject: str,
    body: str,
    *,
    metadata: Mapping[str, Any] | None = None,
    action_path: str | None = None,
) -> list[str]:
    """Record the notification for each channel the owner wants, once per event (`event_key`); returns the
    ids written (none for an owner-less agent, a type switched off, or an event already notified)."""
    return await notify_all(session, [Note(owner_id, type_, event_key, subject, body, metadata, action_path)])


async def notify_all(session: AsyncSession, notes: Sequence[Note]) -> list[str]:
    """`notify` for several notes of one event (an award tells both owners). Returns the ids written, in
    the notes' order (in-app before email for each). Up to TOGETHER_MAX rows in one statement (`_together`:
    every channel's row offered, the database keeping those whose owner exists, wants the channel and, for
    a first-award note, has no other award); more in two (the owners' read, then one insert)."""
    wanted_notes = [note for note in notes if note.owner_id is not None]
    if not wanted_notes:
        return []
    # With the outbox, the email row is its own delivery's outcome (the mail is written with it, below):
    # SENT at once, as the claim would have made it, without the claim's statement.
    answers: list[bool] = await bus.ask(session, MailInTransaction())
    in_transaction = any(answers)
    now = clock.now()
    if 2 * len(wanted_notes) <= TOGETHER_MAX:
        offered, params, awarded = _offered(wanted_notes, now, in_transaction)
        statement = _together(dialect_of(session), len(offered), awarded)
        found = (await session.execute(statement, params)).all()
        return await _written(
            session, [row for rows in offered for row in rows], {r.id: r.email for r in found}
        )
    jobs = sorted({note.first[1] for note in wanted_notes if note.first is not None})
    owners = sorted({str(note.owner_id) for note in wanted_notes})
    types = sorted({str(note.type) for note in wanted_notes})
    choices: dict[str, Any] = {"p_owners": owners, "p_types": types}
    if jobs:
        found = (await session.execute(_OWNERS_CHOICES_AND_FIRSTS, {**choices, "p_jobs": jobs})).all()
        before = {(row.id, "given"): row.given_before for row in found}
        before |= {(row.id, "won"): row.won_before for row in found}
    else:
        found = (await session.execute(_OWNERS_AND_CHOICES, choices)).all()
        before = {}
    accounts = {row.id: row.email for row in found}  # postings may name no account
    chosen = {(row.id, row.type): row for row in found if row.type is not None}
    rows: list[dict[str, Any]] = []
    for note in wanted_notes:
        if note.owner_id not in accounts:
            continue
        if note.first is not None and before.get((note.owner_id, note.first[0]), True):
            continue
        wanted = _channels(str(note.type), chosen.get((note.owner_id, str(note.type))))
        for channel, enabled in (
            (Channel.IN_APP, wanted.in_app_enabled),
            (Channel.EMAIL, wanted.email_enabled),
        ):
            if enabled:
                rows.append(_row(note, channel, now, in_transaction))
    if not rows:
        return []
    inserted = set((await session.execute(_insert_rows(dialect_of(session)), rows)).scalars())
    return await _written(
        session, rows, {row["id"]: accounts[row["owner_id"]] for row in rows if row["id"] in inserted}
    )


def _offered(
    notes: Sequence[Note], now: datetime, mail_in_transaction: bool
) -> tuple[list[list[dict[str, Any]]], dict[str, Any], int]:
    """The rows `_together` offers (per note, one per channel, as `_row` makes them), its parameters and its
    count of awarded jobs."""
    awarded = sorted({note.first[1] for note in notes if note.first is not None})
    offered = [[_row(note, channel, now, mail_in_transaction) for channel in CHANNELS] for note in notes]
    # What the channels' rows share is bound once per note; what differs (id, delivery) per channel.
    params: dict[str, Any] = {f"p_job{j}": job_id for j, job_id in enumerate(awarded)}
    for channel, row in zip(CHANNELS, offered[0], strict=True):  # as `_row` made them: alike for all
        params.update({f"p_{channel.lower()}_{column}": row[column] for column in _DELIVERY})
    params["p_now"] = now
    for i, (note, (in_app, by_email)) in enumerate(zip(notes, offered, strict=True)):
        params.update({_bind(i, column): in_app[column] for column in _PER_NOTE})
        params[_bind(i, "in_app_id")], params[_bind(i, "email_id")] = in_app["id"], by_email["id"]
        params[_bind(i, "first")] = note.first[0] if note.first is not None else ""
    return offered, params, len(awarded)


async def _written(
    session: AsyncSession, rows: Sequence[dict[str, Any]], inserted: Mapping[str, str | None]
) -> list[str]:
    """The ids of `rows` the database took (`inserted`: id -> the owner's email), in order; each email row's
    delivery asked for."""
    for row in rows:
        if row["id"] in inserted and row["channel"] == Channel.EMAIL:
            sent = row if row["status"] == DeliveryStatus.SENT else None
            await bus.publish(session, EmailNotificationQueued(row["id"], inserted[row["id"]], sent))
    return [row["id"] for row in rows if row["id"] in inserted]


async def notify_at_commit(session: AsyncSession, notes: Sequence[Note]) -> None:
    """`notify_all` as the transaction's last work, for notes whose ids nobody needs: every note the events
    of one transaction raise (an award's documents and its outcome) is written by one read and one insert,
    not two of each per event. Nothing is written if the transaction rolls back."""
    await at_commit(session, "owner-notifications", notes, _notify_gathered)


async def _notify_gathered(session: AsyncSession, notes: list[Note]) -> None:
    """`notify_all` of the notes a transaction gathered. On PostgreSQL, when they fit one statement and
    their mails are outbox rows (`NotesCarryMails`), the notes and the mails of those written by email ride
    with the commit's statement (`_notes_and_mails`, a `db/rows.Rider`): no round trip of their own."""
    wanted = [note for note in notes if note.owner_id is not None]
    if wanted and 2 * len(wanted) <= TOGETHER_MAX and dialect_of(session) == "postgresql":
        carriers = [answer for answer in await bus.ask(session, NotesCarryMails()) if answer is not None]
        if carriers:
            await _ride(session, wanted, carriers[0])
            return
    await notify_all(session, notes)


async def _ride(session: AsyncSession, notes: list[Note], mails: MailsWithNotes) -> None:
    offered, params, awarded = _offered(notes, clock.now(), True)
    written: dict[str, dict[str, Any]] = {}  # mail id -> its outbox row, for the log
    for i, (_in_app, by_email) in enumerate(offered):
        mail = mails.row(by_email)
        params.update({f"ml{i}_{column}": value for column, value in mail.items()})
        params[f"ml{i}_note"] = by_email["id"]
        written[mail["id"]] = mail

    def logged(sent: Sequence[str] | None) -> None:  # "<mail id> <address>" of each mail written
        for line in sent or ():
            mail_id, _, address = line.partition(" ")
            mails.logged(written[mail_id], address)

    rider = Rider(
        build=_notes_and_mails, args=(len(offered), awarded, mails.table), params=params, answered=logged
    )
    await ride_at_commit(session, rider)


@functools.lru_cache(maxsize=64)
def _notes_and_mails(count: int, awarded: int, outbox: Table) -> tuple[tuple[Any, ...], Any]:
    """`_together`'s insert as a data-modifying CTE, and one writing the outbox row of each email row it
    wrote (`ml<i>_*`, one per note, its address read by the notes' RETURNING); what changed: the mails
    written, "<id> <address>" each (the outbox logs them)."""
    notes = _together_insert("postgresql", count, awarded).cte("owner_notes")
    own = [c for c in outbox.c if c.key != "to_address"]
    offered_mails = [
        select(
            bindparam(f"ml{i}_note", type_=String()).label("note_id"),
            *(bindparam(f"ml{i}_{c.key}", type_=c.type).label(c.key) for c in own),
        )
        for i in range(count)
    ]
    offered = (offered_mails[0] if count == 1 else union_all(*offered_mails)).subquery("offered_mails")
    columns = [c.key for c in outbox.c]
    source = select(
        *(notes.c.email.label(c) if c == "to_address" else offered.c[c] for c in columns)
    ).select_from(offered.join(notes, notes.c.id == offered.c.note_id))
    written = (
        insert(outbox)
        .from_select(columns, source)
        .returning(outbox.c.id, outbox.c.to_address)
        .cte("outbox_mails")
    )
    sent = select(func.array_agg(func.concat_ws(" ", written.c.id, written.c.to_address))).scalar_subquery()
    return (notes, written), sent


@functools.cache
def _insert_rows(dialect: str) -> Any:
    """Every channel of every note in one statement (the rows as its parameters: one statement compiled
    once, where rows written into the statement would make it new, and compiled again, each time); an event
    already notified on a channel inserts nothing there."""
    table = cast(Table, OwnerNotification.__table__)
    return (
        insert_for(dialect)(table)
        .on_conflict_do_nothing(index_elements=["owner_id", "type", "channel", "event_key"])
        .returning(table.c.id)
    )


def _row(note: Note, channel: Channel, now: datetime, mail_in_transaction: bool) -> dict[str, Any]:
    """One channel's row of a note. An email row is PENDING for its delivery, or SENT already when the mail
    is written in this transaction (the outbox: `MailInTransaction`)."""
    in_app = channel == Channel.IN_APP
    sent = in_app or mail_in_transaction
    return {
        "id": new_id("onf"),
        "owner_id": note.owner_id,
        "type": str(note.type),
        "channel": str(channel),
        "status": DeliveryStatus.SENT if sent else DeliveryStatus.PENDING,
        "event_key": note.event_key[:200],
        "subject": note.subject[:300],
        "body": note.body,
        "action_url": note.action_path or ACTION_PATHS[note.type],
        "metadata_json": dict(note.metadata or {}),
        "attempts": 0 if in_app or not sent else 1,
        "next_attempt_at": None if sent else now,
        "sent_at": now if sent else None,
        "created_at": now,
    }


CHANNELS = (Channel.IN_APP, Channel.EMAIL)  # a note's rows, in this order
TOGETHER_MAX = 16  # offered rows in one statement (its text grows with them; one shape per count)
_COLUMNS = tuple(
    c.key for c in cast(Table, OwnerNotification.__table__).c if c.key not in ("read_at", "error")
)


def _bind(index: int, column: str) -> str:
    return f"n{index}_{column}"


# A note's rows (one per channel) share these columns; the others are its channel's (`_together`).
_DELIVERY = ("status", "attempts", "next_attempt_at", "sent_at")
_PER_CHANNEL = ("id", "channel", *_DELIVERY)
_PER_NOTE = tuple(c for c in _COLUMNS if c not in _PER_CHANNEL and c != "created_at")


@functools.lru_cache(maxsize=4 * TOGETHER_MAX)
def _together(dialect: str, count: int, awarded: int) -> Any:
    """`_together_insert`, saying which tables it names (`naming_its_tables`)."""
    return naming_its_tables(_together_insert(dialect, count, awarded))


@functools.lru_cache(maxsize=4 * TOGETHER_MAX)
def _together_insert(dialect: str, count: int, awarded: int) -> Any:
    """One INSERT ... SELECT of `count` offered notes (`_bind` parameters, and `first`: "given" / "won" / ""),
    each as one row per channel: what the rows share bound once per note, each channel's id bound per note,
    and each channel's delivery (`p_in_app_*`, `p_email_*`: status, attempts, times, as `_row` makes them)
    once for all. A row goes in when its owner's account exists, the owner's choice for its type
    leaves its channel on (no choice: on, as `_channels` says), and a first-award row's owner has no award
    given (or won) but the notes' own (their `awarded` jobs, `p_job<j>`: one parameter each, where an
    expanding list would have the statement's text written again on every run); an event already notified
    on a channel inserts nothing there. It returns each row written with its owner's email. The notes as
    one SELECT of parameters each (UNION ALL): one statement compiled once per count, where a VALUES list
    would be compiled again on every run."""
    table = cast(Table, OwnerNotification.__table__)
    offered_rows = [
        select(
            *(bindparam(_bind(i, c), type_=table.c[c].type).label(c) for c in _PER_NOTE),
            bindparam(_bind(i, "in_app_id"), type_=table.c.id.type).label("in_app_id"),
            bindparam(_bind(i, "email_id"), type_=table.c.id.type).label("email_id"),
            bindparam(_bind(i, "first"), type_=String()).label("first"),
        )
        for i in range(count)
    ]
    notes = (offered_rows[0] if count == 1 else union_all(*offered_rows)).subquery("offered_notes")
    channels = union_all(
        *(select(literal(str(channel), type_=table.c.channel.type).label("channel")) for channel in CHANNELS)
    ).subquery("channels")
    in_app = channels.c.channel == str(Channel.IN_APP)

    def per_channel(column: str) -> Any:
        in_app_value, email_value = (
            bindparam(f"p_{channel.lower()}_{column}", type_=table.c[column].type) for channel in CHANNELS
        )
        return case((in_app, in_app_value), else_=email_value).label(column)

    columns = {
        **{c: notes.c[c] for c in _PER_NOTE},
        "id": case((in_app, notes.c.in_app_id), else_=notes.c.email_id).label("id"),
        "channel": channels.c.channel,
        **{c: per_channel(c) for c in _DELIVERY},
        "created_at": bindparam("p_now", type_=table.c.created_at.type).label("created_at"),
    }
    offered = (
        select(*(columns[c] for c in _COLUMNS), notes.c.first)
        .select_from(notes.join(channels, true()))
        .subquery("offered")
    )
    choice = OwnerNotificationPreference
    wanted = case(
        (offered.c.channel == str(Channel.IN_APP), func.coalesce(choice.in_app_enabled, true())),
        else_=func.coalesce(choice.email_enabled, true()),
    )
    others: list[Any] = [bindparam(f"p_job{j}") for j in range(awarded)]
    # Without an award among the notes the statement names no job or award table at all (a job's move the
    # transaction still holds for its last statement need not be written first: db/rows.py).
    first = (
        or_(
            offered.c.first == "",
            and_(offered.c.first == "given", ~_given_before(offered.c.owner_id, others)),
            and_(offered.c.first == "won", ~_won_before(offered.c.owner_id, others)),
        )
        if awarded
        else true()
    )
    source = (
        select(*(offered.c[c] for c in _COLUMNS))
        .select_from(
            offered.join(User, User.id == offered.c.owner_id).outerjoin(
                choice, and_(choice.owner_id == offered.c.owner_id, choice.type == offered.c.type)
            )
        )
        .where(wanted == true(), first)
    )
    # By hand: SQLAlchemy does not correlate a RETURNING sub-select with the table written.
    email: Any = literal_column(
        f"(SELECT {User.__tablename__}.email FROM {User.__tablename__} "
        f"WHERE {User.__tablename__}.id = {table.name}.owner_id)"
    )
    return (
        insert_for(dialect)(table)
        .from_select(list(_COLUMNS), source)
        .on_conflict_do_nothing(index_elements=["owner_id", "type", "channel", "event_key"])
        .returning(table.c.id, email.label("email"))
    )


def view(row: OwnerNotification, base_url: str) -> OwnerNotificationView:
    return OwnerNotificationView(
        id=row.id,
        type=row.type,
        channel=row.channel,
        status=row.status,
        subject=row.subject,
        body=row.body,
        action_url=base_url.rstrip("/") + row.action_url if row.action_url else None,
        metadata=row.metadata_json or {},
        sent_at=row.sent_at,
        read_at=row.read_at,
        error=row.error,
        created_at=row.created_at,
    )


async def list_for(
    session: AsyncSession, owner_id: str, base_url: str, *, cursor: str | None, limit: int
) -> OwnerNotificationList:
    """The owner's in-app log, newest first (the email copies are deliveries of the same entries)."""
    stmt = select(OwnerNotification).where(
        OwnerNotification.owner_id == owner_id, OwnerNotification.channel == Channel.IN_APP
    )
    if cursor:
        at, after_id = decode_cursor(cursor)
        stmt = stmt.where(
            or_(
                OwnerNotification.created_at < at,
                and_(OwnerNotification.created_at == at, OwnerNotification.id < after_id),
            )
        )
    rows = (
        await session.scalars(
            stmt.order_by(OwnerNotification.created_at.desc(), OwnerNotification.id.desc()).limit(limit + 1)
        )
    ).all()
    more = len(rows) > limit
    page = rows[:limit]
    return OwnerNotificationList(
        notifications=[view(r, base_url) for r in page],
        next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more and page else None,
    )


async def unread_count(session: AsyncSession, owner_id: str) -> int:
    """The owner's unread in-app notifications (the console's home shows the figure)."""
    return int(
        await session.scalar(
            select(func.count())
            .select_from(OwnerNotification)
            .where(
                OwnerNotification.owner_id == owner_id,
                OwnerNotification.channel == Channel.IN_APP,
                OwnerNotification.read_at.is_(None),
            )
        )
        or 0
    )


async def mark_read(
    session: AsyncSession, owner_id: str, notification_id: str, base_url: str
) -> OwnerNotificationView:
    """Mark one entry read (again: no change); another owner's is 404."""
    row = await session.get(OwnerNotification, notification_id)
    if row is None or row.owner_id != owner_id:
        raise NotFound("No such notification.", code="notification_not_found")
    if row.read_at is None:
        await session.execute(
            update(OwnerNotification)
            .where(OwnerNotification.id == row.id, OwnerNotification.read_at.is_(None))
            .values(read_at=clock.now())
        )
        await reread(session, row)
    return view(row, base_url)


async def preferences(session: AsyncSession, owner_id: str) -> Preferences:
    rows = {
        r.type: r
        for r in (
            await session.scalars(
                select(OwnerNotificationPreference).where(OwnerNotificationPreference.owner_id == owner_id)
            )
        ).all()
    }
    return Preferences(preferences=[_channels(t, rows.get(t)) for t in OwnerNotificationType])


async def update_preferences(session: AsyncSession, owner_id: str, body: PreferencesUpdate) -> Preferences:
    """Change the channels of the types named (only the flags sent); an unknown type is a 422 and changes
    nothing."""
    known = {str(t) for t in OwnerNotificationType}
    unknown = [i for i, change in enumerate(body.preferences) if change.type not in known]
    if unknown:
        raise ValidationFailed(
            "Unknown notification type: use one of the OwnerNotificationType values.",
            errors=[
                {
                    "field": f"preferences.{i}.type",
                    "in": "body",
                    "code": "unknown_type",
                    "message": f"one of {', '.join(sorted(known))}",
                }
                for i in unknown
            ],
        )
    for change in body.preferences:
        given = change.model_fields_set
        await set_preference(
            session,
            owner_id,
            change.type,
            email=change.email_enabled if "email_enabled" in given else None,
            in_app=change.in_app_enabled if "in_app_enabled" in given else None,
        )
    return await preferences(session, owner_id)


async def set_preference(
    session: AsyncSession, owner_id: str, type_: str, *, email: bool | None, in_app: bool | None
) -> None:
    row = await session.get(OwnerNotificationPreference, (owner_id, type_))
    if row is None:
        row = OwnerNotificationPreference(
            owner_id=owner_id, type=type_, email_enabled=True, in_app_enabled=True
        )
        session.add(row)
    if email is not None:
        row.email_enabled = email
    if in_app is not None:
        row.in_app_enabled = in_app
    await session.flush()


# --- unsubscribe links: signed, single purpose (one owner, one type, email off) ---------------------------


def _mac(secret: str, payload: str) -> str:
    key = hashlib.sha256(b"callboard-unsubscribe:" + secret.encode()).digest()
    return base64.urlsafe_b64encode(hmac.new(key, payload.encode(), hashlib.sha256).digest()[:18]).decode()


def unsubscribe_token(secret: str, owner_id: str, type_: str) -> str:
    payload = f"{owner_id}.{type_}"
    return f"{payload}.{_mac(secret, payload)}"


async def unsubscribe(session: AsyncSession, secret: str, token: str) -> Preference:
    """Turn email off for the type the token names, for the owner it names; a token that does not verify
    is 404 (it names nothing we will act on)."""
    owner_id = token.partition(".")[0]
    type_ = check_token(secret, token)
    if type_ is None or await session.get(User, owner_id) is None:
        raise NotFound("This unsubscribe link is not valid.", code="unsubscribe_link_invalid")
    await set_preference(session, owner_id, type_, email=False, in_app=None)
    return await preference(session, owner_id, type_)


def type_label(type_: str) -> str:
    return type_.replace("BOUNTY_", "JOB_").replace("_", " ").lower()


def check_token(secret: str, token: str) -> str | None:
    """The type an unsubscribe token names, if it verifies (the page shows it before the owner confirms)."""
    owner_id, _, rest = token.partition(".")
    type_, _, mac = rest.partition(".")
    if type_ in {str(t) for t in OwnerNotificationType} and hmac.compare_digest(
        mac, _mac(secret, f"{owner_id}.{type_}")
    ):
        return type_
    return None
