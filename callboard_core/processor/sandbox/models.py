"""The sandbox processor's tables (only `CALLBOARD_PROCESSOR=sandbox` writes them).

- `sandbox_objects`: every object the sandbox processor holds (customers, setup intents, checkout
  sessions, payment methods, payment intents, charges, accounts, transfers, refunds), Stripe-shaped JSON
  keyed by id and type.
- `sandbox_idempotency_keys`: idempotency key → operation, parameters' fingerprint and the stored result,
  so a repeated call returns the first answer and never creates a second object.
- `sandbox_events`: the outbox of webhook events (Stripe-shaped JSON, the exact bytes that are signed at
  each delivery attempt), delivered to the app's `/webhooks/processor` by the worker.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from callboard_core.db import Base, UTCDateTime, now_column


class SandboxObject(Base):
    __tablename__ = "sandbox_objects"
    __table_args__ = (Index("ix_sandbox_objects_type", "type", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(40))
    data: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column(onupdate=True)


class SandboxIdempotencyKey(Base):
    __tablename__ = "sandbox_idempotency_keys"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    operation: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(64))
    result: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = now_column()


class SandboxEvent(Base):
    __tablename__ = "sandbox_events"
    # The worker's scan: undelivered events, oldest first.
    __table_args__ = (Index("ix_sandbox_events_pending", "delivered_at", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(80))
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = now_column()
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
