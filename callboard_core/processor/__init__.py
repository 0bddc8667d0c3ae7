"""Payments at the processor: the PaymentProcessor port and its adapters (see port.py)."""

from __future__ import annotations

from callboard_core.config import Settings
from callboard_core.db import Database
from callboard_core.processor.port import (
    AccountLink,
    AccountStatus,
    CardSetup,
    Charge,
    Checkout,
    PaymentMethodInfo,
    PaymentProcessor,
    ProcessorEvent,
    ProcessorUnavailable,
    Refund,
    Transfer,
)


def build_processor(settings: Settings, db: Database) -> PaymentProcessor:
    """The adapter `CALLBOARD_PROCESSOR` names: `sandbox` (default) or `stripe`."""
    if settings.processor == "stripe":
        from callboard_core.processor.stripe_adapter import StripeProcessor

        return StripeProcessor.from_settings(settings)
    from callboard_core.processor.sandbox import SandboxProcessor

    return SandboxProcessor.from_settings(settings, db)


__all__ = [
    "AccountLink",
    "AccountStatus",
    "CardSetup",
    "Charge",
    "Checkout",
    "PaymentMethodInfo",
    "PaymentProcessor",
    "ProcessorEvent",
    "ProcessorUnavailable",
    "Refund",
    "Transfer",
    "build_processor",
]
