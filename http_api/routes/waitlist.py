from __future__ import annotations

from http_api.routing import Router

router = Router("waitlist")
