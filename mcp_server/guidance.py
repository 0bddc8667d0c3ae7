"""The MCP rendering of guidance (callboard_core/guidance.py): a step becomes the tool to call with its arguments
exactly as the tool's input schema takes them (and the resource to read), and the prose names tools, never
routes. What only the agent's human owner can do becomes a request to pass on. The table is the one place the
MCP front end maps actions to tools; a test checks every action against the tools served."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic.alias_generators import to_snake

from callboard_core.guidance import OWNER_ACTS, Act, Step, prose

# Acts of the HTTP-only onboarding protocols (callboard_core.guidance.HTTP_ONLY_ACTS) have no rendering here:
# no tool's answer holds one (tests/test_guidance.py checks both).
from mcp_server.tool_table import ToolDef

# act -> (tool, the argument that takes the step's body whole; None: the body's fields are arguments)
TOOLS: dict[Act, tuple[str, str | None]] = {
    Act.HOME: ("home", None),
    Act.READ_NOTIFICATIONS: ("notifications", None),
    Act.CLAIM_LINK: ("claim_link", None),
    Act.UPDATE_PROFILE: ("update_profile", "changes"),
    Act.START_STARTER_JOB: ("start_starter_job", None),
    Act.FIND_WORK: ("list_jobs", None),
    Act.LIST_JOB_TYPES: ("job_types", None),
    Act.READ_JOB: ("get_job", None),
    Act.APPLY: ("apply", None),
    Act.RESPOND_INVITATION: ("respond_invitation", "response"),
    Act.ACKNOWLEDGE_SLOT: ("acknowledge_slot", None),
    Act.READ_INPUT_FILES: ("slot_input_files", None),
    Act.UPLOAD_FILE: ("upload_file_inline", None),
    Act.SUBMIT_WORK: ("submit", "submission"),
    Act.SUBMISSION_STATUS: ("submission_status", None),
    Act.CREATE_JOB: ("create_job", "job"),
    Act.PUBLISH_JOB: ("publish_job", None),
    Act.RUN_ADMISSION: ("run_admission", None),
    Act.REVIEW_SUBMISSIONS: ("review_packets", None),
    Act.AWARD: ("award", None),
    Act.NO_AWARD: ("no_award", "decision"),
    Act.RELEASED_ARTIFACT: ("released_artifact", None),
    Act.OPEN_DISPUTE: ("open_dispute", "dispute"),
    Act.DISPUTE_STATUS: ("dispute_status", None),
    Act.JOB_PAYMENT: ("job_payment", None),
    Act.RETRY_PAYMENT: ("retry_job_payment", None),
    Act.SETUP_LINK: ("setup_link_create", None),
    Act.HEARTBEAT: ("heartbeat", "body"),
    Act.WHOAMI: ("whoami", None),
}

# What the agent asks its owner to do (signed in to callboard): no tool does it.
OWNER_REQUESTS: dict[Act, str] = {
    Act.OWNER_CONFIRM_PAYMENT: "ask your owner to confirm (and pay for) this job, signed in to callboard",
    Act.OWNER_RAISE_AUTOPUBLISH: "ask your owner to raise your autoPublishLimitCents, signed in to callboard",
    Act.OWNER_LIMITS: "ask your owner to raise or clear their spend caps in their callboard billing settings",
    Act.OWNER_SAVE_CARD: "ask your owner to save a card in their callboard billing settings",
    Act.OWNER_TOPUP: "ask your owner to add funds to their callboard balance",
    Act.OWNER_WRITE_KEY: "ask your owner for an API key with the write scope (their callboard API keys page)",
    Act.OWNER_AGENT: "ask your owner to look at you on their callboard agents page",
    Act.OWNER_MINT_ONBOARDING: "ask your owner to start an onboarding session for you, signed in to callboard",
    Act.OWNER_CLAIM_DRAFT: "ask your owner to claim your registration draft, signed in to callboard",
    Act.OWNER_ACTIVATE_DRAFT: "ask your owner to activate your registration draft, signed in to callboard",
    Act.OWNER_EDIT_SESSION: "ask your owner to edit your onboarding proposal, signed in to callboard",
    Act.OWNER_ACTIVATE_SESSION: "ask your owner to activate you from your onboarding session",
    Act.OWNER_DISMISS_SESSION: "ask your owner to dismiss the onboarding session",
    Act.OWNER_REQUEST_TAG: "ask your owner to request the capability tag, signed in to callboard",
    Act.OWNER_CARD_SETUP: "ask your owner to save a card in their callboard billing settings",
}

BRIEF_RESOURCE = "callboard://jobs/{job_id}/brief"
_READS_BRIEF = frozenset({Act.READ_JOB, Act.SUBMIT_WORK})


class McpRenderer:
    def __init__(self, tools: Iterable[ToolDef]) -> None:
        # Each tool's argument names, as its input schema lists them.
        self.parameters = {
            t.name: [p for p in t.signature().parameters if p not in ("ctx", "idempotency_key")]
            for t in tools
        }

    def arguments(self, act: Act, args: Mapping[str, Any], body: Mapping[str, Any] | None) -> dict[str, Any]:
        tool, body_arg = TOOLS[act]
        names = self.parameters[tool]
        arguments: dict[str, Any] = {k: v for k, v in args.items() if k in names}
        if body is not None:
            if body_arg is not None:
                arguments[body_arg] = dict(body)
            else:
                arguments.update({to_snake(k): v for k, v in body.items() if to_snake(k) in names})
        return arguments

    def render(self, step: Step) -> dict[str, Any]:
        description = prose(step.description, step.args, self)
        if step.act in OWNER_ACTS:
            ask = OWNER_REQUESTS[step.act]
            return {
                "tool": None,
                "arguments": None,
                "description": f"{ask[0].upper()}{ask[1:]}. {description}",
            }
        rendered: dict[str, Any] = {
            "tool": TOOLS[step.act][0],
            "arguments": self.arguments(step.act, step.args, step.body),
            "description": description,
        }
        if step.act in _READS_BRIEF and "job_id" in step.args:
            rendered["resource"] = BRIEF_RESOURCE.format(job_id=step.args["job_id"])
        return rendered

    def mention(self, act: Act, args: Mapping[str, Any]) -> str:
        if act in OWNER_ACTS:
            return OWNER_REQUESTS[act]
        return f"`{TOOLS[act][0]}`"

    def schema(self) -> tuple[dict[str, Any], list[str]]:
        return {
            "tool": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "description": "The tool to call next; null when only your owner can act (see description).",
            },
            "arguments": {
                "anyOf": [{"type": "object"}, {"type": "null"}],
                "description": "The tool's arguments as its input schema takes them (fill in the free-text "
                "fields, e.g. empty strings in a submission).",
            },
            "resource": {
                "type": "string",
                "description": "A resource to read first (e.g. the job's brief), when there is one.",
            },
            "description": {"type": "string"},
        }, ["tool", "arguments", "description"]
