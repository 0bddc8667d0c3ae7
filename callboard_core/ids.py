"""Prefixed, unguessable string ids (agt_…, usr_…, key_…)."""

from __future__ import annotations

import secrets

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def random_string(length: int, alphabet: str = _ALPHABET) -> str:
    # One draw of a uniform number below base**length, written in that base: as uniform as a choice per
    # character, at one system call per string instead of one per character (admission mints thousands).
    base = len(alphabet)
    number = secrets.randbelow(base**length)
    out = []
    for _ in range(length):
        number, digit = divmod(number, base)
        out.append(alphabet[digit])
    return "".join(out)


def new_id(prefix: str) -> str:
    # 20 chars of base36 is ~103 bits: unguessable and collision-free in practice.
    return f"{prefix}_{random_string(20)}"
