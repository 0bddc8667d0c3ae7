"""A job's history reads back in the order it was written, however many events the process has written
and whatever the clock does (frozen in tests, moved back by an operator's NTP correction)."""

from __future__ import annotations

from callboard_core import clock
from callboard_core.jobs import events


def test_event_order_survives_a_frozen_clock_past_a_thousand_events(frozen_clock: clock.FrozenClock) -> None:
    seqs = [events._seq() for _ in range(2500)]  # a counter modulo 1000 wrapped here twice
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_event_order_survives_a_clock_moved_back(frozen_clock: clock.FrozenClock) -> None:
    before = events._seq()
    frozen_clock.advance(seconds=-30)
    assert events._seq() > before
