"""Ledger accounts: get-or-create, race-safe on both databases."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, and_, bindparam, literal, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from callboard_core.errors import ValidationFailed
from callboard_core.ledger.models import (
    NEGATIVE_ALLOWED,
    PLATFORM_HOLDER,
    AccountKind,
    Currency,
    LedgerAccount,
)


def _holder(kind: AccountKind, user_id: str | None) -> str:
    if kind.is_owner:
        if not user_id:
            raise ValueError(f"{kind} is an owner account: a user id is required")
        return user_id
    if user_id is not None:
        raise ValueError(f"{kind} is a platform account: it has no user")
    return PLATFORM_HOLDER


def _currency(currency: str) -> Currency:
    try:
        return Currency(currency)
    except ValueError:
        raise ValidationFailed(
            f"Currency {currency!r} is not supported (only usd).", code="unsupported_currency"
        ) from None


async def find(
    session: AsyncSession, kind: AccountKind, user_id: str | None = None, currency: str = Currency.USD
) -> LedgerAccount | None:
    kind = AccountKind(kind)
    return await session.scalar(
        select(LedgerAccount).where(
            LedgerAccount.kind == kind,
            LedgerAccount.holder_id == _holder(kind, user_id),
            LedgerAccount.currency == _currency(currency),
        )
    )


async def get_or_create(
    session: AsyncSession, kind: AccountKind, user_id: str | None = None, currency: str = Currency.USD
) -> LedgerAccount:
    """The account, created at zero if missing. Two callers creating it at once both get the one row: the
    insert runs in a savepoint, and the loser of the unique (kind, holder_id, currency) index reads the
    winner's row (on PostgreSQL its insert waits for the winner's commit, then fails)."""
    kind = AccountKind(kind)
    existing = await find(session, kind, user_id, currency)
    if existing is not None:
        return existing
    account = LedgerAccount(
        kind=kind,
        holder_id=_holder(kind, user_id),
        currency=_currency(currency),
        allow_negative=kind in NEGATIVE_ALLOWED,
        balance_cents=0,
    )
    await session.flush()  # the caller's pending rows must not ride in (and roll back with) our savepoint
    try:
        async with session.begin_nested():
            session.add(account)
            await session.flush()
    except IntegrityError:
        existing = await find(session, kind, user_id, currency)
        if existing is None:
            raise
        return existing
    return account


async def owner(session: AsyncSession, kind: AccountKind, user_id: str) -> LedgerAccount:
    if not AccountKind(kind).is_owner:
        raise ValueError(f"{kind} is not an owner account")
    return await get_or_create(session, kind, user_id)


async def platform(session: AsyncSession, kind: AccountKind) -> LedgerAccount:
    return await get_or_create(session, kind)


@functools.cache
def _several(n: int) -> Any:
    """The read of n accounts by (kind, holder): `k0`, `h0`, … bound; built once per n."""
    return select(LedgerAccount).where(
        or_(
            *(
                and_(LedgerAccount.kind == bindparam(f"k{i}"), LedgerAccount.holder_id == bindparam(f"h{i}"))
                for i in range(n)
            )
        ),
        LedgerAccount.currency == Currency.USD,
    )


def read_with(statement: Any, wanted: Sequence[tuple[AccountKind, Any]], when: ColumnElement[bool]) -> Any:
    """A caller's read (`statement`) with the accounts a posting will move: for each (kind, holder), where the
    holder is a column naming the user (None: the platform), an alias of LedgerAccount added as a further
    entity, outer-joined on that account when `when` holds. Pass the rows found (None where missing), in
    this order, to the posting (`capture(accounts_read=...)`), which checks each and makes a missing one."""
    for kind, holder in wanted:
        alias = aliased(LedgerAccount, name=f"joined_{kind.value}")
        holder_id = literal(PLATFORM_HOLDER) if holder is None else holder
        statement = statement.add_columns(alias).outerjoin(
            alias,
            and_(when, alias.kind == kind, alias.holder_id == holder_id, alias.currency == Currency.USD),
        )
    return statement


async def several(
    session: AsyncSession,
    *wanted: tuple[AccountKind, str | None],
    read: Sequence[LedgerAccount | None] = (),
) -> list[LedgerAccount]:
    """The accounts (kind, user id; None for a platform account), in one statement, each created at zero if
    missing: a posting that moves three accounts reads them once, not three times. `read`: the caller's own
    read of them (`read_with`), in the same order; used when it holds every one, as asked (no statement)."""
    keys = [(AccountKind(kind), _holder(AccountKind(kind), user_id)) for kind, user_id in wanted]
    if len(read) >= len(keys) and all(
        account is not None
        and (account.kind, account.holder_id, account.currency) == (kind, holder, Currency.USD)
        for account, (kind, holder) in zip(read, keys, strict=False)
    ):
        return [cast(LedgerAccount, account) for account in read[: len(keys)]]
    params = {}
    for i, (kind, holder) in enumerate(keys):
        params[f"k{i}"], params[f"h{i}"] = str(kind), holder
    rows = await session.scalars(_several(len(keys)), params)
    found = {(AccountKind(row.kind), row.holder_id): row for row in rows}
    return [
        found.get((kind, holder)) or await get_or_create(session, kind, user_id)
        for (kind, holder), (_, user_id) in zip(keys, wanted, strict=True)
    ]
