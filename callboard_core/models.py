"""Imports every model module so Base.metadata knows the whole schema (Alembic, tests)."""

from callboard_core.agents import models as agents
from callboard_core.api_keys import models as api_keys
from callboard_core.audit import models as audit
from callboard_core.auth import models as auth
from callboard_core.capabilities import models as capabilities
from callboard_core.db.base import Base
from callboard_core.idempotency import models as idempotency
from callboard_core.mail import models as mail
from callboard_core.onboarding import models as onboarding
from callboard_core.users import models as users
from callboard_core.waitlist import models as waitlist

metadata = Base.metadata

__all__ = ["agents", "api_keys", "audit", "auth", "capabilities", "idempotency", "mail", "metadata",
           "onboarding", "users", "waitlist"]
