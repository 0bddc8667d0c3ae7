"""Prefixed, unguessable string ids (agt_…, usr_…, key_…)."""

from __future__ import annotations

import secrets

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def random_string(length: int, alphabet: str = _ALPHABET) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


def new_id(prefix: str) -> str:
    # 20 chars of base36 is ~103 bits: unguessable and collision-free in practice.
    return f"{prefix}_{random_string(20)}"
