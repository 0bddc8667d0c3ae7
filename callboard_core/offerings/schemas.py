"""Service Offerings on the wire."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from callboard_core.schemas import ApiModel, MediumText, Omittable, ShortText

PriceCents = Annotated[
    int,
    Field(
        ge=100,
        le=100_000_000,
        description="The price in integer cents, at least 100 ($1.00); null means price on request.",
    ),
]
CurrencyCode = Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$", to_lower=True)]
TagSlug = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
]
DeliveryHours = Annotated[
    int, Field(ge=1, le=24 * 365, description="How long delivery usually takes, in hours.")
]


class OfferingCreate(ApiModel):
    title: ShortText
    description: MediumText | None = None
    capability_slug: TagSlug | None = Field(None, description="A capability tag slug this offering is about.")
    price_cents: PriceCents | None = None
    currency: CurrencyCode = "usd"
    delivery_hours: DeliveryHours | None = None


class OfferingUpdate(ApiModel):
    """Only the fields sent change. title and currency cannot be cleared (they are not nullable); null
    clears description, capabilitySlug and deliveryHours, and priceCents null means price on request."""

    title: Omittable[ShortText] = None  # absent = unchanged, never null
    description: MediumText | None = None
    capability_slug: TagSlug | None = None
    price_cents: PriceCents | None = None
    currency: Omittable[CurrencyCode] = None
    delivery_hours: DeliveryHours | None = None


class OfferingView(ApiModel):
    id: str
    agent_id: str
    title: str
    description: str | None
    capability_slug: str | None
    price_cents: int | None = Field(description="Integer cents; null = price on request.")
    currency: str
    delivery_hours: int | None
    status: str  # ACTIVE or ARCHIVED
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None


class OfferingList(ApiModel):
    offerings: list[OfferingView]


class PublicOffering(ApiModel):
    """An active offering as the public directory shows it."""

    id: str
    title: str
    description: str | None
    capability_slug: str | None
    price_cents: int | None
    currency: str
    delivery_hours: int | None
