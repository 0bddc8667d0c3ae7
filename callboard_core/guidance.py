"""Guidance as data: every "what to do next" the core hands an agent (home's obligations and next steps, a
result's nextAction, an error's hint) is a Step that names an action (`Act`), its targets (`args`, the ids in
the core's snake_case names), the content to send (`body`, in wire camelCase) and prose (`description`) that
mentions other actions as `{ACT}` placeholders. The core knows no route and no tool.

Each front end installs its Renderer while it serialises (`rendering`): HTTP turns a step into
method/path/body, MCP into tool/arguments (and the resource to read); the prose's placeholders become routes
or tool names. The JSON schema of a step follows the installed renderer too, so the OpenAPI document and the
MCP output schemas describe what each front end really sends. With no renderer installed a step serialises
as its neutral fields (the form the MCP idempotency records store and read back).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any, Protocol

from pydantic import (
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from callboard_core.schemas import ApiModel, JsonObject


class Act(StrEnum):
    """The actions guidance can name. Each front end renders every one (tested)."""

    HOME = "HOME"
    CLAIM_LINK = "CLAIM_LINK"  # a fresh claim URL for the agent's human
    UPDATE_PROFILE = "UPDATE_PROFILE"
    START_STARTER_JOB = "START_STARTER_JOB"
    FIND_WORK = "FIND_WORK"
    LIST_JOB_TYPES = "LIST_JOB_TYPES"
    READ_JOB = "READ_JOB"  # the preview, then (once acknowledged) the brief
    APPLY = "APPLY"
    RESPOND_INVITATION = "RESPOND_INVITATION"
    ACKNOWLEDGE_SLOT = "ACKNOWLEDGE_SLOT"
    READ_INPUT_FILES = "READ_INPUT_FILES"
    UPLOAD_FILE = "UPLOAD_FILE"
    SUBMIT_WORK = "SUBMIT_WORK"
    SUBMISSION_STATUS = "SUBMISSION_STATUS"
    CREATE_JOB = "CREATE_JOB"
    PUBLISH_JOB = "PUBLISH_JOB"
    RUN_ADMISSION = "RUN_ADMISSION"
    REVIEW_SUBMISSIONS = "REVIEW_SUBMISSIONS"
    AWARD = "AWARD"
    NO_AWARD = "NO_AWARD"
    RELEASED_ARTIFACT = "RELEASED_ARTIFACT"
    OPEN_DISPUTE = "OPEN_DISPUTE"
    DISPUTE_STATUS = "DISPUTE_STATUS"
    JOB_PAYMENT = "JOB_PAYMENT"
    RETRY_PAYMENT = "RETRY_PAYMENT"
    SETUP_LINK = "SETUP_LINK"  # a card or payout setup URL for the agent's human
    READ_NOTIFICATIONS = "READ_NOTIFICATIONS"
    # What only the agent's human owner can do, signed in: rendered as a request to pass on.
    OWNER_CONFIRM_PAYMENT = "OWNER_CONFIRM_PAYMENT"
    OWNER_RAISE_AUTOPUBLISH = "OWNER_RAISE_AUTOPUBLISH"
    OWNER_LIMITS = "OWNER_LIMITS"
    OWNER_SAVE_CARD = "OWNER_SAVE_CARD"
    OWNER_TOPUP = "OWNER_TOPUP"
    OWNER_WRITE_KEY = "OWNER_WRITE_KEY"
    OWNER_AGENT = "OWNER_AGENT"  # the owner's view of one agent
    OWNER_MINT_ONBOARDING = "OWNER_MINT_ONBOARDING"
    OWNER_CLAIM_DRAFT = "OWNER_CLAIM_DRAFT"
    OWNER_ACTIVATE_DRAFT = "OWNER_ACTIVATE_DRAFT"
    OWNER_EDIT_SESSION = "OWNER_EDIT_SESSION"  # an onboarding session's draft
    OWNER_ACTIVATE_SESSION = "OWNER_ACTIVATE_SESSION"
    OWNER_DISMISS_SESSION = "OWNER_DISMISS_SESSION"
    OWNER_REQUEST_TAG = "OWNER_REQUEST_TAG"
    OWNER_CARD_SETUP = "OWNER_CARD_SETUP"  # a hosted card form, for the owner's own requester agents
    HEARTBEAT = "HEARTBEAT"
    WHOAMI = "WHOAMI"
    # The onboarding protocols (an onboarding session's token, a registration draft's token, the public
    # registration routes): no MCP tool takes those credentials, so only the HTTP front end names them.
    LIST_CAPABILITY_TAGS = "LIST_CAPABILITY_TAGS"
    REGISTER_AGENT = "REGISTER_AGENT"
    REGISTER_MANIFEST = "REGISTER_MANIFEST"
    SESSION_SETUP = "SESSION_SETUP"
    SESSION_PRESENCE = "SESSION_PRESENCE"
    DRAFT_SETUP = "DRAFT_SETUP"
    DRAFT_PRESENCE = "DRAFT_PRESENCE"
    DRAFT_STATUS = "DRAFT_STATUS"


OWNER_ACTS = frozenset(a for a in Act if a.name.startswith("OWNER_"))
HTTP_ONLY_ACTS = frozenset(
    {
        Act.LIST_CAPABILITY_TAGS,
        Act.REGISTER_AGENT,
        Act.REGISTER_MANIFEST,
        Act.SESSION_SETUP,
        Act.SESSION_PRESENCE,
        Act.DRAFT_SETUP,
        Act.DRAFT_PRESENCE,
        Act.DRAFT_STATUS,
    }
)
NEUTRAL_FIELDS = ("act", "args", "body", "description")
_MENTION = re.compile(r"\{([A-Z_]+)\}")
_ACTS = frozenset(a.value for a in Act)


class Renderer(Protocol):
    """One front end's terms for steps."""

    def render(self, step: Step) -> dict[str, Any]:
        """The step's own fields in this front end's wire form (the prose already rendered)."""

    def mention(self, act: Act, args: Mapping[str, Any]) -> str:
        """How prose names `act` on these targets (a route, a tool)."""

    def schema(self) -> tuple[dict[str, Any], list[str]]:
        """The JSON schema properties of the rendered fields, and which are required."""


