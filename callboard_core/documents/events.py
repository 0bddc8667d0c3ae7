"""What issuing documents tells the rest of the core (through the bus)."""

from __future__ import annotations

from dataclasses import dataclass

from callboard_core.bus import Event


@dataclass(frozen=True)
class IssuedDocument:
    """What a listener is told of a new document (its row is written; read it for more)."""

    id: str
    number: str
    kind: str
    owner_user_id: str
    total_cents: int
    currency: str


@dataclass(frozen=True)
class DocumentsIssued(Event):
    """One posting's new documents (an invoice and its receipt come together), in its transaction."""

    documents: tuple[IssuedDocument, ...]
