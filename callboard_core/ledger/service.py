"""Posting to the ledger, the marketplace's money flows, and the reads and checks over it.

Every movement is `post`: one transaction of at least two signed entries that sum to zero, posted at most
once per idempotency key, applied to the accounts' cached balances by guarded compare-and-set. The flows
below are thin wrappers; each is a little T-account table (Dr = entry taken from the account, negative;
Cr = entry added to it, positive; see models.py for the sign convention) and its idempotency key.

top_up (TOPUP, `topup:<checkout id>`): money came in through the processor.
    PROCESSOR_CLEARING          -amount
    OWNER_AVAILABLE (owner)     +amount

reserve (RESERVE, `reserve:<job id>`): a paid job is published; its cost goes into escrow. Refused with
409 `insufficient_funds` when the available balance is short.
    OWNER_AVAILABLE (requester) -amount
    OWNER_RESERVED (requester)  +amount

release (RELEASE, `release:<job id>` or the caller's key): escrow goes back (no award, cancellation).
    OWNER_RESERVED (requester)  -amount
    OWNER_AVAILABLE (requester) +amount

capture (CAPTURE, `capture:<job id>` or the caller's key): the award pays the worker's owner and the fee.
    OWNER_RESERVED (requester)  -(pay + fee)
    OWNER_PAYABLE (worker owner) +pay
    PLATFORM_FEES                +fee        (no entry when the fee is 0)

payout_started (PAYOUT, `payout:<payout id>`): earnings leave for the owner's processor account.
    OWNER_PAYABLE               -amount
    OWNER_PAYOUT_IN_TRANSIT     +amount

payout_settled (PAYOUT_SETTLED) / payout_failed (PAYOUT_FAILED), both `payout_outcome:<payout id>`, so a
payout can end only one way (the other outcome under the same key is 409 `ledger_key_reused`):
    settled:  OWNER_PAYOUT_IN_TRANSIT -amount, PROCESSOR_CLEARING +amount
    failed:   OWNER_PAYOUT_IN_TRANSIT -amount, OWNER_PAYABLE      +amount

payout_reversed (PAYOUT_FAILED, `payout_reversal:<payout id>`): a settled payout's transfer came back from
the owner's processor account (the processor reversed it); the earnings are payable again.
    PROCESSOR_CLEARING          -amount
    OWNER_PAYABLE               +amount

refund (REFUND, `refund:<processor refund id>`): unspent top-up money goes back to the card.
    OWNER_AVAILABLE             -amount
    PROCESSOR_CLEARING          +amount

reverse_capture (CAPTURE_REVERSED, `capture_reversal:<job id>`): a dispute refunds an award whose payout was not
sent: the worker's owner's earnings and the fee go back to the requester's owner (guarded like any debit).
    OWNER_PAYABLE (worker owner) -pay
    PLATFORM_FEES                -fee        (no entry when the fee is 0)
    OWNER_AVAILABLE (requester)  +(pay + fee)

adjust (ADJUSTMENT, the caller's key, e.g. `adjust:<adjustment id>`): staff adjustment or dispute
resolution; a positive amount credits the owner, a negative one debits (guarded like any debit).
    OWNER_AVAILABLE             +amount
    PLATFORM_ADJUSTMENTS        -amount
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, cast

from sqlalchemy import Table, and_, bindparam, case, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from callboard_core import bus, clock
from callboard_core.db.engine import dialect_of
from callboard_core.db.rows import Rider, insert_rows, naming_its_tables, ride_at_commit, row_values
from callboard_core.errors import Conflict, ValidationFailed
from callboard_core.ids import new_id
from callboard_core.ledger import accounts
from callboard_core.ledger.events import LedgerPosted
from callboard_core.ledger.models import (
    OWNER_KINDS,
    AccountKind,
    Currency,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    TransactionKind,
)
from callboard_core.ledger.schemas import Balance, StatementEntry, StatementPage
from callboard_core.pagination import decode_cursor, encode_cursor

Leg = tuple[LedgerAccount, int]

MAX_KEY_LENGTH = 200
MAX_AMOUNT_CENTS = 10**13  # far above any real movement; keeps sums well inside BIGINT
STATEMENT_MAX_LIMIT = 100
# Transaction metadata an owner's statement may show; anything else (staff ids, the other party) stays inside.
STATEMENT_METADATA_KEYS = ("reason", "payoutId", "jobPaymentId", "payCents", "feeCents")

# Core tables: balance moves and checks are plain SQL, outside the ORM's unit of work.
_accounts = cast(Table, LedgerAccount.__table__)
_entries = cast(Table, LedgerEntry.__table__)


@functools.lru_cache(maxsize=16)
def _apply_all(legs: int, dialect: str) -> Any:
    """One UPDATE for a posting's `legs` accounts (a0.., amounts m0..), built once per number of legs (every
    posting runs it). Each row is guarded as a compare-and-set: a debit that would take a non-negative
    account below zero leaves that row out (and out of RETURNING). On PostgreSQL the rows are locked first,
    in id order, by the sub-select (a locking sub-select stays a sub-plan, run before the update): an UPDATE
    alone locks in whatever order its scan meets the rows, and two postings over one account (the platform's
    fee account is in every award) would deadlock."""
    ids = [bindparam(f"a{i}", type_=_accounts.c.id.type) for i in range(legs)]
    amount = case(
        *(
            (_accounts.c.id == ids[i], bindparam(f"m{i}", type_=_accounts.c.balance_cents.type))
            for i in range(legs)
        )
    )
    chosen: Any = _accounts.c.id.in_(ids)
    if dialect == "postgresql":
        chosen = _accounts.c.id.in_(
            select(_accounts.c.id).where(chosen).order_by(_accounts.c.id).with_for_update(key_share=True)
        )
    return (
        update(_accounts)
        .where(chosen, or_(_accounts.c.allow_negative, _accounts.c.balance_cents + amount >= 0))
        .values(balance_cents=_accounts.c.balance_cents + amount, version=_accounts.c.version + 1)
        .returning(_accounts.c.id, _accounts.c.balance_cents, _accounts.c.version)
    )


_transactions = cast(Table, LedgerTransaction.__table__)
_ENTRY_COLUMNS = (
    "id",
    "transaction_id",
    "account_id",
    "amount_cents",
    "account_version",
    "balance_after_cents",
    "created_at",
)
# `_posted_together` names each column: a column added to the entries must be added there too.
assert set(_ENTRY_COLUMNS) == {c.key for c in _entries.c}, "ledger_entries changed: see _posted_together"


@functools.lru_cache(maxsize=8)
def _posting_parts(legs: int) -> tuple[tuple[Any, Any, Any], Any]:
    """A posting of `legs` legs on PostgreSQL as data-modifying CTEs (its transaction's row, the legs' guarded
    balance moves, the entries written from what moved) and the count of legs moved: the parts of
    `_posted_together`, and of the commit's statement for a posting at commit (`db/rows.Rider`)."""
    txn = insert(_transactions).values(
        {c.key: bindparam(f"t_{c.key}", type_=c.type) for c in _transactions.c}
    )
    moved = _apply_all(legs, "postgresql").cte("posting_moved")

    def per_leg(prefix: str, column: Any) -> Any:
        return case(
            *(
                (
                    moved.c.id == bindparam(f"a{i}", type_=_accounts.c.id.type),
                    bindparam(f"{prefix}{i}", type_=column.type),
                )
                for i in range(legs)
            )
        )

    moved_count = select(func.count()).select_from(moved).scalar_subquery()
    entries = insert(_entries).from_select(
        list(_ENTRY_COLUMNS),
        select(
            per_leg("e", _entries.c.id),
            bindparam("t_id", type_=_transactions.c.id.type),
            moved.c.id,
            per_leg("m", _entries.c.amount_cents),
            moved.c.version,
            moved.c.balance_cents,
            bindparam("t_created_at", type_=_transactions.c.created_at.type),
        ).where(moved_count == legs),
    )
    return (txn.cte("posting_txn"), moved, entries.cte("posting_entries")), moved_count


