"""Upgrade in place: a database made by the previous release (migrations up to 0003, rows written as that
release wrote them) upgrades to head with its rows intact and the ledger in place, and 0004 downgrades
cleanly. On SQLite (a fresh file) and PostgreSQL (a fresh database)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from callboard_core.bus import MessageBus
from callboard_core.db import Database, UnitOfWork
from callboard_core.db.changefeed import TRIGGER
from callboard_core.db.migrate import alembic_config
from callboard_core.ids import new_id
from callboard_core.ledger import service as ledger
from tests.conftest import PG_ADMIN_URL, PG_AVAILABLE

PREVIOUS = "0003"  # the last revision the previous release shipped
LEDGER_TABLES = {"ledger_accounts", "ledger_transactions", "ledger_entries"}


@contextlib.asynccontextmanager
async def bare_uow(db: Database) -> AsyncIterator[AsyncSession]:
    """A unit of work on a bare database with a bus that hears nothing: the ledger alone, no documents."""
    async with UnitOfWork(db, bus=MessageBus()) as uow:
        yield uow.session


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.skipif(not PG_AVAILABLE, reason="no PostgreSQL")),
    ]
)
async def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'upgrade.db'}"
        return
    name = f"callboard_mig_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        admin = await asyncpg.connect(PG_ADMIN_URL)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def migrate(url: str, revision: str, *, down: bool = False) -> None:
    # Alembic's env runs its own event loop: keep it off the test's (as db/migrate.py does).
    step = command.downgrade if down else command.upgrade
    await asyncio.to_thread(step, alembic_config(url), revision)


def head(url: str) -> str:
    return str(ScriptDirectory.from_config(alembic_config(url)).get_current_head())


async def tables(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


async def version(engine: AsyncEngine) -> str:
    async with engine.connect() as conn:
        return str(await conn.scalar(text("SELECT version_num FROM alembic_version")))


def old_rows(sqlite: bool) -> dict[str, dict[str, Any]]:
    """A user, an agent it owns and a published job, column by column as release 0003 wrote them."""
    now = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    # The old release stored naive UTC text on SQLite (UTCDateTime) and timestamptz on PostgreSQL.
    at = (lambda d: d.replace(tzinfo=None)) if sqlite else (lambda d: d)
    user_id, agent_id = new_id("usr"), new_id("agt")
    return {
        "users": {
            "id": user_id,
            "email": f"{user_id}@example.com",
            "role": "USER",
            "status": "ACTIVE",
            "preview_access": False,
            "signup_intent": "BUYER",
            "created_at": at(now),
            "updated_at": at(now),
        },
        "agents": {
            "id": agent_id,
            "owner_id": user_id,
            "name": "Old agent",
            "handle": "old-" + agent_id[-8:],
            "endpoint_url": "https://agent.example.com/hook",
            "pricing_model": "PER_TASK",
            "price_per_unit": 1.5,
            "currency": "usd",
            "auth_method": "API_KEY",
            "status": "ACTIVE",
            "reputation_score": 0.0,
            "total_tasks": 0,
            "success_rate": 0.0,
            "avg_response_ms": 0.0,
            "dispute_rate": 0.0,
            "win_count": 0,
            "processor_onboarding_complete": False,
            "processor_charges_enabled": False,
            "processor_payouts_enabled": False,
            "claim_status": "CLAIMED",
            "requester_enabled": True,
            "worker_enabled": True,
            "auto_publish_limit_cents": 0,
            "intent": "BOTH",
            "is_house": False,
            "featured": False,
            "created_at": at(now),
            "updated_at": at(now),
        },
        "jobs": {
            "id": new_id("job"),
            "requester_agent_id": agent_id,
            "owner_id": user_id,
            "status": "ADMISSION_OPEN",
            "title": "An old job",
            "reward_amount_cents": 2_500,
            "currency": "usd",
            "application_cap": 20,
            "participant_cap": 3,
            "new_worker_reserved_application_count": 0,
            "new_worker_reserved_slot_count": 0,
            "admission_closes_at": at(now + timedelta(hours=1)),
            "fair_work_duration_ms": 3_600_000,
            "latest_submission_deadline_at": at(now + timedelta(days=1)),
            "review_deadline_at": at(now + timedelta(days=2)),
            "is_house": False,
            "is_starter": False,
            "application_count": 0,
            "new_worker_application_count": 0,
            "reserved_participants": 0,
            "published_at": at(now),
            "created_at": at(now),
            "updated_at": at(now),
        },
    }


async def read_back(engine: AsyncEngine, rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {}
    async with engine.connect() as conn:
        for table, row in rows.items():
            columns = ", ".join(row)
            result = await conn.execute(
                text(f"SELECT {columns} FROM {table} WHERE id = :id"), {"id": row["id"]}
            )
            found[table] = dict(result.mappings().one())
    return found


def normalized(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    # SQLite hands booleans back as 0/1 and datetimes as text; compare what the values mean.
    def value(v: Any) -> Any:
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, datetime):
            return v.replace(tzinfo=None).isoformat(" ")
        return v

    return {t: {k: value(v) for k, v in row.items()} for t, row in rows.items()}


async def test_the_previous_release_upgrades_in_place_and_0004_downgrades(fresh_url: str) -> None:
    sqlite = fresh_url.startswith("sqlite")
    await migrate(fresh_url, PREVIOUS)
    engine = create_async_engine(fresh_url)
    try:
        assert await version(engine) == PREVIOUS
        assert not LEDGER_TABLES & await tables(engine)
        rows = old_rows(sqlite)
        async with engine.begin() as conn:
            for table, row in rows.items():
                columns = ", ".join(row)
                values = ", ".join(f":{c}" for c in row)
                await conn.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({values})"), row)
        before = normalized(await read_back(engine, rows))

        await migrate(fresh_url, "head")
        assert await version(engine) == head(fresh_url)
        assert await tables(engine) >= LEDGER_TABLES
        assert normalized(await read_back(engine, rows)) == before
        if not sqlite:
            async with engine.connect() as conn:
                triggers = set(
                    (
                        await conn.execute(
                            text(
                                "SELECT t.tgname || ':' || c.relname FROM pg_trigger t "
                                "JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relname LIKE 'ledger_%'"
                            )
                        )
                    ).scalars()
                )
            # The change feed's notify trigger reached the new tables; entries and transactions are immutable.
            assert {f"{TRIGGER}:{t}" for t in LEDGER_TABLES} <= triggers
            assert {"ledger_entries_immutable:ledger_entries"} <= triggers
            assert {"ledger_transactions_immutable:ledger_transactions"} <= triggers
    finally:
        await engine.dispose()

    # The upgraded database takes postings for the owner the old release created.
    db = Database(fresh_url)
    try:
        user_id = rows["users"]["id"]
        async with bare_uow(db) as session:
            await ledger.top_up(session, user_id=user_id, amount_cents=3_000, processor_ref="cs_old")
            await ledger.reserve(session, user_id=user_id, amount_cents=2_500, job_id=rows["jobs"]["id"])
        async with bare_uow(db) as session:
            assert (await ledger.balances(session, user_id)).available_cents == 500
            assert await ledger.verify(session) == []
    finally:
        await db.dispose()

    await migrate(fresh_url, PREVIOUS, down=True)
    engine = create_async_engine(fresh_url)
    try:
        assert await version(engine) == PREVIOUS
        assert not LEDGER_TABLES & await tables(engine)
        assert normalized(await read_back(engine, rows)) == before
        if not sqlite:
            async with engine.connect() as conn:
                assert (
                    await conn.scalar(
                        text("SELECT count(*) FROM pg_proc WHERE proname = 'ledger_refuse_change'")
                    )
                    == 0
                )
    finally:
        await engine.dispose()
    await migrate(fresh_url, "head")  # and up again


async def test_a_ledger_posted_before_0014_is_numbered_and_then_refuses_unbalanced_postings(
    fresh_url: str,
) -> None:
    """Entries posted by the release before 0014 get their account versions and resulting balances (running
    sums in posting order); afterwards the database refuses a transaction that does not sum to zero."""
    await migrate(fresh_url, "0013")
    db = Database(fresh_url)
    user_id = new_id("usr")
    try:
        async with db.write_engine.begin() as conn:  # as 0013's code wrote them, with its own columns only
            at = datetime(2026, 11, 20, 9, 0)
            accounts = {"avail": new_id("lac"), "clear": new_id("lac")}
            for key, kind, holder, negative, balance in (
                ("avail", "OWNER_AVAILABLE", user_id, False, 2_500),
                ("clear", "PROCESSOR_CLEARING", "platform", True, -2_500),
            ):
                await conn.execute(
                    text(
                        "INSERT INTO ledger_accounts (id, kind, holder_id, currency, allow_negative, balance_cents,"
                        " created_at) VALUES (:id, :kind, :holder, 'usd', :neg, :balance, :at)"
                    ),
                    {
                        "id": accounts[key],
                        "kind": kind,
                        "holder": holder,
                        "neg": negative,
                        "balance": balance,
                        "at": at,
                    },
                )
            for n, amount in enumerate((1_000, 1_500)):
                txn = new_id("ltx")
                when = at + timedelta(minutes=n)
                await conn.execute(
                    text(
                        "INSERT INTO ledger_transactions (id, kind, idempotency_key, user_id, metadata, created_at)"
                        " VALUES (:id, 'TOPUP', :key, :user, '{}', :at)"
                    ),
                    {"id": txn, "key": f"old:{txn}", "user": user_id, "at": when},
                )
                for account, signed in ((accounts["avail"], amount), (accounts["clear"], -amount)):
                    await conn.execute(
                        text(
                            "INSERT INTO ledger_entries (id, transaction_id, account_id, amount_cents, created_at)"
                            " VALUES (:id, :txn, :acc, :amount, :at)"
                        ),
                        {"id": new_id("led"), "txn": txn, "acc": account, "amount": signed, "at": when},
                    )
        await migrate(fresh_url, "head")
        async with db.write_engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT account_version, balance_after_cents FROM ledger_entries WHERE account_id = :a "
                        "ORDER BY account_version"
                    ),
                    {"a": accounts["avail"]},
                )
            ).all()
            assert [tuple(r) for r in rows] == [(1, 1_000), (2, 2_500)]
            versions = await conn.scalar(text("SELECT SUM(version) FROM ledger_accounts"))
            assert versions == 4
        async with bare_uow(db) as session:
            assert await ledger.verify(session) == []
            await ledger.reserve(session, user_id=user_id, amount_cents=500, job_id=new_id("job"))
        async with bare_uow(db) as session:
            assert await ledger.verify(session) == []
            assert (await ledger.balances(session, user_id)).available_cents == 2_000
        with pytest.raises(IntegrityError):
            async with bare_uow(db) as session:
                txn = new_id("ltx")
                await session.execute(
                    text(
                        "INSERT INTO ledger_transactions (id, kind, idempotency_key, metadata, created_at) "
                        "VALUES (:id, 'ADJUSTMENT', :key, '{}', :at)"
                    ),
                    {"id": txn, "key": f"raw:{txn}", "at": datetime(2026, 11, 26)},
                )
                await session.execute(
                    text(
                        "INSERT INTO ledger_entries (id, transaction_id, account_id, amount_cents, created_at) "
                        "VALUES (:id, :txn, :acc, 100, :at)"
                    ),
                    {"id": new_id("led"), "txn": txn, "acc": accounts["clear"], "at": datetime(2026, 11, 26)},
                )
        async with bare_uow(db) as session:  # the connection is fine afterwards
            assert await ledger.verify(session) == []
    finally:
        await db.dispose()
    await migrate(fresh_url, "0013", down=True)  # 0014 downgrades cleanly
    await migrate(fresh_url, "head")


async def test_documents_issued_before_0016_keep_their_links_under_the_new_names(fresh_url: str) -> None:
    """A document written by the release before 0016 (its links in bounty_* columns) reads back under the
    new column names, unchanged; 0016 downgrades to the old names with the values in place."""
    await migrate(fresh_url, "0015")
    engine = create_async_engine(fresh_url)
    doc, at = new_id("doc"), datetime(2026, 11, 25, 12, 0)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO commercial_documents (id, number, kind, status, currency, owner_user_id,"
                    " subtotal_cents, tax_cents, total_cents, transaction_id, payment_status, line_items,"
                    " metadata, bounty_id, bounty_payment_id, issued_at, created_at) VALUES (:id, 'RCPT-2026-000001',"
                    " 'RECEIPT', 'ISSUED', 'usd', :owner, 700, 0, 700, :txn, 'PAID', '[]', '{}', :job, :pay, :at,"
                    " :at)"
                ),
                {
                    "id": doc,
                    "owner": new_id("usr"),
                    "txn": new_id("ltx"),
                    "job": "job_1",
                    "pay": "jpy_1",
                    "at": at,
                },
            )
        await migrate(fresh_url, "head")
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text("SELECT job_id, job_payment_id, payout_id FROM commercial_documents WHERE id = :id"),
                    {"id": doc},
                )
            ).one()
            assert tuple(row) == ("job_1", "jpy_1", None)
        await migrate(fresh_url, "0015", down=True)
        async with engine.connect() as conn:
            old = await conn.scalar(
                text("SELECT bounty_id FROM commercial_documents WHERE id = :id"), {"id": doc}
            )
            assert old == "job_1"
    finally:
        await engine.dispose()
    await migrate(fresh_url, "head")


async def test_the_input_files_of_jobs_made_before_0024_are_counted_on_their_rows(fresh_url: str) -> None:
    """0024 counts each job's input files (not deleted) on its row, which a publish reads to know it has
    some: a draft staged before the upgrade keeps its files checked at publish."""
    sqlite = fresh_url.startswith("sqlite")
    await migrate(fresh_url, PREVIOUS)
    engine = create_async_engine(fresh_url)
    rows = old_rows(sqlite)
    job_id = rows["jobs"]["id"]
    at = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    try:
        async with engine.begin() as conn:
            for table, row in rows.items():
                columns, values = ", ".join(row), ", ".join(f":{c}" for c in row)
                await conn.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({values})"), row)
        await migrate(fresh_url, "0023")
        async with engine.begin() as conn:
            for status in ("PENDING", "VERIFIED", "DELETED"):
                file_id = new_id("fil")
                await conn.execute(
                    text(
                        "INSERT INTO stored_files (id, kind, job_id, uploader_agent_id, filename, mime_type,"
                        " size_bytes, sha256, storage_key, status, created_at) VALUES (:id, 'JOB_INPUT', :job,"
                        " :agent, 'in.txt', 'text/plain', 3, :sha, :key, :status, :at)"
                    ),
                    {
                        "id": file_id,
                        "job": job_id,
                        "agent": rows["agents"]["id"],
                        "sha": "0" * 64,
                        "key": f"jobs/{job_id}/inputs/{file_id}",
                        "status": status,
                        "at": at.replace(tzinfo=None) if sqlite else at,
                    },
                )
        await migrate(fresh_url, "head")
        async with engine.connect() as conn:
            counts = {r[0]: r[1] for r in await conn.execute(text("SELECT id, input_file_count FROM jobs"))}
        assert counts == {job_id: 2}
    finally:
        await engine.dispose()
