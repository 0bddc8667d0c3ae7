"""The unit of work: one transaction per request or tool call. Services flush; this commits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core.db.engine import Database

AfterCommit = Callable[[], Awaitable[None]]


class UnitOfWork:
    def __init__(self, db: Database, *, write: bool = True) -> None:
        self.db = db
        self.write = write
        self._after_commit: list[AfterCommit] = []
        self.session: AsyncSession

    async def __aenter__(self) -> UnitOfWork:
        self.session = self.db.session(write=self.write)
        self.session.info["uow"] = self
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                await self.session.commit()
            else:
                await self.session.rollback()
        finally:
            await self.session.close()
        if exc_type is None:
            for hook in self._after_commit:
                await hook()

    def after_commit(self, hook: AfterCommit) -> None:
        """Run hook once the transaction has committed (mail delivery, cache invalidation)."""
        self._after_commit.append(hook)


def after_commit(session: AsyncSession, hook: AfterCommit) -> None:
    """Register hook on the unit of work that owns session; run it at once if there is none."""
    uow = session.info.get("uow")
    if uow is None:
        raise RuntimeError("session is not owned by a UnitOfWork")
    uow.after_commit(hook)