@functools.lru_cache(maxsize=8)
def _posted_together(legs: int) -> Any:
    """PostgreSQL, a posting without a savepoint: the transaction's row, the legs' balance moves (`_apply_all`,
    its accounts locked in id order) and the entries in one statement of data-modifying CTEs, built once per
    number of legs; it returns the moved accounts as `_apply_all` does. The entries are written only when
    every leg moved: a refused debit leaves a transaction without entries, which the caller's rollback
    removes (and which the deferred zero-sum trigger would refuse at commit). Binds: t_<column> for the
    transaction, a<i>/m<i> for the legs (as `_apply_all`), e<i> for the entries' ids."""
    (txn, moved, entries), _ = _posting_parts(legs)
    return naming_its_tables(select(moved.c.id, moved.c.balance_cents, moved.c.version).add_cte(txn, entries))


def _invalid(message: str, field: str = "entries", code: str = "invalid_posting") -> ValidationFailed:
    # Top-level `validation_failed` like every 422; the specific code is the field error's.
    return ValidationFailed(message, errors=[{"field": field, "code": code, "message": message}])


def _validate(key: str, entries: Sequence[Leg]) -> list[Leg]:
    if not key or len(key) > MAX_KEY_LENGTH:
        raise _invalid(f"The idempotency key must be 1-{MAX_KEY_LENGTH} characters.", "key")
    if len(entries) < 2:
        raise _invalid("A posting needs at least two entries.")
    for account, amount in entries:
        # bool is an int; a float or Decimal amount is a bug upstream, never rounded here.
        if type(amount) is not int or amount == 0 or abs(amount) > MAX_AMOUNT_CENTS:
            raise _invalid(
                f"Entry amounts are non-zero integer cents, at most {MAX_AMOUNT_CENTS} either way "
                f"(got {amount!r} for {account.kind})."
            )
    ids = [account.id for account, _ in entries]
    if None in ids or len(set(ids)) != len(ids):
        raise _invalid("Each entry is on a distinct, existing account.")
    if len({account.currency for account, _ in entries}) != 1:
        raise _invalid("All entries of a posting are in one currency.")
    total = sum(amount for _, amount in entries)
    if total != 0:
        raise _invalid(f"A posting's entries sum to zero (these sum to {total}).")
    # Accounts are locked (updated) in id order, so two postings over the same accounts cannot deadlock.
    return sorted(entries, key=lambda leg: leg[0].id)


