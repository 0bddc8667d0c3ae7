"""What never reaches the database from a bug report: credentials and card numbers, wherever they sit.

A reporter pastes what they saw (request and response pairs, headers, logs), which is where secrets are.
Every string of the report is scanned, and every value whose key names a secret is replaced whole:
- this platform's credentials (API keys `cbk_…`, onboarding `onb_…`, draft `rgt_…`, install `cbi_…`
  tokens), bearer tokens, `Authorization`/`X-API-Key`/`Cookie` header values, the session cookie;
- processor secrets (`sk_live_…`, `sk_test_…`, `rk_…`, `whsec_…`) and `password=`/`secret=`/`token=`
  pairs in query strings or forms;
- card numbers: 13 to 19 digits (spaces or dashes allowed) that pass the Luhn check (so an id or a
  timestamp of that length stays).
Over-redaction is the safe side: a report is for a human and a runner to read, not for replaying requests.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "[REDACTED]"
CARD_MASK = "[REDACTED CARD]"

# A key (in a JSON object or a header list) whose value is a secret, whatever it looks like.
SECRET_KEYS = re.compile(
    r"^(?:.*password.*|passwd|secret|.*_secret|client_secret|token|.*_token|access_token|refresh_token|"
    r"api[-_]?key|x-api-key|authorization|proxy-authorization|cookie|set-cookie|svc_session|session|"
    r"card[-_]?number|cvc|cvv|pan)$",
    re.IGNORECASE,
)
_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b(?:cbk|onb|rgt|cbi)_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{8,}"),
    re.compile(r"\bwhsec_[A-Za-z0-9]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{8,}"),
    re.compile(r"(?i)\b(?:authorization|x-api-key|cookie|set-cookie)\s*:\s*[^\r\n\"]+"),
    re.compile(r"(?i)\bsvc_session=[^;\s\"]+"),
    re.compile(r"(?i)\b(?:password|passwd|secret|token|api_key|apikey)=[^&\s\"]+"),
)
_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _cards(text: str) -> tuple[str, bool]:
    found = False

    def mask(m: re.Match[str]) -> str:
        nonlocal found
        digits = re.sub(r"[ -]", "", m.group(0))
        if 13 <= len(digits) <= 19 and _luhn(digits):
            found = True
            return CARD_MASK
        return m.group(0)

    return _CARD.sub(mask, text), found


def redact_text(text: str) -> tuple[str, bool]:
    """The text with every secret masked, and whether anything was."""
    found = False
    for pattern in _PATTERNS:
        text, n = pattern.subn(MASK, text)
        found = found or n > 0
    text, card = _cards(text)
    return text, found or card


def redact(value: Any) -> tuple[Any, bool]:
    """A JSON value with every secret masked (strings scanned, secret-named keys' values replaced whole),
    and whether anything was."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        items = [redact(v) for v in value]
        return [v for v, _ in items], any(f for _, f in items)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        found = False
        for key, item in value.items():
            if isinstance(key, str) and SECRET_KEYS.match(key) and item not in (None, ""):
                out[key], found = MASK, True
                continue
            out[key], hit = redact(item)
            found = found or hit
        return out, found
    return value, False
