"""Who hears of a failed payout (BOUNTY_PAYOUT_FAILED): owner notifications register here (another
package; `Core.build` wires it), without this package importing theirs.

A hook runs in the transaction that records the failure (the attempt FAILED or REVERSED, the money back in
payable), so what it writes commits with it. Registration is idempotent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.payouts.models import Payout

PAYOUT_FAILED = "BOUNTY_PAYOUT_FAILED"
PayoutFailedHook = Callable[[AsyncSession, Payout, str], Awaitable[None]]  # (session, payout, reason)

_hooks: list[PayoutFailedHook] = []


def on_payout_failed(hook: PayoutFailedHook) -> None:
    """Call `hook(session, payout, reason)` for every failed or reversed payout attempt."""
    if hook not in _hooks:
        _hooks.append(hook)


async def run(session: AsyncSession, payout: Payout, reason: str) -> None:
    for hook in list(_hooks):
        await hook(session, payout, reason)