async def _by_key(session: AsyncSession, key: str) -> LedgerTransaction | None:
    return await session.scalar(
        select(LedgerTransaction)
        .where(LedgerTransaction.idempotency_key == key)
        .execution_options(populate_existing=True)
    )


async def _same_or_conflict(
    session: AsyncSession, existing: LedgerTransaction, kind: str, legs: Sequence[Leg]
) -> LedgerTransaction:
    """A retry of the same posting gets the transaction back; another posting under the key is a 409."""
    posted = (
        await session.execute(
            select(_entries.c.account_id, _entries.c.amount_cents).where(
                _entries.c.transaction_id == existing.id
            )
        )
    ).all()
    same_entries = Counter((a, int(n)) for a, n in posted) == Counter((a.id, n) for a, n in legs)
    if existing.kind == kind and same_entries:
        return existing
    raise Conflict(
        f"Ledger key {existing.idempotency_key!r} was already used for another posting.",
        code="ledger_key_reused",
        key=existing.idempotency_key,
        transaction_id=existing.id,
    )


async def _apply(session: AsyncSession, legs: Sequence[Leg]) -> list[tuple[int, int]]:
    """Move every leg's cached balance by its amount and its version by one, in one statement: (balance,
    version) after it, per leg. A debit that would take a non-negative account below zero moves nothing of
    its account and is refused (the caller's savepoint or transaction then undoes the other legs). The flag
    is read from the row, not trusted from the object."""
    params: dict[str, Any] = {}
    for i, (account, amount) in enumerate(legs):
        params[f"a{i}"], params[f"m{i}"] = account.id, amount
    moved = {
        row[0]: (int(row[1]), int(row[2]))
        for row in await session.execute(_apply_all(len(legs), dialect_of(session)), params)
    }
    if len(moved) == len(legs):
        return [moved[account.id] for account, _ in legs]
    await _refused(session, legs, moved)


async def _refused(session: AsyncSession, legs: Sequence[Leg], moved: Mapping[str, Any]) -> NoReturn:
    """409 `insufficient_funds` for the first leg the guarded update left out."""
    # The first refused leg in id order: the one the legs' own order would have stopped at.
    account, amount = next((a, m) for a, m in legs if a.id not in moved)
    balance = await session.scalar(select(_accounts.c.balance_cents).where(_accounts.c.id == account.id))
    if balance is None:
        raise RuntimeError(f"ledger account {account.id} does not exist")
    balance = int(balance)
    raise Conflict(
        f"Insufficient funds: {account.kind} holds {balance} cents, {-amount} are needed "
        f"(short by {-(balance + amount)}).",
        code="insufficient_funds",
        account_kind=account.kind,
        balance_cents=balance,
        required_cents=-amount,
        shortfall_cents=-(balance + amount),
        currency=account.currency,
    )


async def post(
    session: AsyncSession,
    *,
    key: str,
    kind: TransactionKind | str,
    entries: Sequence[Leg],
    job_id: str | None = None,
    user_id: str | None = None,
    processor_ref: str | None = None,
    metadata: dict[str, Any] | None = None,
    savepoint: bool = True,
    reverses_id: str | None = None,
    at_commit: bool = False,
    refused: Callable[[], Exception] | None = None,
) -> LedgerTransaction:
    """Post one balanced transaction in the caller's database transaction (flush only).

    Idempotent by `key`: posting it again returns the existing transaction when kind and entries are the
    same, and raises 409 `ledger_key_reused` otherwise. Concurrent posts of one key land once (the unique
    index decides; the loser reads the winner's row). A refused debit (409 `insufficient_funds`) rolls the
    savepoint back: no transaction, no entry, no balance change remains.

    `savepoint=False` is for a caller whose whole transaction ends with any failure of the posting (a
    publish's reserve, an award's capture: their keys cannot repeat, the job row being locked in its
    state): no savepoint (two statements less), and a refused debit or a repeated key simply raises, for
    the caller's unit of work to roll everything back.

    `at_commit` (with `savepoint=False`; PostgreSQL): the posting is written by the transaction's last
    statement (`_post_at_commit`), for a caller whose debit cannot be refused (an award's capture of its
    reserved escrow), or whose refusal needs no details but `refused()`, raised from the commit (default 409
    `insufficient_funds`): a publish's reserve when the balance it read covers it."""
    kind = TransactionKind(kind)
    legs = _validate(key, entries)
    # No look-up of the key first: a repeat is rare, and the unique index finds it (below) for one
    # statement less on every first posting.
    at = clock.now()
    txn = LedgerTransaction(
        id=new_id("ltx"),
        kind=kind,
        idempotency_key=key,
        job_id=job_id,
        user_id=user_id,
        processor_ref=processor_ref,
        reverses_id=reverses_id,
        meta=dict(metadata or {}),
        created_at=at,
    )
    if not savepoint and dialect_of(session) == "postgresql":
        if at_commit:
            return await _post_at_commit(session, txn, legs, refused or _posting_refused)
        return await _post_together(session, txn, legs)
    await session.flush()  # the caller's pending rows must not ride in (and roll back with) our savepoint
    balances: list[tuple[LedgerAccount, tuple[int, int]]] = []
    try:
        async with session.begin_nested() if savepoint else contextlib.nullcontext():
            # The key first: a duplicate is found before any balance moves (PostgreSQL: the insert waits
            # for a concurrent holder of the key to finish, then fails if it committed).
            await insert_rows(session, [txn])  # append-only rows: no unit-of-work flush (db/rows.py)
            balances = list(zip((a for a, _ in legs), await _apply(session, legs), strict=True))
            written = [
                (
                    account,
                    LedgerEntry(
                        transaction_id=txn.id,
                        account_id=account.id,
                        amount_cents=amount,
                        account_version=version,
                        balance_after_cents=balance,
                        created_at=at,
                    ),
                )
                for (account, amount), (_, (balance, version)) in zip(legs, balances, strict=True)
            ]
            await insert_rows(session, [entry for _, entry in written])
    except IntegrityError:
        if not savepoint:
            raise
        existing = await _by_key(session, key)
        if existing is None:
            raise
        return await _same_or_conflict(session, existing, kind, legs)
    return await _posted(session, txn, balances, [entry for _, entry in written])


