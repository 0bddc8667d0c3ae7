"""What the disputes package publishes on the core's bus (owner notifications listen)."""

from __future__ import annotations

from dataclasses import dataclass

from callboard_core import bus


@dataclass(frozen=True)
class DisputeOpened(bus.Event):
    dispute_id: str
    job_id: str
    owner_ids: tuple[str, ...]  # the parties' owners to tell


@dataclass(frozen=True)
class DisputeResolved(bus.Event):
    dispute_id: str
    job_id: str
    owner_ids: tuple[str, ...]
    outcome: str
