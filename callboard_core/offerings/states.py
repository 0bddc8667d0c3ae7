"""The offering machine: ACTIVE → ARCHIVED (terminal). An archived offering leaves the directory and stays
visible to its agent and owner."""

from __future__ import annotations

from enum import StrEnum


class OfferingStatus(StrEnum):
    ACTIVE = "ACTIVE"
    ARCHIVED = "ARCHIVED"


OFFERING_MOVES: dict[OfferingStatus, frozenset[OfferingStatus]] = {
    OfferingStatus.ARCHIVED: frozenset({OfferingStatus.ACTIVE}),
}