_current: contextvars.ContextVar[Renderer | None] = contextvars.ContextVar("callboard_renderer", default=None)


@contextlib.contextmanager
def rendering(renderer: Renderer | None) -> Iterator[None]:
    """Serialise (and describe) steps in `renderer`'s terms within the block (None: the neutral form)."""
    token = _current.set(renderer)
    try:
        yield
    finally:
        _current.reset(token)


def prose(text: str, args: Mapping[str, Any], renderer: Renderer) -> str:
    """`text` with each `{ACT}` placeholder named in the renderer's terms, on the step's targets."""
    # A brace that names no action is text (a key placeholder, an owner's words), left as it is.
    return _MENTION.sub(
        lambda m: renderer.mention(Act(m.group(1)), args) if m.group(1) in _ACTS else m.group(0), text
    )


class Step(ApiModel):
    """A next call, in the core's terms; its subclasses add their context (a deadline, a kind)."""

    act: Act
    args: dict[str, str] = Field(default_factory=dict)
    body: JsonObject | None = None
    description: str

    # No return annotation: pydantic then keeps the model's own fields as the serialization schema.
    @model_serializer(mode="wrap")
    def _render(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        renderer = _current.get()
        if renderer is None or not isinstance(data, dict):
            return data
        for name in NEUTRAL_FIELDS:
            data.pop(name, None)
        return {**data, **renderer.render(self)}

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        renderer = _current.get()
        if renderer is None:
            return schema
        target = handler.resolve_ref_schema(schema)
        properties = target.setdefault("properties", {})
        for name in NEUTRAL_FIELDS:
            properties.pop(name, None)
        own, required = renderer.schema()
        properties.update(own)
        target["required"] = [r for r in target.get("required", []) if r not in NEUTRAL_FIELDS] + required
        return schema


class Hint(ApiModel):
    """A line of prose for a caller (a nextActions entry): `{ACT}` placeholders name actions on `args`, in
    the installed renderer's terms (a route over HTTP, a tool over MCP). On the wire it is a plain string,
    so a `string[]` of the contract stays one."""

    text: str
    args: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"text": value} if isinstance(value, str) else value

    @model_serializer(mode="plain")
    def _render(self) -> str:
        renderer = _current.get()
        return self.text if renderer is None else prose(self.text, self.args, renderer)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string"}


def hint(text: str, **args: str | None) -> Hint:
    """A line of prose naming actions as `{ACT}` (ids that are None are left out)."""
    return Hint(text=text, args={k: v for k, v in args.items() if v})


def step(act: Act, description: str, body: JsonObject | None = None, **args: str | None) -> Step:
    """A bare step (ids that are None are left out)."""
    return Step(act=act, description=description, body=body, args={k: v for k, v in args.items() if v})
