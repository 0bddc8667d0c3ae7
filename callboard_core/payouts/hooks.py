"""Who hears of a failed payout (BOUNTY_PAYOUT_FAILED): owner notifications register here (another
package; `Core.build` wires it), without this package importing theirs.

A hook runs in the transaction that records the failure (the attempt FAILED or REVERSED, the money back in
payable), so what it writes commits with it. Registration is idempotent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.payouts.models import Payout, PayoutAccount

PAYOUT_FAILED = "BOUNTY_PAYOUT_FAILED"
PayoutFailedHook = Callable[[AsyncSession, Payout, str], Awaitable[None]]  # (session, payout, reason)

BankPayoutFailedHook = Callable[
    [AsyncSession, PayoutAccount, str], Awaitable[None]
]  # (session, account, reason)

_hooks: list[PayoutFailedHook] = []
_bank_hooks: list[BankPayoutFailedHook] = []


def on_payout_failed(hook: PayoutFailedHook) -> None:
    """Call `hook(session, payout, reason)` for every failed or reversed payout attempt."""
    if hook not in _hooks:
        _hooks.append(hook)


async def run(session: AsyncSession, payout: Payout, reason: str) -> None:
    for hook in list(_hooks):
        await hook(session, payout, reason)


def on_bank_payout_failed(hook: BankPayoutFailedHook) -> None:
    """Call `hook(session, account, reason)` when a connected account's bank payout fails (`payout.failed`)."""
    if hook not in _bank_hooks:
        _bank_hooks.append(hook)


async def run_bank_payout_failed(session: AsyncSession, account: PayoutAccount, reason: str) -> None:
    for hook in list(_bank_hooks):
        await hook(session, account, reason)