def _together_binds(txn: LedgerTransaction, legs: Sequence[Leg]) -> tuple[list[LedgerEntry], dict[str, Any]]:
    """The entries a posting in one statement writes (their ids known now) and its binds (`_posting_parts`)."""
    entries = [
        LedgerEntry(
            transaction_id=txn.id, account_id=account.id, amount_cents=amount, created_at=txn.created_at
        )
        for account, amount in legs
    ]
    params = row_values(txn, prefix="t_")
    for i, ((account, amount), entry) in enumerate(zip(legs, entries, strict=True)):
        params[f"a{i}"], params[f"m{i}"], params[f"e{i}"] = account.id, amount, row_values(entry)["id"]
    return entries, params


async def _post_together(
    session: AsyncSession, txn: LedgerTransaction, legs: Sequence[Leg]
) -> LedgerTransaction:
    """`post` without a savepoint on PostgreSQL: one statement (`_posted_together`) where the other path
    sends three. A repeated key raises IntegrityError and a refused debit 409 `insufficient_funds`, as
    there, for the caller's unit of work to roll everything back."""
    await session.flush()  # the caller's changes go first, as on the other path (no statement when none)
    entries, params = _together_binds(txn, legs)
    moved = {
        row[0]: (int(row[1]), int(row[2]))
        for row in await session.execute(_posted_together(len(legs)), params)
    }
    if len(moved) < len(legs):
        await _refused(session, legs, moved)
    balances = [(account, moved[account.id]) for account, _ in legs]
    for entry, (_, (balance, version)) in zip(entries, balances, strict=True):
        entry.account_version, entry.balance_after_cents = version, balance
    return await _posted(session, txn, balances, entries)


def _posting_refused() -> Conflict:
    return Conflict(
        "The ledger refused the posting when the transaction committed: an account it debits would have "
        "gone below zero. Nothing was stored; read the balance, then try again.",
        code="insufficient_funds",
    )


async def _post_at_commit(
    session: AsyncSession, txn: LedgerTransaction, legs: Sequence[Leg], refused: Callable[[], Exception]
) -> LedgerTransaction:
    """`_post_together`'s statement as CTEs of the transaction's last one (`db/rows.ride_at_commit`): the
    accounts it locks (an award's: the payer's escrow, the payee's payable, the platform's fee account) are
    then held only from that statement to the commit, not through the rest of the request, and the posting
    costs no round trip of its own. Any earlier statement that names a ledger table writes it first. Its
    listeners hear it now, with the entries it will write (their running balances and versions are the
    database's, set by that statement: none of the listeners reads them), and the accounts the caller holds
    keep their balances as read. A leg that does not move fails the commit with `refused()`, nothing
    stored."""
    # The caller's changes go first, as on the other paths: a later read that refreshes its objects
    # (populate_existing) would otherwise drop what they had not flushed (no statement when none).
    await session.flush()
    entries, params = _together_binds(txn, legs)
    rider = Rider(build=_posting_parts, args=(len(legs),), params=params, expected=len(legs), refused=refused)
    await ride_at_commit(session, rider)
    await bus.publish(
        session,
        LedgerPosted(
            txn, tuple((account, e) for (account, _), e in zip(legs, entries, strict=True)), at_commit=True
        ),
    )
    return txn


async def _posted(
    session: AsyncSession,
    txn: LedgerTransaction,
    balances: Sequence[tuple[LedgerAccount, tuple[int, int]]],
    entries: Sequence[LedgerEntry],
) -> LedgerTransaction:
    # The objects the caller holds show the new cache without a reload (and without a dirty flag).
    for account, (balance, version) in balances:
        set_committed_value(account, "balance_cents", balance)
        set_committed_value(account, "version", version)
    await bus.publish(
        session,
        LedgerPosted(txn, tuple((account, e) for (account, _), e in zip(balances, entries, strict=True))),
    )
    return txn


async def entries_of(session: AsyncSession, transaction_id: str) -> list[LedgerEntry]:
    rows = await session.scalars(
        select(LedgerEntry).where(LedgerEntry.transaction_id == transaction_id).order_by(LedgerEntry.id)
    )
    return list(rows)


