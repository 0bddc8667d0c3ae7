"""Where a hosted page (the processor's checkout, card setup or payout onboarding) sends a person back: only
this site. A caller-chosen URL elsewhere would turn the processor's page into an open redirect, or hand an
agent the choice of where its owner lands after entering bank details."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from callboard_core.config import Settings
from callboard_core.errors import field_error

# The document states these rules with the site's origin written in (http_api/openapi.py, in place of
# schemas.SITE_URL_KEY): a generated client knows before it asks which URLs are taken.
_URL_CHAR = r"[^\\\x00-\x20\x7f]"  # no backslash, space or control character


def unprintable(url: str) -> bool:
    """A backslash, space or control character: never in a URL this site sends a person to."""
    return "\\" in url or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url)


def site_url_pattern(kind: str, base_url: str) -> str:
    """`next`: a path on this site ("/...", not "//...") or a URL on its origin; `return`: a URL on its
    origin. The same rule as check_next_url and return_url_or_default, in both regex dialects."""
    parts = urlsplit(base_url)
    on_site = re.escape(f"{parts.scheme}://{parts.netloc}".lower()) + rf"([/?#]{_URL_CHAR}*)?"
    if kind == "next":
        return rf"^(/|/[^/\\\x00-\x20\x7f]{_URL_CHAR}*|{on_site})$"
    return rf"^{on_site}$"


def return_url_or_default(settings: Settings, url: str | None, field: str = "returnUrl") -> str:
    """A URL on one of this site's origins; none given, the site's home."""
    if url is None:
        return settings.base_url.rstrip("/") + "/"
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    if unprintable(url) or parts.scheme not in ("http", "https") or origin not in settings.origins:
        raise field_error(
            field,
            f"{field} must be a URL on this site ({sorted(settings.origins)[0]}): the hosted page sends you "
            "back there.",
            "untrusted_return_url",
        )
    return url
