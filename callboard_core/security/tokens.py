"""Secrets handed to callers once: API keys, session tokens, magic-link, claim, enroll and onboarding tokens.

Only SHA-256 hashes are stored. API keys carry a visible prefix and a CRC32 checksum so that a leaked
key is recognisable by secret scanners and a mistyped one is refused without a database lookup.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib

from callboard_core.ids import random_string

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
API_KEY_PREFIX = "cbk"
_KEY_BODY = 32
_CHECKSUM = 6


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(nbytes: int = 32) -> str:
    return secrets.token_urlsafe(nbytes)


def _b62(number: int, width: int) -> str:
    out = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        out.append(_B62[rem])
    return "".join(reversed(out))


def _checksum(body: str) -> str:
    return _b62(zlib.crc32(body.encode()), _CHECKSUM)


def new_api_key() -> str:
    """`cbk_` + 32 base62 characters (~190 bits) + a 6-character CRC32 checksum."""
    body = random_string(_KEY_BODY, _B62)
    return f"{API_KEY_PREFIX}_{body}{_checksum(body)}"


def api_key_well_formed(key: str) -> bool:
    if (
        not key.startswith(API_KEY_PREFIX + "_")
        or len(key) != len(API_KEY_PREFIX) + 1 + _KEY_BODY + _CHECKSUM
    ):
        return False
    rest = key[len(API_KEY_PREFIX) + 1 :]
    body, check = rest[:_KEY_BODY], rest[_KEY_BODY:]
    return hmac.compare_digest(_checksum(body), check)


def api_key_prefix(key: str) -> str:
    """The part shown in listings: enough to tell keys apart, far too little to use."""
    return key[: len(API_KEY_PREFIX) + 1 + 8]


def constant_time_equals(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