# --- The marketplace's flows (see the module docstring) -------------------------------------------------


def _positive(amount_cents: int, field: str = "amountCents") -> int:
    if type(amount_cents) is not int or amount_cents <= 0:
        raise _invalid("The amount is a positive integer number of cents.", field, "invalid_amount")
    return amount_cents


@dataclass(frozen=True)
class Flow:
    """A two-leg movement: `amount` leaves `source` and arrives in `target`. Owner accounts are the
    posting user's; the others are the platform's."""

    source: AccountKind
    target: AccountKind


# The flows, by kind (CAPTURE has three legs and ADJUSTMENT a signed amount: their functions say so).
FLOWS: dict[TransactionKind, Flow] = {
    TransactionKind.TOPUP: Flow(AccountKind.PROCESSOR_CLEARING, AccountKind.OWNER_AVAILABLE),
    TransactionKind.RESERVE: Flow(AccountKind.OWNER_AVAILABLE, AccountKind.OWNER_RESERVED),
    TransactionKind.RELEASE: Flow(AccountKind.OWNER_RESERVED, AccountKind.OWNER_AVAILABLE),
    TransactionKind.REFUND: Flow(AccountKind.OWNER_AVAILABLE, AccountKind.PROCESSOR_CLEARING),
    TransactionKind.PAYOUT: Flow(AccountKind.OWNER_PAYABLE, AccountKind.OWNER_PAYOUT_IN_TRANSIT),
    TransactionKind.PAYOUT_SETTLED: Flow(AccountKind.OWNER_PAYOUT_IN_TRANSIT, AccountKind.PROCESSOR_CLEARING),
    TransactionKind.PAYOUT_FAILED: Flow(AccountKind.OWNER_PAYOUT_IN_TRANSIT, AccountKind.OWNER_PAYABLE),
    TransactionKind.PAYOUT_REVERSED: Flow(AccountKind.PROCESSOR_CLEARING, AccountKind.OWNER_PAYABLE),
}


async def flow(
    session: AsyncSession,
    kind: TransactionKind,
    *,
    user_id: str,
    amount_cents: int,
    key: str,
    accounts_read: Sequence[LedgerAccount | None] = (),
    **posting: Any,
) -> LedgerTransaction:
    """Post `kind`'s flow of `amount_cents` for `user_id` (the legs from FLOWS; `posting`: post's other
    fields: job, processor reference, metadata, what it reverses). `accounts_read`: the flow's source and
    target accounts as the caller read them (`with_flow_accounts`), checked as `capture` checks its own."""
    amount = _positive(amount_cents)
    legs = FLOWS[kind]
    source, target = await accounts.several(
        session,
        *((k, user_id if k.is_owner else None) for k in (legs.source, legs.target)),
        read=accounts_read,
    )
    return await post(
        session, key=key, kind=kind, entries=[(source, -amount), (target, amount)], user_id=user_id, **posting
    )


def _payout_meta(payout_id: str, reason: str | None = None) -> dict[str, Any]:
    return {"payoutId": payout_id, **({"reason": reason} if reason else {})}


async def top_up(
    session: AsyncSession, *, user_id: str, amount_cents: int, processor_ref: str, key: str | None = None
) -> LedgerTransaction:
    return await flow(
        session,
        TransactionKind.TOPUP,
        user_id=user_id,
        amount_cents=amount_cents,
        key=key or f"topup:{processor_ref}",
        processor_ref=processor_ref,
    )


async def reserve(
    session: AsyncSession,
    *,
    user_id: str,
    amount_cents: int,
    job_id: str,
    key: str | None = None,
    metadata: dict[str, Any] | None = None,
    savepoint: bool = True,
    accounts_read: Sequence[LedgerAccount | None] = (),
    at_commit: bool = False,
    refused: Callable[[], Exception] | None = None,
) -> LedgerTransaction:
    """`amount_cents` of the owner's available balance held in escrow for a job (`at_commit`, `refused`:
    as `post`'s, for a publish whose read balance covers it)."""
    return await flow(
        session,
        TransactionKind.RESERVE,
        at_commit=at_commit,
        refused=refused,
        user_id=user_id,
        amount_cents=amount_cents,
        key=key or f"reserve:{job_id}",
        job_id=job_id,
        metadata=metadata,
        savepoint=savepoint,
        accounts_read=accounts_read,
    )


