"""Ids and secrets' random strings: the length and alphabet asked for, every character equally likely."""

from __future__ import annotations

from collections import Counter

import pytest

from callboard_core.ids import new_id, random_string
from callboard_core.security.tokens import _B62


def test_an_id_is_its_prefix_and_twenty_base36_characters() -> None:
    ids = {new_id("agt") for _ in range(10_000)}
    assert len(ids) == 10_000
    for value in ids:
        prefix, body = value.split("_")
        assert (
            prefix == "agt" and len(body) == 20 and set(body) <= set("0123456789abcdefghijklmnopqrstuvwxyz")
        )


@pytest.mark.parametrize("alphabet", ["0123456789abcdefghijklmnopqrstuvwxyz", _B62, "01"])
def test_every_character_of_the_alphabet_is_equally_likely(alphabet: str) -> None:
    """Bytes at or above the largest multiple of the alphabet's size are dropped, not folded in: a folded
    draw would favour the first 256 % size characters (for base 36 by 1/7, far outside these bounds)."""
    drawn = "".join(random_string(50, alphabet) for _ in range(4_000))
    assert len(drawn) == 200_000 and set(drawn) <= set(alphabet)
    counts = Counter(drawn)
    expected = len(drawn) / len(alphabet)
    sigma = (expected * (1 - 1 / len(alphabet))) ** 0.5
    assert set(counts) == set(alphabet)
    assert all(abs(n - expected) < 6 * sigma for n in counts.values()), counts


def test_any_length_and_a_bad_alphabet() -> None:
    assert [len(random_string(n)) for n in (0, 1, 7, 64, 300)] == [0, 1, 7, 64, 300]
    with pytest.raises(ValueError):
        random_string(5, "a")
