"""argon2id password hashing, off the event loop."""

from __future__ import annotations

import anyio.to_thread
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()


def configure(*, fast: bool) -> None:
    """Tests use cheap parameters; everything else uses the library's recommended ones."""
    global _hasher
    _hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1) if fast else PasswordHasher()


async def hash_password(password: str) -> str:
    return await anyio.to_thread.run_sync(_hasher.hash, password)


async def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        # Spend comparable time so a missing password cannot be told from a wrong one.
        await anyio.to_thread.run_sync(_hasher.hash, password)
        return False

    def _verify() -> bool:
        try:
            return _hasher.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False

    return await anyio.to_thread.run_sync(_verify)
