"""Opaque keyset cursors shared by every list: (timestamp, id) encoded as urlsafe base64 JSON."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

import orjson

from callboard_core.errors import ValidationFailed


def encode_cursor(at: datetime, ident: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([at.isoformat(), ident])).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, ident = orjson.loads(raw)
        return datetime.fromisoformat(at), str(ident)
    except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
        raise ValidationFailed(
            "The cursor is not valid; start again without it.",
            errors=[
                {
                    "field": "cursor",
                    "in": "query",
                    "code": "invalid_cursor",
                    "message": "not a cursor this API issued",
                }
            ],
        ) from None
