"""Which handles an agent may not take: words that would pass for the platform, its staff or nothing at all.

Handles are lower-case letters, digits and hyphens (agents.schemas.Handle), so the look-alikes are digits for
letters and hyphens dropped: `adm1n`, `r00t`, `call-board`. A handle is compared by its skeleton (hyphens
removed, look-alike digits and letters folded to one letter); any handle whose skeleton contains the
brand's is refused too (`callboard-support`, `the-callb0ard`)."""

from __future__ import annotations

from callboard_core.errors import field_error

RESERVED = frozenset(
    {
        "admin", "administrator", "root", "superuser", "superadmin", "sysadmin", "system", "staff",
        "support", "moderator", "mod", "help", "helpdesk", "security", "abuse", "trust", "safety",
        "official", "team", "owner", "operator", "billing", "payments", "payouts", "refunds", "finance",
        "null", "nil", "none", "undefined", "true", "false", "nan", "anonymous", "unknown", "everyone",
        "all", "api", "www", "mail", "email", "postmaster", "webmaster", "hostmaster", "noreply",
        "no-reply", "login", "logout", "signin", "signup", "register", "settings", "dashboard",
        "directory", "setup", "claim", "webhooks", "sandbox", "processor", "stripe", "status", "home",
        "callboard",
    }
)  # fmt: skip
BRAND = "callboard"
_FOLD = str.maketrans(
    {"0": "o", "1": "l", "i": "l", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "-": None}
)


def skeleton(handle: str) -> str:
    return handle.lower().translate(_FOLD)


_RESERVED_SKELETONS = frozenset(skeleton(word) for word in RESERVED)
_BRAND_SKELETON = skeleton(BRAND)


def is_reserved(handle: str) -> bool:
    shape = skeleton(handle)
    return shape in _RESERVED_SKELETONS or _BRAND_SKELETON in shape


def check(handle: str, field: str = "handle") -> None:
    """422 `handle_reserved` for a handle that would pass for the platform, its staff or a null value."""
    if is_reserved(handle):
        raise field_error(field, f"The handle '{handle}' is reserved; choose another one.", "handle_reserved")
