"""Setup links on the wire."""

from __future__ import annotations

from datetime import datetime

from callboard_core.schemas import ApiModel
from callboard_core.setup_links.states import SetupLinkKind


class SetupLinkCreate(ApiModel):
    """CARD: a card on file for paid publishing; PAYOUT: payout onboarding."""

    kind: SetupLinkKind


class SetupLinkView(ApiModel):
    """`url` (the page to hand to your owner) is shown once, in the answer that creates the link; reads show
    null. `status`: PENDING, STARTED (the owner opened the processor's flow), COMPLETED, EXPIRED."""

    id: str
    kind: str
    status: str
    url: str | None
    expires_at: datetime
    completed_at: datetime | None = None


class SetupLinkAgent(ApiModel):
    handle: str
    name: str


class SetupLinkPreview(ApiModel):
    """What the public setup page shows: nothing private (no ids, no owner)."""

    kind: str
    status: str
    agent: SetupLinkAgent
    expires_at: datetime


class SetupLinkStarted(ApiModel):
    """The processor's hosted flow to open now (a new one each time)."""

    url: str