async def release(
    session: AsyncSession,
    *,
    user_id: str,
    amount_cents: int,
    job_id: str,
    key: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> LedgerTransaction:
    return await flow(
        session,
        TransactionKind.RELEASE,
        user_id=user_id,
        amount_cents=amount_cents,
        key=key or f"release:{job_id}",
        job_id=job_id,
        metadata=metadata,
    )


def with_flow_accounts(statement: Any, kind: TransactionKind, owner: Any, when: Any) -> Any:
    """`with_capture_accounts` for `flow(kind)`: its source and target accounts of the owner in column
    `owner` (a platform account where the flow names one), in the order `flow(accounts_read=...)` takes."""
    legs = FLOWS[kind]
    wanted = [(k, owner if k.is_owner else None) for k in (legs.source, legs.target)]
    return accounts.read_with(statement, wanted, when)


def with_capture_accounts(statement: Any, payer: Any, worker_owner: Any, when: Any) -> Any:
    """A caller's read (`statement`) with the accounts `capture` will move, in the order
    `capture(accounts_read=...)` takes them: the payer's reserved account (the user in column `payer`), the
    worker's owner's payable one (column `worker_owner`), the platform's fees; joined when `when` holds
    (`accounts.read_with`)."""
    kinds = (AccountKind.OWNER_RESERVED, AccountKind.OWNER_PAYABLE, AccountKind.PLATFORM_FEES)
    return accounts.read_with(statement, list(zip(kinds, (payer, worker_owner, None), strict=True)), when)


async def _award_legs(
    session: AsyncSession,
    requester: tuple[AccountKind, str],
    worker_owner_user_id: str,
    pay: int,
    fee: int,
    sign: int,
    read: Sequence[LedgerAccount | None] = (),
) -> list[Leg]:
    """An award's three legs (sign 1) or their reversal (sign -1): the requester's account gives pay + fee,
    the worker's owner gets the pay, the platform the fee (no fee leg for a zero fee). `read`: the
    caller's read of those accounts (`with_capture_accounts`)."""
    wanted: list[tuple[AccountKind, str | None]] = [
        requester,
        (AccountKind.OWNER_PAYABLE, worker_owner_user_id),
    ]
    if fee:
        wanted.append((AccountKind.PLATFORM_FEES, None))
    found = await accounts.several(session, *wanted, read=read)
    return list(zip(found, [-sign * (pay + fee), sign * pay, sign * fee][: len(found)], strict=True))


async def capture(
    session: AsyncSession,
    *,
    requester_user_id: str,
    worker_owner_user_id: str,
    pay_cents: int,
    fee_cents: int,
    job_id: str,
    key: str | None = None,
    metadata: dict[str, Any] | None = None,
    savepoint: bool = True,
    accounts_read: Sequence[LedgerAccount | None] = (),
    at_commit: bool = False,
) -> LedgerTransaction:
    """`accounts_read`: the requester's reserved, the worker owner's payable and the platform's fee
    accounts as the caller read them (`with_capture_accounts`, None where missing), saving the posting's
    read; each is checked against what the capture would read, and read again if it is not that."""
    pay = _positive(pay_cents, "payCents")
    if type(fee_cents) is not int or fee_cents < 0:
        raise _invalid("The fee is a non-negative integer number of cents.", "feeCents", "invalid_amount")
    legs = await _award_legs(
        session,
        (AccountKind.OWNER_RESERVED, requester_user_id),
        worker_owner_user_id,
        pay,
        fee_cents,
        1,
        accounts_read,
    )
    return await post(
        session,
        key=key or f"capture:{job_id}",
        kind=TransactionKind.CAPTURE,
        entries=legs,
        job_id=job_id,
        user_id=requester_user_id,
        metadata={
            **(metadata or {}),
            "workerOwnerId": worker_owner_user_id,
            "payCents": pay,
            "feeCents": fee_cents,
        },
        savepoint=savepoint,
        at_commit=at_commit,
    )


async def reverse_capture(
    session: AsyncSession,
    *,
    requester_user_id: str,
    worker_owner_user_id: str,
    pay_cents: int,
    fee_cents: int,
    job_id: str,
    metadata: dict[str, Any] | None = None,
) -> LedgerTransaction:
    pay = _positive(pay_cents, "payCents")
    legs = await _award_legs(
        session, (AccountKind.OWNER_AVAILABLE, requester_user_id), worker_owner_user_id, pay, fee_cents, -1
    )
    captured = await _by_key(session, f"capture:{job_id}")
    return await post(
        session,
        key=f"capture_reversal:{job_id}",
        kind=TransactionKind.CAPTURE_REVERSED,
        entries=legs,
        job_id=job_id,
        user_id=requester_user_id,
        reverses_id=captured.id if captured is not None else None,
        metadata={
            **(metadata or {}),
            "workerOwnerId": worker_owner_user_id,
            "payCents": pay,
            "feeCents": fee_cents,
        },
        savepoint=False,
    )


async def payout_started(
    session: AsyncSession,
    *,
    user_id: str,
    amount_cents: int,
    payout_id: str,
    processor_ref: str | None = None,
) -> LedgerTransaction:
    return await flow(
        session,
        TransactionKind.PAYOUT,
        user_id=user_id,
        amount_cents=amount_cents,
        key=f"payout:{payout_id}",
        processor_ref=processor_ref,
        metadata=_payout_meta(payout_id),
    )


async def payout_settled(
    session: AsyncSession,
    *,
    user_id: str,
    amount_cents: int,
    payout_id: str,
    processor_ref: str | None = None,
) -> LedgerTransaction:
    return await flow(
        session,
        TransactionKind.PAYOUT_SETTLED,
        user_id=user_id,
        amount_cents=amount_cents,
        key=f"payout_outcome:{payout_id}",
        processor_ref=processor_ref,
        metadata=_payout_meta(payout_id),
    )


async def payout_failed(
    session: AsyncSession,
    *,
    user_id: str,
    amount_cents: int,
    payout_id: str,
    processor_ref: str | None = None,
    reason: str | None = None,
) -> LedgerTransaction:
    # The same key as the settlement: an attempt's outcome is posted once, whichever it is.
    return await flow(
        session,
        TransactionKind.PAYOUT_FAILED,
        user_id=user_id,
        amount_cents=amount_cents,
        key=f"payout_outcome:{payout_id}",
        processor_ref=processor_ref,
        metadata=_payout_meta(payout_id, reason),
    )


async def payout_reversed(
    session: AsyncSession,
    *,
    user_id: str,
    amount_cents: int,
    payout_id: str,
    processor_ref: str | None = None,
    reason: str | None = None,
) -> LedgerTransaction:
    """The processor took a settled transfer back: the money is payable to the owner again. Its own kind,
    linked to the settlement it undoes."""
    settled = await _by_key(session, f"payout_outcome:{payout_id}")
    return await flow(
        session,
        TransactionKind.PAYOUT_REVERSED,
        user_id=user_id,
        amount_cents=amount_cents,
        key=f"payout_reversal:{payout_id}",
        reverses_id=settled.id if settled is not None else None,
        processor_ref=processor_ref,
        metadata=_payout_meta(payout_id, reason),
    )


async def refund(
    session: AsyncSession, *, user_id: str, amount_cents: int, processor_ref: str, key: str | None = None
) -> LedgerTransaction:
    return await flow(
        session,
        TransactionKind.REFUND,
        user_id=user_id,
        amount_cents=amount_cents,
        key=key or f"refund:{processor_ref}",
        processor_ref=processor_ref,
    )


async def adjust(
    session: AsyncSession,
    *,
    user_id: str,
    amount_cents: int,
    key: str,
    reason: str,
    staff_user_id: str | None = None,
    job_id: str | None = None,
) -> LedgerTransaction:
    if type(amount_cents) is not int or amount_cents == 0:
        raise _invalid(
            "The adjustment is a non-zero integer number of cents.", "amountCents", "invalid_amount"
        )
    if not reason.strip():
        raise _invalid("An adjustment needs a reason.", "reason", "reason_required")
    meta: dict[str, Any] = {"reason": reason}
    if staff_user_id:
        meta["staffUserId"] = staff_user_id
    return await post(
        session,
        key=key,
        kind=TransactionKind.ADJUSTMENT,
        entries=[
            (await accounts.owner(session, AccountKind.OWNER_AVAILABLE, user_id), amount_cents),
            (await accounts.platform(session, AccountKind.PLATFORM_ADJUSTMENTS), -amount_cents),
        ],
        job_id=job_id,
        user_id=user_id,
        metadata=meta,
    )


# --- Reads -------------------------------------------------------------------------------------------------


async def balances(session: AsyncSession, user_id: str, currency: str = Currency.USD) -> Balance:
    """The owner's balances in one currency from the cached account balances (zero for accounts not yet
    created). The currency is the accounts', never a literal of the read."""
    rows = (
        await session.execute(
            select(_accounts.c.kind, _accounts.c.balance_cents).where(
                _accounts.c.holder_id == user_id,
                _accounts.c.kind.in_(OWNER_KINDS),
                _accounts.c.currency == currency,
            )
        )
    ).all()
    by_kind = {kind: int(cents) for kind, cents in rows}
    available = by_kind.get(AccountKind.OWNER_AVAILABLE, 0)
    reserved = by_kind.get(AccountKind.OWNER_RESERVED, 0)
    return Balance(
        user_id=user_id,
        currency=currency,
        balance_cents=available + reserved,
        reserved_cents=reserved,
        available_cents=available,
        payable_cents=by_kind.get(AccountKind.OWNER_PAYABLE, 0),
        payout_in_transit_cents=by_kind.get(AccountKind.OWNER_PAYOUT_IN_TRANSIT, 0),
    )


async def statement(
    session: AsyncSession, user_id: str, *, cursor: str | None = None, limit: int = 50
) -> StatementPage:
    """The owner's entries on all of their accounts, newest first, keyset-paged on (created_at, id).

    Each account's page is read from its own index range (at most limit + 1 rows each) and the few lists are
    merged here, so a page costs the same however long the owner's history is."""
    if not 1 <= limit <= STATEMENT_MAX_LIMIT:
        raise _invalid(f"limit is 1-{STATEMENT_MAX_LIMIT}.", "limit", "invalid_limit")
    after: tuple[datetime, str] | None = decode_cursor(cursor) if cursor else None
    owned = (
        await session.execute(
            select(_accounts.c.id, _accounts.c.kind).where(
                _accounts.c.holder_id == user_id, _accounts.c.kind.in_(OWNER_KINDS)
            )
        )
    ).all()
    rows: list[Any] = []
    for account_id, account_kind in owned:
        query = (
            select(
                LedgerEntry.id,
                LedgerEntry.amount_cents,
                LedgerEntry.created_at,
                LedgerTransaction.id.label("transaction_id"),
                LedgerTransaction.kind,
                LedgerTransaction.job_id,
                LedgerTransaction.processor_ref,
                LedgerTransaction.meta,
            )
            .join(LedgerTransaction, LedgerTransaction.id == LedgerEntry.transaction_id)
            .where(LedgerEntry.account_id == account_id)
            .order_by(LedgerEntry.created_at.desc(), LedgerEntry.id.desc())
            .limit(limit + 1)
        )
        if after is not None:
            at, ident = after
            query = query.where(
                or_(LedgerEntry.created_at < at, and_(LedgerEntry.created_at == at, LedgerEntry.id < ident))
            )
        rows.extend((AccountKind(account_kind), row) for row in (await session.execute(query)).all())
    rows.sort(key=lambda pair: (pair[1].created_at, pair[1].id), reverse=True)
    page = rows[:limit]
    entries = []
    for account_kind, row in page:
        meta: dict[str, Any] = {"account": account_kind.short}
        if row.job_id:
            meta["jobId"] = row.job_id
        meta.update({k: v for k, v in (row.meta or {}).items() if k in STATEMENT_METADATA_KEYS})
        entries.append(
            StatementEntry(
                id=row.id,
                kind=row.kind,
                amount_cents=int(row.amount_cents),
                task_contract_id=None,
                transaction_id=row.transaction_id,
                processor_ref=row.processor_ref,
                metadata=meta,
                created_at=row.created_at,
            )
        )
    last = page[-1][1] if page else None
    next_cursor = encode_cursor(last.created_at, last.id) if last is not None and len(rows) > limit else None
    return StatementPage(entries=entries, next_cursor=next_cursor)


# --- The invariant check -----------------------------------------------------------------------------------


async def verify(session: AsyncSession) -> list[str]:
    """Every problem with the books, one line each; empty when they are sound. Full scans: a check for the
    test suite and an operator's job, not for a request."""
    problems: list[str] = []
    sums = (
        select(
            _transactions.c.id,
            func.count(_entries.c.id).label("n"),
            func.coalesce(func.sum(_entries.c.amount_cents), 0).label("total"),
            func.count(func.distinct(_accounts.c.currency)).label("currencies"),
        )
        .select_from(_transactions)
        .outerjoin(_entries, _entries.c.transaction_id == _transactions.c.id)
        .outerjoin(_accounts, _accounts.c.id == _entries.c.account_id)
        .group_by(_transactions.c.id)
    )
    for txn_id, count, total, currencies in (await session.execute(sums)).all():
        if int(total) != 0:
            problems.append(f"transaction {txn_id}: entries sum to {int(total)}, not 0")
        if count < 2:
            problems.append(f"transaction {txn_id}: {count} entries (a posting has at least two)")
        if currencies > 1:
            problems.append(f"transaction {txn_id}: entries in {currencies} currencies")
    orphans = await session.scalar(
        select(func.count())
        .select_from(_entries)
        .where(~select(_transactions.c.id).where(_transactions.c.id == _entries.c.transaction_id).exists())
    )
    if orphans:
        problems.append(f"{orphans} entries belong to no transaction")
    for (entry_id,) in (
        await session.execute(select(_entries.c.id).where(_entries.c.amount_cents == 0))
    ).all():
        problems.append(f"entry {entry_id}: amount 0")
    # Each entry's recorded balance is the running sum of its account's entries in version order, and the
    # versions run 1, 2, 3, … without a gap.
    by_account, in_order = _entries.c.account_id, _entries.c.account_version
    running = select(
        _entries.c.id,
        _entries.c.account_version,
        _entries.c.balance_after_cents,
        func.sum(_entries.c.amount_cents).over(partition_by=by_account, order_by=in_order).label("running"),
        func.row_number().over(partition_by=by_account, order_by=in_order).label("position"),
    ).subquery()
    for entry_id, version, recorded, total, position in (
        await session.execute(
            select(running).where(
                or_(
                    running.c.balance_after_cents.is_(None),
                    running.c.balance_after_cents != running.c.running,
                    running.c.account_version != running.c.position,
                )
            )
        )
    ).all():
        problems.append(
            f"entry {entry_id}: version {version} records balance {recorded}, but it is entry {position} "
            f"of its account and the running sum is {int(total)}"
        )
    derived = (
        select(
            _entries.c.account_id,
            func.sum(_entries.c.amount_cents).label("total"),
            func.count().label("entries"),
        )
        .group_by(_entries.c.account_id)
        .subquery()
    )
    cached = select(
        _accounts.c.id,
        _accounts.c.kind,
        _accounts.c.allow_negative,
        _accounts.c.balance_cents,
        func.coalesce(derived.c.total, 0),
        _accounts.c.version,
        func.coalesce(derived.c.entries, 0),
    ).outerjoin(derived, derived.c.account_id == _accounts.c.id)
    for account_id, kind, allow_negative, balance, total, version, count in (
        await session.execute(cached)
    ).all():
        balance, total = int(balance), int(total)
        if balance != total:
            problems.append(
                f"account {account_id} ({kind}): cached balance {balance} but its entries sum to {total}"
            )
        if int(version) != int(count):
            problems.append(f"account {account_id} ({kind}): version {version} but {count} entries")
        if not allow_negative and min(balance, total) < 0:
            problems.append(
                f"account {account_id} ({kind}) may not be negative: balance {min(balance, total)}"
            )
    return problems
