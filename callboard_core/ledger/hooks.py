"""What other money packages do when the ledger posts: documents issue a receipt for a top-up, payouts
queue the worker's payout for a capture. The ledger knows no package that listens to it.

A hook runs inside `post`, in the caller's database transaction, right after a transaction is written
for the first time (an idempotent replay of the key runs no hook): what it writes commits or rolls back
with the posting. Registration is explicit (`Core.build` calls each package's `register`) and idempotent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.ledger.models import LedgerTransaction, TransactionKind

PostHook = Callable[[AsyncSession, LedgerTransaction], Awaitable[None]]

_hooks: dict[TransactionKind, list[PostHook]] = {}


def on_posted(kind: TransactionKind, hook: PostHook) -> None:
    """Run `hook` after every new transaction of `kind` (registering the same hook twice is a no-op)."""
    listeners = _hooks.setdefault(TransactionKind(kind), [])
    if hook not in listeners:
        listeners.append(hook)


async def run(session: AsyncSession, txn: LedgerTransaction) -> None:
    for hook in _hooks.get(TransactionKind(txn.kind), ()):
        await hook(session, txn)
