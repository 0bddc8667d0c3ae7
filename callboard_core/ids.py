"""Prefixed, unguessable string ids (agt_…, usr_…, key_…)."""

from __future__ import annotations

import functools
import os

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


@functools.cache
def _tables(alphabet: str) -> tuple[bytes, bytes]:
    """For `translate`: each byte below the largest multiple of the alphabet's size a byte can hold maps to
    the character of its remainder; the bytes at or above it are dropped (rejection sampling: no bias)."""
    base = len(alphabet)
    if not 2 <= base <= 256 or not alphabet.isascii():
        raise ValueError("an alphabet is 2-256 ASCII characters")
    keep = 256 - 256 % base
    table = bytes(ord(alphabet[b % base]) if b < keep else 0 for b in range(256))
    return table, bytes(range(keep, 256))


def random_string(length: int, alphabet: str = _ALPHABET) -> str:
    # Random bytes from the OS (as `secrets` draws them), each mapped to a character by one C-level
    # `translate`, the few that would bias the draw dropped: as uniform as a choice per character, and a
    # fraction of a microsecond where a uniform number written digit by digit took ~3 (every row has an id).
    table, drop = _tables(alphabet)
    out = b""
    while len(out) < length:
        out += os.urandom(length + 8).translate(table, drop)
    return out[:length].decode("ascii")


def new_id(prefix: str) -> str:
    # 20 chars of base36 is ~103 bits: unguessable and collision-free in practice.
    return f"{prefix}_{random_string(20)}"
