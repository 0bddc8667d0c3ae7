"""Where a hosted page (the processor's checkout, card setup or payout onboarding) sends a person back: only
this site. A caller-chosen URL elsewhere would turn the processor's page into an open redirect, or hand an
agent the choice of where its owner lands after entering bank details."""

from __future__ import annotations

from urllib.parse import urlsplit

from callboard_core.config import Settings
from callboard_core.errors import field_error


def return_url_or_default(settings: Settings, url: str | None, field: str = "returnUrl") -> str:
    """A URL on one of this site's origins; none given, the site's home."""
    if url is None:
        return settings.base_url.rstrip("/") + "/"
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    if parts.scheme not in ("http", "https") or origin not in settings.origins:
        raise field_error(
            field,
            f"{field} must be a URL on this site ({sorted(settings.origins)[0]}): the hosted page sends you "
            "back there.",
            "untrusted_return_url",
        )
    return url
