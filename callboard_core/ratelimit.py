"""Rate limits for public and sign-in routes, on the `limits` library.

In-memory by default; with CALLBOARD_REDIS_URL every server process shares one budget in Redis, its keys
under CALLBOARD_RATE_LIMIT_KEY_PREFIX. While Redis is unreachable each process limits on its own.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItem, parse
from limits.aio.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter
from limits.errors import StorageError
from limits.storage import storage_from_string

from callboard_core import metrics
from callboard_core.config import Settings
from callboard_core.errors import RateLimited

# Named budgets per client address: public writes share one, sign-in routes get a tighter one, public reads
# (the directory, previews of claim and setup links, the pages) a looser one.
PUBLIC = "public"
SIGNIN = "signin"
PUBLIC_READ = "public_read"
BUG_REPORT = "bug_report"
REDIS_TIMEOUT_SECONDS = 1.0  # a slow Redis must not hold requests up for long
REDIS_RETRY_SECONDS = 5.0  # after a Redis failure, how long to limit per process before trying it again

log = logging.getLogger("callboard.ratelimit")


class RateLimiter:
    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.rate_limit_enabled
        # The in-process budget: the only one without Redis, the fallback while Redis is unreachable.
        self._local_storage = storage_from_string("async+memory://")
        self._local = MovingWindowRateLimiter(self._local_storage)
        self._storage = self._local_storage
        self._shared: FixedWindowRateLimiter | None = None
        self._shared_down_until = 0.0
        self._last_warning = 0.0
        if settings.redis_url:
            uri = (
                "async+" + settings.redis_url
                if not settings.redis_url.startswith("async+")
                else settings.redis_url
            )
            self._storage = storage_from_string(
                uri,
                key_prefix=settings.rate_limit_key_prefix,
                wrap_exceptions=True,
                connect_timeout=REDIS_TIMEOUT_SECONDS,
                stream_timeout=REDIS_TIMEOUT_SECONDS,
            )
            self._shared = FixedWindowRateLimiter(self._storage)
        self._items: dict[str, RateLimitItem] = {
            PUBLIC: parse(settings.rate_limit_public),
            SIGNIN: parse(settings.rate_limit_signin),
            PUBLIC_READ: parse(settings.rate_limit_public_read),
            BUG_REPORT: parse(settings.rate_limit_bug_report),
        }

    async def hit(self, budget: str, *identity: str) -> None:
        """Spend one request of `budget` for `identity` (client address, key id, …) or raise RateLimited.

        If Redis fails, the request is counted in this process's own budget instead (and Redis is left
        alone for a few seconds): limits stay in force, per process, and the routes stay up."""
        if not self.enabled:
            return
        item = self._items[budget]
        ids = (budget, *identity)
        limiter: FixedWindowRateLimiter | MovingWindowRateLimiter = self._local
        if self._shared is not None and time.monotonic() >= self._shared_down_until:
            try:
                if await self._shared.hit(item, *ids):
                    return
                stats = await self._shared.get_window_stats(item, *ids)
                metrics.RATE_LIMIT_REFUSALS.labels(budget=budget).inc()
                raise RateLimited(retry_after=max(1, math.ceil(stats.reset_time - time.time())))
            except (StorageError, OSError, TimeoutError) as exc:
                self._shared_down_until = time.monotonic() + REDIS_RETRY_SECONDS
                if time.monotonic() - self._last_warning > 60:
                    self._last_warning = time.monotonic()
                    log.warning("rate-limit storage failed (%s); limiting per process for now", exc)
        if await limiter.hit(item, *ids):
            return
        stats = await limiter.get_window_stats(item, *ids)
        metrics.RATE_LIMIT_REFUSALS.labels(budget=budget).inc()
        raise RateLimited(retry_after=max(1, math.ceil(stats.reset_time - time.time())))

    async def reset(self) -> None:
        await self._local_storage.reset()  # type: ignore[misc]
        if self._storage is not self._local_storage:
            await self._storage.reset()  # type: ignore[misc]
