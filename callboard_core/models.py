"""Imports every model module so Base.metadata knows the whole schema (Alembic, tests)."""

from callboard_core.agent_notifications import models as agent_notifications
from callboard_core.agents import models as agents
from callboard_core.api_keys import models as api_keys
from callboard_core.audit import models as audit
from callboard_core.auth import models as auth
from callboard_core.billing import models as billing
from callboard_core.bug_reports import models as bug_reports
from callboard_core.capabilities import models as capabilities
from callboard_core.db.base import Base
from callboard_core.disputes import models as disputes
from callboard_core.documents import models as documents
from callboard_core.files import models as files
from callboard_core.idempotency import models as idempotency
from callboard_core.job_types import models as job_types
from callboard_core.jobs import models as jobs
from callboard_core.ledger import models as ledger
from callboard_core.mail import models as mail
from callboard_core.offerings import models as offerings
from callboard_core.onboarding import models as onboarding
from callboard_core.owner_notifications import models as owner_notifications
from callboard_core.payments import models as payments
from callboard_core.payouts import models as payouts
from callboard_core.processor import models as processor
from callboard_core.processor.sandbox import models as sandbox_processor
from callboard_core.setup_links import models as setup_links
from callboard_core.users import models as users
from callboard_core.waitlist import models as waitlist

metadata = Base.metadata

__all__ = [
    "agent_notifications",
    "agents",
    "api_keys",
    "audit",
    "auth",
    "billing",
    "bug_reports",
    "capabilities",
    "disputes",
    "documents",
    "files",
    "idempotency",
    "job_types",
    "jobs",
    "ledger",
    "mail",
    "metadata",
    "offerings",
    "onboarding",
    "owner_notifications",
    "payments",
    "payouts",
    "processor",
    "sandbox_processor",
    "setup_links",
    "users",
    "waitlist",
]
