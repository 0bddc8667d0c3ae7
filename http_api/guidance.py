"""The HTTP rendering of guidance (callboard_core/guidance.py): a step becomes the route to call, its method and
body, and the prose names routes. The table is the one place the HTTP front end maps actions to routes; a
test checks that every action has a route and that every route rendered is one the app serves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from callboard_core.guidance import OWNER_ACTS, Act, Step, prose

# Path templates name the step's args (snake_case). Owner actions are the owner's signed-in routes.
ROUTES: dict[Act, tuple[str, str]] = {
    Act.HOME: ("GET", "/api/v2/home"),
    Act.CLAIM_LINK: ("POST", "/api/v2/agents/me/claim-link"),
    Act.UPDATE_PROFILE: ("PATCH", "/api/v2/agents/me"),
    Act.START_STARTER_JOB: ("POST", "/api/v2/agents/me/starter-job"),
    Act.FIND_WORK: ("GET", "/api/v2/jobs"),
    Act.LIST_JOB_TYPES: ("GET", "/api/v2/job-types"),
    Act.READ_JOB: ("GET", "/api/v2/jobs/{job_id}"),
    Act.APPLY: ("POST", "/api/v2/jobs/{job_id}/applications"),
    Act.RESPOND_INVITATION: ("POST", "/api/v2/invitations/{invitation_id}/respond"),
    Act.ACKNOWLEDGE_SLOT: ("POST", "/api/v2/participation-slots/{slot_id}/acknowledge"),
    Act.READ_INPUT_FILES: ("GET", "/api/v2/participation-slots/{slot_id}/input-files"),
    Act.UPLOAD_FILE: ("POST", "/api/v2/participation-slots/{slot_id}/uploads"),
    Act.SUBMIT_WORK: ("POST", "/api/v2/participation-slots/{slot_id}/submit"),
    Act.SUBMISSION_STATUS: ("GET", "/api/v2/submissions/{submission_id}/status"),
    Act.CREATE_JOB: ("POST", "/api/v2/jobs"),
    Act.PUBLISH_JOB: ("POST", "/api/v2/jobs/{job_id}/publish"),
    Act.RUN_ADMISSION: ("POST", "/api/v2/jobs/{job_id}/admission/run"),
    Act.REVIEW_SUBMISSIONS: ("GET", "/api/v2/jobs/{job_id}/review-packets"),
    Act.AWARD: ("POST", "/api/v2/jobs/{job_id}/award"),
    Act.NO_AWARD: ("POST", "/api/v2/jobs/{job_id}/no-award"),
    Act.RELEASED_ARTIFACT: ("GET", "/api/v2/awards/{award_id}/released-artifact"),
    Act.OPEN_DISPUTE: ("POST", "/api/v2/jobs/{job_id}/disputes"),
    Act.DISPUTE_STATUS: ("GET", "/api/v2/jobs/{job_id}"),
    Act.JOB_PAYMENT: ("GET", "/api/v2/jobs/{job_id}/payment"),
    Act.RETRY_PAYMENT: ("POST", "/api/v2/jobs/{job_id}/payment/retry"),
    Act.SETUP_LINK: ("POST", "/api/v2/agents/me/setup-links"),
    Act.READ_NOTIFICATIONS: ("GET", "/api/v2/agent-notifications"),
    Act.OWNER_CONFIRM_PAYMENT: ("POST", "/api/v2/owner/jobs/{job_id}/payment/retry"),
    Act.OWNER_RAISE_AUTOPUBLISH: ("PATCH", "/api/v2/agents/dashboard/{agent_id}/policy"),
    Act.OWNER_LIMITS: ("PATCH", "/me/billing/limits"),
    Act.OWNER_SAVE_CARD: ("POST", "/me/billing/payment-methods"),
    Act.OWNER_TOPUP: ("POST", "/me/billing/topup"),
    Act.OWNER_WRITE_KEY: ("POST", "/api-keys/dashboard"),
    Act.OWNER_AGENT: ("GET", "/agents/dashboard/{agent_id}"),
    Act.OWNER_MINT_ONBOARDING: ("POST", "/api/onboarding/mint"),
    Act.OWNER_CLAIM_DRAFT: ("POST", "/api/agent/register/{slug}/claim"),
    Act.OWNER_ACTIVATE_DRAFT: ("POST", "/api/agent/register/{slug}/activate"),
    Act.OWNER_EDIT_SESSION: ("PATCH", "/api/onboarding/sessions/{session_id}"),
    Act.OWNER_ACTIVATE_SESSION: ("POST", "/api/onboarding/sessions/{session_id}/activate"),
    Act.OWNER_DISMISS_SESSION: ("POST", "/api/onboarding/sessions/{session_id}/dismiss"),
    Act.OWNER_REQUEST_TAG: ("POST", "/capabilities/requests"),
    Act.OWNER_CARD_SETUP: ("POST", "/api/v2/requester-agents/me/payment-method/setup"),
    Act.HEARTBEAT: ("POST", "/api/v2/agents/me/heartbeat"),
    Act.WHOAMI: ("GET", "/api/v2/agents/me"),
    Act.LIST_CAPABILITY_TAGS: ("GET", "/capabilities/tags"),
    Act.REGISTER_AGENT: ("POST", "/api/v2/agents/register"),
    Act.REGISTER_MANIFEST: ("POST", "/api/agent/register/manifest"),
    Act.SESSION_SETUP: ("POST", "/api/agent/onboard/{slug}/setup"),
    Act.SESSION_PRESENCE: ("POST", "/api/agent/onboard/{slug}/presence"),
    Act.DRAFT_SETUP: ("POST", "/api/agent/register/{slug}/setup"),
    Act.DRAFT_PRESENCE: ("POST", "/api/agent/register/{slug}/presence"),
    Act.DRAFT_STATUS: ("GET", "/api/agent/register/{slug}/status"),
}


class _Args(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"  # a target the step does not name stays a visible placeholder


def route(act: Act, args: Mapping[str, Any]) -> tuple[str, str]:
    method, template = ROUTES[act]
    return method, template.format_map(_Args(args))


class HttpRenderer:
    def render(self, step: Step) -> dict[str, Any]:
        method, path = route(step.act, step.args)
        return {
            "method": method,
            "path": path,
            "body": step.body,
            "description": prose(step.description, step.args, self),
        }

    def mention(self, act: Act, args: Mapping[str, Any]) -> str:
        method, path = route(act, args)
        return f"{method} {path}" + (" (your owner, signed in)" if act in OWNER_ACTS else "")

    def schema(self) -> tuple[dict[str, Any], list[str]]:
        return {
            "method": {"type": "string", "description": "The HTTP method."},
            "path": {"type": "string", "description": "The route to call, ids filled in."},
            "body": {
                "anyOf": [{"type": "object"}, {"type": "null"}],
                "description": "The JSON body to send (fill in the free-text fields), or null.",
            },
            "description": {"type": "string"},
        }, ["method", "path", "description"]


HTTP = HttpRenderer()
