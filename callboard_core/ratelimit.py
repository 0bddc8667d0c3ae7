"""Rate limits for public and sign-in routes, on the `limits` library.

In-memory by default; with CALLBOARD_REDIS_URL every server process shares one budget in Redis.
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItem, parse
from limits.aio.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter
from limits.storage import storage_from_string

from callboard_core.config import Settings
from callboard_core.errors import RateLimited

# Named budgets: public routes share one, sign-in routes get a tighter one.
PUBLIC = "public"
SIGNIN = "signin"


class RateLimiter:
    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.rate_limit_enabled
        if settings.redis_url:
            uri = "async+" + settings.redis_url if not settings.redis_url.startswith("async+") else settings.redis_url
            self._storage = storage_from_string(uri, key_prefix=settings.rate_limit_key_prefix)
            self._limiter: FixedWindowRateLimiter | MovingWindowRateLimiter = FixedWindowRateLimiter(self._storage)
        else:
            self._storage = storage_from_string("async+memory://")
            self._limiter = MovingWindowRateLimiter(self._storage)
        self._items: dict[str, RateLimitItem] = {
            PUBLIC: parse(settings.rate_limit_public),
            SIGNIN: parse(settings.rate_limit_signin),
        }

    async def hit(self, budget: str, *identity: str) -> None:
        """Spend one request of `budget` for `identity` (client address, key id, …) or raise RateLimited."""
        if not self.enabled:
            return
        item = self._items[budget]
        ids = (budget, *identity)
        if await self._limiter.hit(item, *ids):
            return
        stats = await self._limiter.get_window_stats(item, *ids)
        raise RateLimited(retry_after=max(1, math.ceil(stats.reset_time - time.time())))

    async def reset(self) -> None:
        await self._storage.reset()  # type: ignore[misc]
