"""db.rows.insert_rows: new rows by one Core INSERT, as a flush would have written them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, event, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import registry

from callboard_core.container import Core
from callboard_core.db import sqlite_driver
from callboard_core.db.rows import COMBINED_ROWS_MAX, _columns_of, insert_at_commit, insert_rows
from callboard_core.mail.models import OutboxMessage
from callboard_core.waitlist.models import WaitlistSignup
from tests.factories import uid


def _signup(**values: Any) -> WaitlistSignup:
    return WaitlistSignup(name="n", use_case="u", role="REQUESTER", **values)


async def test_defaults_fill_unset_columns_and_reach_the_objects_explicit_none_stays_null(core: Core) -> None:
    rows = [_signup(email=f"{uid()}@example.test"), _signup(email=f"{uid()}@example.test", company=None)]
    rows[1].notes = "kept"
    async with core.uow() as uow:
        await insert_rows(uow.session, rows)
        # In the same transaction, a query finds them (no flush needed).
        found = (
            await uow.session.execute(
                select(WaitlistSignup.id, WaitlistSignup.status, WaitlistSignup.notes).where(
                    WaitlistSignup.email.in_([r.email for r in rows])
                )
            )
        ).all()
    assert all(r.id.startswith("wls_") and r.status == "PENDING" and r.created_at for r in rows)
    assert sorted(found) == sorted([(rows[0].id, "PENDING", None), (rows[1].id, "PENDING", "kept")])
    async with core.uow(write=False) as uow:
        stored = await uow.session.get(WaitlistSignup, rows[0].id)
        assert stored is not None and stored.created_at == rows[0].created_at


async def test_a_duplicate_key_raises_as_a_flush_would_and_nothing_is_left(core: Core) -> None:
    email = f"{uid()}@example.test"
    with pytest.raises(IntegrityError):
        async with core.uow() as uow:
            await insert_rows(uow.session, [_signup(email=email), _signup(email=email)])
    async with core.uow(write=False) as uow:
        assert (
            await uow.session.scalar(select(WaitlistSignup.id).where(WaitlistSignup.email == email)) is None
        )


def test_a_column_with_only_a_server_default_is_refused() -> None:
    mapper = registry(metadata=MetaData())
    table = Table(
        "t", mapper.metadata, Column("id", Integer, primary_key=True), Column("v", String, server_default="x")
    )

    class Row:
        pass

    mapper.map_imperatively(Row, table)
    with pytest.raises(TypeError, match="only a server default"):
        _columns_of(Row)


async def test_rows_at_commit_go_in_one_statement_and_not_at_all_on_rollback(core: Core) -> None:
    emails = [f"{uid()}@example.test" for _ in range(3)]
    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            await insert_at_commit(uow.session, [_signup(email=emails[0])])
            raise RuntimeError("the transaction fails")
    statements: list[str] = []
    async with core.uow() as uow:
        await insert_at_commit(uow.session, [_signup(email=emails[1])])
        await insert_at_commit(uow.session, [_signup(email=emails[2])])
        assert await _count(uow.session, emails) == 0  # written as the transaction's last work
        engine = uow.session.bind.sync_engine if uow.session.bind else None
        assert engine is not None
        listener = lambda *args: statements.append(args[2])  # noqa: E731
        event.listen(engine, "before_cursor_execute", listener)
    event.remove(engine, "before_cursor_execute", listener)
    assert [s for s in statements if s.startswith("INSERT")] == [statements[0]]
    async with core.uow(write=False) as uow:
        assert await _count(uow.session, emails) == 2
    # A session without a unit of work writes them at once.
    async with core.db.session(write=True) as session, session.begin():
        await insert_at_commit(session, [_signup(email=emails[0])])
        assert await _count(session, emails[:1]) == 1


async def _count(session: Any, emails: list[str]) -> int:
    found = await session.scalars(select(WaitlistSignup.id).where(WaitlistSignup.email.in_(emails)))
    return len(found.all())


def _mail(to: str) -> OutboxMessage:
    return OutboxMessage(kind="test", to_address=to, subject="s", body_text="b")


async def test_rows_of_several_tables_at_commit_one_statement_on_postgresql_none_on_rollback(
    core: Core,
) -> None:
    """Rows gathered at commit go after every other commit hook, all tables together: on PostgreSQL in one
    statement (data-modifying CTEs), on SQLite one per table in the order their first rows came."""
    emails = [f"{uid()}@example.test" for _ in range(3)]
    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            await insert_at_commit(uow.session, [_signup(email=emails[0])])
            await insert_at_commit(uow.session, [_mail(emails[0])])
            raise RuntimeError("the transaction fails")
    async with _counted(core) as statements, core.uow() as uow:
        signups = [_signup(email=emails[1]), _signup(email=emails[2])]
        await insert_at_commit(uow.session, signups[:1])
        assert signups[0].id.startswith("wls_")  # the values are taken at once, defaults filled in
        await insert_at_commit(uow.session, [_mail(e) for e in emails[1:]])
        await insert_at_commit(uow.session, signups[1:])
        assert await _count(uow.session, emails) == 0  # not yet: the transaction's last work
    inserts = [" ".join(s.split()) for s in statements if s.startswith(("INSERT", "WITH"))]
    if core.db.is_sqlite:
        assert [s.split()[2] for s in inserts] == ["waitlist_signups", "mail_outbox"]
    else:
        (combined,) = inserts
        tables = [words.split()[0] for words in combined.split("INSERT INTO ")[1:]]
        assert combined.startswith("WITH") and tables == ["waitlist_signups"] * 2 + ["mail_outbox"] * 2
    async with core.uow(write=False) as uow:
        assert await _count(uow.session, emails) == 2
        mails = await uow.session.scalars(
            select(OutboxMessage.to_address).where(OutboxMessage.to_address.in_(emails))
        )
        assert sorted(mails.all()) == sorted(emails[1:])


async def test_a_duplicate_among_rows_written_together_fails_the_commit_and_keeps_none(core: Core) -> None:
    email = f"{uid()}@example.test"
    with pytest.raises(IntegrityError):
        async with core.uow() as uow:
            await insert_at_commit(uow.session, [_mail(email)])
            await insert_at_commit(uow.session, [_signup(email=email), _signup(email=email)])
    async with core.uow(write=False) as uow:
        assert await _count(uow.session, [email]) == 0
        mail = await uow.session.scalar(select(OutboxMessage.id).where(OutboxMessage.to_address == email))
        assert mail is None


async def test_many_rows_go_table_by_table(core: Core) -> None:
    emails = [f"{uid()}@example.test" for _ in range(COMBINED_ROWS_MAX)]
    async with _counted(core) as statements, core.uow() as uow:
        await insert_at_commit(uow.session, [_signup(email=e) for e in emails])
        await insert_at_commit(uow.session, [_mail(emails[0])])
    assert [s.split()[2] for s in statements if s.startswith(("INSERT", "WITH"))] == [
        "waitlist_signups",
        "mail_outbox",
    ]
    async with core.uow(write=False) as uow:
        assert await _count(uow.session, emails) == len(emails)


@contextlib.asynccontextmanager
async def _counted(core: Core) -> AsyncIterator[list[str]]:
    statements: list[str] = []
    engine = core.db.write_engine.sync_engine
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", listener)


async def test_rows_that_are_the_transactions_only_statement_need_no_begin_on_postgresql(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the gathered rows are all a transaction writes and nothing was sent before them (a draft whose
    reads the read cache answered), PostgreSQL runs their one statement on its own: no BEGIN and no COMMIT,
    two round trips less. Anything sent before, or a second statement to come, keeps the transaction; and a
    statement run so is still all or nothing (the duplicate test above runs this way too)."""
    # An engine's first connection runs the dialect's set-up queries in a transaction: before the count.
    async with core.uow() as uow:
        await insert_at_commit(uow.session, [_mail(f"{uid()}@example.test")])
    begins = _count_begins(core, monkeypatch)
    emails = [f"{uid()}@example.test" for _ in range(4)]
    async with core.uow() as uow:
        await insert_at_commit(uow.session, [_signup(email=emails[0])])
        await insert_at_commit(uow.session, [_mail(emails[0])])
    alone = len(begins)
    async with core.uow() as uow:
        await _count(uow.session, emails)  # a read first: the transaction has begun
        await insert_at_commit(uow.session, [_signup(email=emails[1])])
    after_a_read = len(begins) - alone
    async with core.uow() as uow:  # one table, two rows: SQLAlchemy may send them as several statements
        await insert_at_commit(uow.session, [_signup(email=e) for e in emails[2:]])
    two_rows = len(begins) - alone - after_a_read
    async with core.uow() as uow:  # a pending object the commit's flush writes: a second statement
        uow.session.add(_mail(emails[1]))
        await insert_at_commit(uow.session, [_mail(emails[2])])
    with_a_flush = len(begins) - alone - after_a_read - two_rows
    if core.db.is_sqlite:  # BEGIN IMMEDIATE costs no round trip there, and takes the write lock: always sent
        assert (alone, after_a_read, two_rows, with_a_flush) == (1, 1, 1, 1)
    else:
        assert (alone, after_a_read, two_rows, with_a_flush) == (0, 1, 1, 1)
    async with core.uow(write=False) as uow:
        assert await _count(uow.session, emails) == 4
        mails = await uow.session.scalars(
            select(OutboxMessage.to_address).where(OutboxMessage.to_address.in_(emails))
        )
        assert sorted(mails.all()) == sorted(emails[:3])


def _count_begins(core: Core, monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """One item per BEGIN the driver sends: PostgreSQL's, or SQLite's BEGIN IMMEDIATE (each attempt at it)."""
    begins: list[None] = []
    if core.db.is_sqlite:
        attempt = sqlite_driver.Connection.try_begin_inline

        def counted_immediate(self: Any, cursor: Any) -> bool:
            begins.append(None)
            return attempt(self, cursor)

        monkeypatch.setattr(sqlite_driver.Connection, "try_begin_inline", counted_immediate)
        return begins

    from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection as Adapted

    start = Adapted._start_transaction

    async def counted(self: Any) -> None:
        if self.isolation_level != "autocommit":
            begins.append(None)
        await start(self)

    monkeypatch.setattr(Adapted, "_start_transaction", counted)
    return begins
