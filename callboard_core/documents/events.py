"""What issuing documents tells the rest of the core (through the bus)."""

from __future__ import annotations

from dataclasses import dataclass

from callboard_core.bus import Event
from callboard_core.documents.models import CommercialDocument


@dataclass(frozen=True)
class DocumentsIssued(Event):
    """One posting's new documents (an invoice and its receipt come together), in its transaction."""

    documents: tuple[CommercialDocument, ...]
