"""The agent's proposal (setup draft) shared by onboarding sessions and registration drafts: merging a setup
save or an owner edit into the stored JSON, reading it back, and the token checks both kinds share."""

from __future__ import annotations

import re
from typing import Any

from callboard_core.errors import ValidationFailed
from callboard_core.onboarding import schemas as onboarding_schemas
from callboard_core.security import tokens

# Fields the agent may leave out but not clear (the spec gives only buyerIntent, ownerQuestions and the
# free-form sellerManifest as nullable on its side); the owner may clear all but role.
_HANDLE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
_URL = re.compile(r"^https?://\S+$")


def merge(data: dict[str, Any] | None, body: onboarding_schemas.OwnerDraftUpdate) -> dict[str, Any]:
    """`data` with the fields sent in body applied to its `draft`; null clears a field (the fields that
    cannot be cleared are Omittable in the body). A new dict, so the JSON column sees the change."""
    sent = body.model_dump(exclude_unset=True)
    draft = dict((data or {}).get("draft") or {})
    for name, value in sent.items():
        if value is None:
            draft.pop(name, None)
        elif name == "proposed_policy":
            draft[name] = {k: v for k, v in value.items() if v is not None}
        else:
            draft[name] = value
    return {**(data or {}), "draft": draft}


def draft_of(data: dict[str, Any] | None) -> onboarding_schemas.SetupDraft:
    return onboarding_schemas.SetupDraft.model_validate((data or {}).get("draft") or {})


def presence_of(data: dict[str, Any] | None) -> dict[str, Any]:
    return dict((data or {}).get("presence") or {})


def with_presence(data: dict[str, Any] | None, presence_id: str, message: str | None) -> dict[str, Any]:
    count = int(presence_of(data).get("count", 0)) + 1
    return {**(data or {}), "presence": {"id": presence_id, "message": message, "count": count}}


def token_matches(token_hash: str, token: str) -> bool:
    return tokens.constant_time_equals(token_hash, tokens.hash_token(token))


def token_mismatch() -> ValidationFailed:
    return ValidationFailed(
        "This token is not the one of this session or draft.",
        errors=[{"field": "token", "in": "body", "code": "token_mismatch", "message": "does not match"}],
        code="token_mismatch",
    )


# --- reading a free-form manifest: only well-formed values are taken ----------------------------------


def text(source: Any, key: str, max_length: int) -> str | None:
    value = source.get(key) if isinstance(source, dict) else None
    if isinstance(value, str) and len(value.strip()) > 0 and len(value) <= max_length:
        return value.strip()
    return None


def handle(source: Any) -> str | None:
    value = text(source, "handle", 40)
    return value if value and len(value) >= 3 and _HANDLE.match(value) else None


def url(source: Any, key: str = "endpointUrl") -> str | None:
    value = text(source, key, 2048)
    return value if value and _URL.match(value) else None


def strings(source: Any, key: str) -> list[str]:
    value = source.get(key) if isinstance(source, dict) else None
    if not isinstance(value, list):
        return []
    return [x for x in value if isinstance(x, str) and 0 < len(x) <= 64][:50]
