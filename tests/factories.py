"""Builders for the cross-cutting tests (error contract, authorization matrix, idempotency, concurrency).

`World` is one app on one database plus the people and credentials the tests need. `PARAM_FACTORIES` maps a
path-parameter name (`agentId`, `keyId`, ...) to an async factory that creates a matching object for a given
actor (owned by it where the object has an owner) and returns the value to put in the path. A route whose
parameter has no factory yet makes the tests that need one skip, naming the parameter, so the gap is visible.

A parameter name can mean different things by route family (`id` is a job under `/jobs/{id}`, an
application under `/job-applications/{id}`, a submission, an award, a notification elsewhere), and the object a
route acts on often has to be in one state (a DRAFT to publish, a GRANTED slot to acknowledge). So
`PATH_FACTORIES`, an ordered list of (path-template regex, factory), is consulted first: its factory builds
the object the route needs, in the state it needs, through the core services (as the HTTP calls would), and
returns every path value at once (a job and its staged file for `/input-files/{fileId}`) plus the ids the
request body must name (`submissionId` for an award), which `fill_path` hands back in `refs`.

Request bodies and query strings are built from the route's pydantic model (`sample_body`, `sample_query`):
the required fields only, each with the simplest value its JSON schema allows. `BODY_OVERRIDES` takes a
hand-written body for a route whose schema the sampler cannot satisfy; `sample_body(route, refs)` then puts
the ids from `refs` into the body fields of the same name (the caller's own agent as `requesterAgentId`, the
factory-made submission as `submissionId`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError
from sqlalchemy import select

from callboard_core import clock
from callboard_core.agent_notifications import service as agent_notifications
from callboard_core.agent_notifications.models import AgentNotification
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.agents.models import Agent
from callboard_core.api_keys import service as api_keys
from callboard_core.billing import service as billing_service
from callboard_core.bug_reports.models import BugReport
from callboard_core.capabilities.models import CapabilityCategory, CapabilityTag, CapabilityTagRequest
from callboard_core.container import Core
from callboard_core.documents.models import CommercialDocument
from callboard_core.files.schemas import UploadRequest
from callboard_core.jobs import admission, invitations, participation, review
from callboard_core.jobs import schemas as job_schemas
from callboard_core.jobs import service as jobs
from callboard_core.ledger import service as ledger
from callboard_core.offerings import service as offerings
from callboard_core.offerings.schemas import OfferingCreate
from callboard_core.onboarding.models import DraftStatus, OnboardingSession, RegistrationDraft
from callboard_core.owner_notifications.models import OwnerNotification
from callboard_core.principals import Actor as CoreActor
from callboard_core.security import tokens
from callboard_core.security.permissions import Role
from callboard_core.seed import migrate_and_seed
from callboard_core.setup_links import service as setup_links
from callboard_core.setup_links.schemas import SetupLinkCreate
from callboard_core.waitlist.models import WaitlistSignup
from http_api.app import create_app
from http_api.route_table import AuthKind, RouteDef
from tests import conftest
from tests.asgi_client import AsgiClient
from tests.conftest import BASE_URL, make_settings, make_user, user_in

MACHINE_TOKEN = "machine-token-for-tests-0123456789"
UNTRUSTED_ORIGIN = "https://evil.example.net"
# A well-formed id that names nothing: path parameters of requests that must fail before any lookup.
PLACEHOLDER_ID = "zz_doesnotexist0000000000"
# Fresh owners with agents are made this many at a time (World.actor): one unit of work per batch.
FRESH_BATCH = 16

# Error codes that mean "the credential was refused" (as opposed to a business rule of the handler).
CREDENTIAL_CODES = frozenset(
    {
        "unauthenticated",
        "missing_api_key",
        "invalid_api_key",
        "session_required",
        "invalid_session",
        "api_key_required",
        "missing_onboarding_token",
        "invalid_onboarding_token",
        "missing_machine_token",
        "invalid_machine_token",
        "insufficient_scope",
        "insufficient_role",
        "untrusted_origin",
        "email_unverified",
    }
)


def route_id(route: RouteDef) -> str:
    return f"{route.method} {route.path}"


def uid(n: int = 10) -> str:
    return uuid.uuid4().hex[:n]


# --- problem+json ----------------------------------------------------------------------------------


def assert_problem(
    response: httpx.Response, status: int | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error response: problem+json with code, message and requestId, and requestId == X-Request-Id."""
    where = f"{response.request.method} {response.request.url.path} -> {response.status_code}: {response.text[:500]}"
    if status is not None:
        assert response.status_code == status, where
    assert response.status_code >= 400, where
    assert response.headers.get("content-type", "").startswith("application/problem+json"), where
    body = response.json()
    assert isinstance(body, dict), where
    for name in ("code", "message", "requestId"):
        assert isinstance(body.get(name), str) and body[name], f"{name} missing: {where}"
    assert body["requestId"] == response.headers.get("x-request-id"), where
    assert body.get("status") == response.status_code, where
    if code is not None:
        assert body["code"] == code, where
    return body


def assert_not_5xx(response: httpx.Response) -> None:
    where = (
        f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text[:800]}"
    )
    assert response.status_code < 500, where
    if response.status_code >= 400 and response.headers.get("content-type", "").startswith("application/"):
        assert_problem(response)


# --- sampling valid bodies and query strings from the pydantic models ------------------------------

# A hand-written minimal body for a route whose schema the sampler cannot satisfy: (method, path) -> body.
# Fields naming objects hold PLACEHOLDER_ID here; `sample_body` fills them from the factories' refs.
BODY_OVERRIDES: dict[tuple[str, str], Callable[[], dict[str, Any]]] = {}

UPLOAD_CONTENT = b"hello, callboard"


def job_create_body(**overrides: Any) -> dict[str, Any]:
    """A valid job: deadlines in the future and ordered, the fair work duration fitting, free."""
    now = clock.now()
    body: dict[str, Any] = {
        "title": f"Job {uid(6)}",
        "description": "Made by tests/factories.py.",
        "jobTypeKey": "general",
        "admissionClosesAt": (now + timedelta(hours=1)).isoformat(),
        "fairWorkDurationMs": 2 * 3600 * 1000,
        "latestSubmissionDeadlineAt": (now + timedelta(hours=6)).isoformat(),
        "reviewDeadlineAt": (now + timedelta(hours=12)).isoformat(),
        "participantCap": 2,
        "applicationCap": 10,
        "previewJson": {"pages": 1},
        "workBriefJson": {"secret": "the brief"},
    }
    body.update(overrides)
    return body


def upload_body() -> dict[str, Any]:
    return {
        "filename": "input.txt",
        "mimeType": "text/plain",
        "sizeBytes": len(UPLOAD_CONTENT),
        "sha256": hashlib.sha256(UPLOAD_CONTENT).hexdigest(),
    }


def submit_body() -> dict[str, Any]:
    """A submission the `general` job type accepts."""
    return {"artifactType": "text", "structuredPayloadJson": {"summary": "s", "answer": "a"}}


for _path in ("/api/v2/jobs", "/api/v2/bounties"):
    BODY_OVERRIDES[("POST", _path)] = job_create_body
for _path in ("/api/v2/owner/jobs", "/api/v2/owner/bounties"):
    BODY_OVERRIDES[("POST", _path)] = lambda: job_create_body(requesterAgentId=PLACEHOLDER_ID)
for _path in (
    "/api/v2/jobs/{id}/input-files",
    "/api/v2/bounties/{id}/input-files",
    "/api/v2/owner/jobs/{id}/input-files",
    "/api/v2/owner/bounties/{id}/input-files",
    "/api/v2/participation-slots/{slotId}/uploads",
    "/api/v2/owner/participation-slots/{slotId}/uploads",
):
    BODY_OVERRIDES[("POST", _path)] = upload_body
# The onboarding claim names the agent the read-only key is for (the factory's: the actor's own agent).
BODY_OVERRIDES[("POST", "/api/agent/onboard/{slug}/claim")] = lambda: {
    "token": "x",
    "agentId": PLACEHOLDER_ID,
}
for _path in (
    "/api/v2/participation-slots/{slotId}/submit",
    "/api/v2/owner/participation-slots/{slotId}/submit",
):
    BODY_OVERRIDES[("POST", _path)] = submit_body

_PATTERN_CANDIDATES = [
    "abc",
    "x",
    "abc-def",
    "https://example.com/x",
    "usd",
    "USD",
    "a@example.com",
    "abc_def",
    "1.0.0",
    "2025-01-01",
    "0" * 64,
    "a" * 64,
    "+15555550100",
    "ABC",
    "a1",
    "abc123",
]


class Unsampleable(Exception):
    pass


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    if "allOf" in schema and len(schema["allOf"]) == 1:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        merged.update(_resolve(schema["allOf"][0], defs))
        return merged
    return schema


def _string(schema: dict[str, Any], name: str) -> str:
    lo, hi = schema.get("minLength", 0), schema.get("maxLength", 10**9)
    fmt = schema.get("format", "")
    lname = name.lower()
    if fmt == "email" or "email" in lname:
        candidates = [f"u{uid()}@example.com"]
    elif fmt in ("uri", "url") or lname.endswith("url"):
        candidates = ["https://example.com/x"]
    elif fmt == "date-time":
        candidates = [clock.now().isoformat()]
    elif fmt == "uuid":
        candidates = [str(uuid.uuid4())]
    elif "password" in lname:
        candidates = ["correct-horse-battery-staple-9"]
    elif "handle" in lname or "slug" in lname:
        candidates = [f"h{uid()}"]
    else:
        candidates = [f"x{uid(6)}", *_PATTERN_CANDIDATES]
    pattern = schema.get("pattern")
    for candidate in candidates + _PATTERN_CANDIDATES:
        if len(candidate) < lo:
            candidate = candidate + "x" * (lo - len(candidate))
        if len(candidate) > hi:
            continue
        if pattern and not re.search(pattern, candidate):
            continue
        return candidate
    raise Unsampleable(f"no sample string for {name!r} (pattern {pattern!r})")


def _number(schema: dict[str, Any], integer: bool) -> float | int:
    value: float = 1
    if "minimum" in schema:
        value = max(value, schema["minimum"])
    if "exclusiveMinimum" in schema:
        value = max(value, schema["exclusiveMinimum"] + 1)
    if "maximum" in schema:
        value = min(value, schema["maximum"])
    return int(value) if integer else value


def sample(schema: dict[str, Any], defs: dict[str, Any], name: str = "") -> Any:
    schema = _resolve(schema, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for union in ("anyOf", "oneOf"):
        if union in schema:
            options = [o for o in schema[union] if _resolve(o, defs).get("type") != "null"]
            if not options:
                return None
            return sample(options[0], defs, name)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "string":
        return _string(schema, name)
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return False
    if kind == "array":
        count = schema.get("minItems", 0)
        return [sample(schema.get("items", {}), defs, name) for _ in range(count)]
    if kind == "object" or "properties" in schema:
        required = schema.get("required", [])
        props = schema.get("properties", {})
        return {field: sample(props.get(field, {}), defs, field) for field in required}
    if kind == "null":
        return None
    return "x"  # Any


@functools.cache
def model_schema(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's JSON schema and its definitions, made once per model (the generic tests ask thousands of
    times): readers only."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return schema, schema.get("$defs", {})


def sample_model(model: type[BaseModel]) -> dict[str, Any]:
    """The required fields of model with the simplest valid values; Unsampleable if that does not validate."""
    schema, defs = model_schema(model)
    value = sample(schema, defs)
    try:
        model.model_validate(value)
    except ValidationError as exc:
        raise Unsampleable(f"sampled {model.__name__} {value!r} does not validate: {exc}") from None
    return value


def sample_body(route: RouteDef, refs: dict[str, str] | None = None) -> dict[str, Any] | None:
    """A body that passes the route's model; None for routes without a body model. Unsampleable otherwise.
    Body fields named in refs (ids of objects the path factories made) take those ids."""
    if route.body is None:
        return None
    override = BODY_OVERRIDES.get((route.method, route.path))
    body = override() if override is not None else sample_model(route.body)
    for name in body:
        if refs and name in refs:
            body[name] = refs[name]
    return body


def body_fields(model: type[BaseModel]) -> dict[str, set[str]]:
    """The body's top-level fields on the wire (aliases) with the JSON types each accepts."""
    schema, defs = model_schema(model)
    return {name: schema_kinds(prop, defs) for name, prop in schema.get("properties", {}).items()}


def schema_kinds(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> set[str]:
    """The JSON types a field accepts (besides null)."""
    defs = defs or {}
    schema = _resolve(schema, defs)
    if "const" in schema or "enum" in schema:
        names = {str: "string", bool: "boolean", int: "integer", float: "number"}
        values = schema.get("enum", [schema.get("const")])
        return {names.get(type(v), "any") for v in values if v is not None}
    kinds: set[str] = set()
    for union in ("anyOf", "oneOf"):
        for option in schema.get(union, []):
            kinds |= schema_kinds(option, defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds |= set(kind)
    elif kind:
        kinds.add(kind)
    elif not kinds:
        kinds.add("any")
    kinds.discard("null")
    return kinds


# --- people, agents and credentials --------------------------------------------------------------


@dataclass
class Actor:
    """A signed-in person; with `agent=True` also a claimed agent of theirs and its read+write key."""

    user_id: str
    session_token: str
    role: str
    agent_id: str | None = None
    api_key: str | None = None
    key_id: str | None = None

    def session(self, origin: str | None = BASE_URL) -> dict[str, str]:
        headers = {"Cookie": f"svc_session={self.session_token}"}
        if origin is not None:
            headers["Origin"] = origin
        return headers

    def key(self) -> dict[str, str]:
        assert self.api_key, "this actor has no agent key"
        return {"X-API-Key": self.api_key}


@dataclass
class Provisional:
    """A registered, unclaimed agent: its read-only key and its claim code."""

    agent_id: str
    api_key: str
    key_id: str
    code: str

    def key(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key}


@dataclass
class World:
    core: Core
    app: Any
    # The other side of every job a factory makes: its own owner and a claimed agent (see `stranger`).
    _stranger: str | None = field(default=None, repr=False)
    _someone: Actor | None = field(default=None, repr=False)
    _fresh: list[Actor] = field(default_factory=list, repr=False)

    def client(self, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app, **kw), base_url=BASE_URL)

    def lean_client(self) -> AsgiClient:
        """The generic tests' in-process client (tests/asgi_client.py: the error contract, the matrix): the same
        app and scope as httpx's ASGITransport, without its per-request cost."""
        return AsgiClient(self.app, BASE_URL)

    async def someone(self) -> Actor:
        """One owner with a claimed agent, shared by the module's requests that only need a credential."""
        if self._someone is None:
            self._someone = await self.actor(agent=True)
        return self._someone

    async def actor(self, role: str = Role.USER, *, agent: bool = False, verified: bool = True) -> Actor:
        if agent and role == Role.USER and verified:
            if not self._fresh:
                self._fresh = await self._owners_with_agents(FRESH_BATCH)
            return self._fresh.pop()
        user_id, token = await make_user(self.core, role=role, verified=verified)
        actor = Actor(user_id=user_id, session_token=token, role=str(role))
        if agent:
            actor.agent_id, actor.api_key, actor.key_id = await self.claimed_agent(user_id)
        return actor

    async def _owners_with_agents(self, n: int) -> list[Actor]:
        """n fresh verified owners, each signed in with a claimed agent: what `make_user` and `claimed_agent`
        do, in one unit of work for the batch (the generic tests use thousands; each is still used by one
        test only)."""
        made: list[Actor] = []
        async with self.core.uow() as uow:
            for _ in range(n):
                user_id, token = await user_in(uow.session)
                p = await self._provisional_in(uow.session)
                await agents.claim(uow.session, CoreActor.owner(user_id), p.code)
                made.append(
                    Actor(
                        user_id=user_id,
                        session_token=token,
                        role=str(Role.USER),
                        agent_id=p.agent_id,
                        api_key=p.api_key,
                        key_id=p.key_id,
                    )
                )
        return made

    async def provisional(self) -> Provisional:
        async with self.core.uow() as uow:
            return await self._provisional_in(uow.session)

    async def _provisional_in(self, session: Any) -> Provisional:
        reg = await agents.register(
            session,
            self.core.settings,
            agent_schemas.AgentRegister(
                name=f"Agent {uid(6)}", endpoint_url="https://agent.example.com/hook"
            ),
        )
        assert reg.claim_url
        return Provisional(
            agent_id=reg.agent.id,
            api_key=reg.api_key,
            key_id=reg.key_info.id,
            code=reg.claim_url.rsplit("/", 1)[1],
        )

    async def claimed_agent(self, owner_id: str) -> tuple[str, str, str]:
        """A new agent claimed by owner_id: (agent id, its read+write key, key id)."""
        p = await self.provisional()
        async with self.core.uow() as uow:
            await agents.claim(uow.session, CoreActor.owner(owner_id), p.code)
        return p.agent_id, p.api_key, p.key_id

    async def stranger(self) -> str:
        """A claimed agent of an owner no actor is: the requester of the jobs a factory has the actor work
        on, and the worker on the actor's own jobs (an agent never works for its own owner). One serves the
        world: it is never a caller, only the other party."""
        if self._stranger is None:
            user_id, _ = await make_user(self.core)
            self._stranger = (await self.claimed_agent(user_id))[0]
        return self._stranger

    async def revoked_key(self) -> str:
        p = await self.provisional()
        async with self.core.uow() as uow:
            await api_keys.revoke_for_agent(uow.session, p.agent_id, reason="test")
        return p.api_key

    async def onboarding(self, owner: Actor) -> tuple[str, str]:
        """An onboarding session of owner with a live token: (slug, token)."""
        slug, token, _ = await self.onboarding_session(owner)
        return slug, token

    async def onboarding_session(self, owner: Actor) -> tuple[str, str, str]:
        """An open onboarding session of owner with a live token and a proposal that can be activated as it
        is: (slug, token, session id)."""
        slug, token = f"ws-{uid()}", tokens.new_token()
        async with self.core.uow() as uow:
            row = OnboardingSession(
                slug=slug,
                owner_id=owner.user_id,
                token_hash=tokens.hash_token(token),
                token_expires_at=clock.now() + timedelta(hours=1),
                data={"draft": {"agent_name": f"Onboarded {uid(6)}"}},
            )
            uow.session.add(row)
            await uow.session.flush()
            return slug, token, row.id

    async def registration_draft(self, owner: Actor | None = None) -> tuple[str, str]:
        """A registration draft with a live token, claimed by owner when given: (slug, token)."""
        slug, token = f"rg-{uid()}", tokens.new_token()
        async with self.core.uow() as uow:
            uow.session.add(
                RegistrationDraft(
                    slug=slug,
                    token_hash=tokens.hash_token(token),
                    token_expires_at=clock.now() + timedelta(days=7),
                    status=DraftStatus.CLAIMED if owner else DraftStatus.DRAFT,
                    owner_id=owner.user_id if owner else None,
                    claimed_at=clock.now() if owner else None,
                    manifest={"name": f"Drafted {uid(6)}"},
                    data={},
                )
            )
        return slug, token

    async def credentials(self, route: RouteDef, actor: Actor) -> tuple[dict[str, str], dict[str, str]]:
        """Headers that satisfy the route's auth kind for actor, and path values the credential pins
        (an onboarding token is bound to its slug)."""
        kind = route.auth
        if route.draft_token:
            slug, token = await self.registration_draft()
            return {"Authorization": f"Bearer {token}"}, {"slug": slug}
        if kind is AuthKind.PUBLIC:
            return {}, {}
        if kind is AuthKind.SESSION:
            return actor.session(), {}
        if kind in (AuthKind.ADMIN, AuthKind.STAFF):
            return (await self.actor(Role.SUPERADMIN)).session(), {}
        if kind in (AuthKind.KEY_READ, AuthKind.KEY_WRITE):
            return actor.key(), {}
        if kind is AuthKind.MACHINE:
            return {"Authorization": f"Bearer {MACHINE_TOKEN}"}, {}
        slug, token = await self.onboarding(actor)
        return {"Authorization": f"Bearer {token}"}, {"slug": slug}


# --- objects for path parameters -----------------------------------------------------------------

Factory = Callable[[World, Actor], Awaitable[str]]


async def _agent(w: World, owner: Actor) -> str:
    return (await w.claimed_agent(owner.user_id))[0]


async def _key(w: World, owner: Actor) -> str:
    agent_id = owner.agent_id or (await w.claimed_agent(owner.user_id))[0]
    async with w.core.uow() as uow:
        _, key = await api_keys.issue(
            uow.session,
            agent_id=agent_id,
            owner_id=owner.user_id,
            scopes=api_keys.READ_WRITE,
            label="factory",
        )
        return key.id


async def _claim_code(w: World, _: Actor) -> str:
    return (await w.provisional()).code


async def _signup(w: World, _: Actor) -> str:
    async with w.core.uow() as uow:
        row = WaitlistSignup(email=f"w{uid()}@example.com", name="Waiting", use_case="testing", role="BOTH")
        uow.session.add(row)
        await uow.session.flush()
        return row.id


async def _bug_report(w: World, _: Actor) -> str:
    async with w.core.uow() as uow:
        row = BugReport(summary="The directory page is blank", status="UNADDRESSED")
        uow.session.add(row)
        await uow.session.flush()
        return row.id


async def _ledger_transaction(w: World, actor: Actor) -> str:
    async with w.core.uow() as uow:
        txn = await ledger.top_up(
            uow.session, user_id=actor.user_id, amount_cents=100, processor_ref=f"pi_{uid()}"
        )
        return txn.id


async def _buyer_profile(w: World, actor: Actor) -> str:
    return billing_service.profile_id(actor.user_id)


async def _first_category(w: World) -> str:
    async with w.core.uow(write=False) as uow:
        found = (await uow.session.execute(select(CapabilityCategory.id).limit(1))).scalar_one_or_none()
    return str(found) if found else await _category(w)


async def _category(w: World, _: Actor | None = None) -> str:
    async with w.core.uow() as uow:
        row = CapabilityCategory(slug=f"cat-{uid()}", name=f"Category {uid(4)}")
        uow.session.add(row)
        await uow.session.flush()
        return row.id


async def _tag(w: World, _: Actor) -> str:
    category_id = await _first_category(w)
    async with w.core.uow() as uow:
        row = CapabilityTag(slug=f"tag-{uid()}", name=f"Tag {uid(6)}", category_id=category_id, aliases=[])
        uow.session.add(row)
        await uow.session.flush()
        return row.id


async def _tag_request(w: World, owner: Actor) -> str:
    text = f"custom skill {uid(6)}"
    async with w.core.uow() as uow:
        row = CapabilityTagRequest(raw_text=text, normalized_text=text, requested_by_user_id=owner.user_id)
        uow.session.add(row)
        await uow.session.flush()
        return row.id


async def _slug(w: World, owner: Actor) -> str:
    return (await w.onboarding(owner))[0]


async def _onboarding_session_id(w: World, owner: Actor) -> str:
    return (await w.onboarding_session(owner))[2]


async def _user(w: World, _: Actor) -> str:
    return (await make_user(w.core))[0]


async def _document(w: World, owner: Actor) -> str:
    """A receipt of the actor's: a top-up through the ledger issues it."""
    async with w.core.uow() as uow:
        txn = await ledger.top_up(
            uow.session, user_id=owner.user_id, amount_cents=500, processor_ref=f"pi_{uid()}"
        )
    async with w.core.uow(write=False) as uow:  # documents are written with the commit
        found = await uow.session.scalars(
            select(CommercialDocument.id).where(CommercialDocument.transaction_id == txn.id)
        )
        return found.one()


async def _owner_notification(w: World, owner: Actor) -> str:
    """An in-app notification of the actor's: a top-up's receipt raises it."""
    await _document(w, owner)
    async with w.core.uow() as uow:
        found = await uow.session.scalars(
            select(OwnerNotification.id).where(
                OwnerNotification.owner_id == owner.user_id, OwnerNotification.channel == "IN_APP"
            )
        )
        return found.first() or ""


# --- objects of the job lifecycle, built through callboard_core.jobs as the HTTP calls would --------
#
# `requester` and `worker` are agent ids. A job factory's requester is the actor's own agent (API-key routes act
# as `actor.agent_id`, the owner mirrors act for any agent of `actor.user_id`), its worker the world's stranger;
# a slot factory's worker is the actor's agent, working on a job of the stranger's.


async def _acting_agent(w: World, actor: Actor) -> str:
    if actor.agent_id is None:
        actor.agent_id, actor.api_key, actor.key_id = await w.claimed_agent(actor.user_id)
    return actor.agent_id


async def draft_job(w: World, requester: str, **overrides: Any) -> str:
    async with w.core.uow() as uow:
        body = job_schemas.JobCreate.model_validate(job_create_body(**overrides))
        return (await jobs.create(uow.session, CoreActor.agent(requester), body)).id


async def publish_job(w: World, requester: str, job_id: str) -> str:
    async with w.core.uow() as uow:
        return (
            await jobs.publish(
                uow.session,
                w.core.blobs,
                w.core.settings,
                CoreActor.agent(requester),
                job_id,
                jobs.PublishPrep(),  # no prepare step: files hashed in the write
            )
        ).status


async def open_job(w: World, requester: str, **overrides: Any) -> str:
    """A published job in ADMISSION_OPEN."""
    job_id = await draft_job(w, requester, **overrides)
    assert await publish_job(w, requester, job_id) == "ADMISSION_OPEN"
    return job_id


async def apply_to(w: World, worker: str, job_id: str) -> str:
    async with w.core.uow() as uow:
        return (await participation.apply(uow.session, CoreActor.agent(worker), job_id)).id


async def run_admission(w: World, requester: str, job_id: str) -> str:
    async with w.core.uow() as uow:
        job = await jobs.requester_job(uow.session, CoreActor.agent(requester), job_id)
        return (await admission.close_admission(uow.session, job, CoreActor.agent(requester))).status


async def granted_slot(w: World, requester: str, worker: str) -> tuple[str, str]:
    """(job id, slot id): worker applied to requester's open job and was admitted; the slot is GRANTED."""
    job_id = await open_job(w, requester)
    await apply_to(w, worker, job_id)
    assert await run_admission(w, requester, job_id) == "IN_PROGRESS"
    async with w.core.uow(write=False) as uow:
        slots = await participation.my_slots(uow.session, CoreActor.agent(worker))
    (slot,) = [x for x in slots.slots if x.job_id == job_id]
    assert slot.status == "GRANTED"
    return job_id, slot.id


async def acknowledged_slot(w: World, requester: str, worker: str) -> tuple[str, str]:
    job_id, slot_id = await granted_slot(w, requester, worker)
    async with w.core.uow() as uow:
        assert (
            await participation.acknowledge(uow.session, CoreActor.agent(worker), slot_id)
        ).status == "ACKNOWLEDGED"
    return job_id, slot_id


async def submitted(w: World, requester: str, worker: str) -> tuple[str, str]:
    """(job id, submission id): the worker's submission, its job IN_REVIEW."""
    job_id, slot_id = await acknowledged_slot(w, requester, worker)
    body = job_schemas.SubmitBody.model_validate(submit_body())
    async with w.core.uow() as uow:
        sub = await participation.submit(uow.session, w.core.blobs, CoreActor.agent(worker), slot_id, body)
    assert sub.job_status == "IN_REVIEW", sub
    return job_id, sub.id


async def awarded(w: World, requester: str, worker: str) -> tuple[str, str]:
    """(job id, award id): the worker's submission won."""
    job_id, submission_id = await submitted(w, requester, worker)
    async with w.core.uow() as uow:
        body = job_schemas.AwardBody(submission_id=submission_id)
        result = await review.award(uow.session, CoreActor.agent(requester), job_id, body)
    return job_id, result.award.id


async def invitation(w: World, requester: str, worker: str) -> tuple[str, str]:
    """(job id, invitation id): a PENDING invitation to worker on requester's open job."""
    job_id = await open_job(w, requester)
    async with w.core.uow() as uow:
        body = job_schemas.InvitationCreate(worker_agent_id=worker)
        inv = await invitations.invite(uow.session, CoreActor.agent(requester), job_id, body)
    return job_id, inv.id


async def staged_input_file(w: World, requester: str, job_id: str) -> str:
    async with w.core.uow() as uow:
        ticket = await review.stage_input_file(
            uow.session,
            w.core.blobs,
            w.core.settings,
            CoreActor.agent(requester),
            job_id,
            UploadRequest.model_validate(upload_body()),
        )
    return ticket.file_id


async def notification(w: World, agent_id: str) -> str:
    async with w.core.uow() as uow:  # written as the transaction's last work: read it once committed
        await agent_notifications.notify(uow.session, [agent_id], "test", f"Note {uid(6)}")
    async with w.core.uow(write=False) as uow:
        found = await uow.session.scalars(
            select(AgentNotification.id)
            .where(AgentNotification.agent_id == agent_id)
            .order_by(AgentNotification.created_at.desc(), AgentNotification.id.desc())
            .limit(1)
        )
        return found.one()


# Path factories: (world, actor) -> {path parameter or body field: value}.
PathFactory = Callable[[World, Actor], Awaitable[dict[str, str]]]


async def _own_draft(w: World, actor: Actor) -> dict[str, str]:
    return {"id": await draft_job(w, await _acting_agent(w, actor))}


async def _own_draft_with_file(w: World, actor: Actor) -> dict[str, str]:
    requester = await _acting_agent(w, actor)
    job_id = await draft_job(w, requester)
    return {"id": job_id, "fileId": await staged_input_file(w, requester, job_id)}


async def _own_open(w: World, actor: Actor) -> dict[str, str]:
    return {"id": await open_job(w, await _acting_agent(w, actor))}


async def _own_paid_job(w: World, actor: Actor) -> dict[str, str]:
    """A paid job of the actor's, published: pay and fee reserved from its owner's balance (funded here)."""
    return {"id": await paid_job(w, await _acting_agent(w, actor))}


async def paid_job(w: World, requester: str) -> str:
    """A paid job of `requester`'s, published: pay and fee reserved from its owner's balance (funded here)."""
    from callboard_core.agents.models import Agent
    from callboard_core.ids import new_id
    from callboard_core.ledger import service as ledger

    async with w.core.uow() as uow:
        agent = await uow.session.get(Agent, requester)
        assert agent is not None and agent.owner_id is not None
        agent.auto_publish_limit_cents = 1_000_000
        await ledger.top_up(
            uow.session, user_id=agent.owner_id, amount_cents=10_000, processor_ref=new_id("pi")
        )
    job_id = await draft_job(w, requester, rewardAmountCents=1000)
    assert await publish_job(w, requester, job_id) == "ADMISSION_OPEN"
    return job_id


async def _own_open_to_invite(w: World, actor: Actor) -> dict[str, str]:
    return {**await _own_open(w, actor), "workerAgentId": await w.stranger()}


async def _own_direct_hire(w: World, actor: Actor) -> dict[str, str]:
    requester = await _acting_agent(w, actor)
    job_id = await draft_job(w, requester, directHireWorkerAgentId=await w.stranger(), participantCap=1)
    assert await publish_job(w, requester, job_id) == "PENDING_ACCEPTANCE"
    return {"id": job_id}


async def _own_in_review(w: World, actor: Actor) -> dict[str, str]:
    job_id, submission_id = await submitted(w, await _acting_agent(w, actor), await w.stranger())
    return {"id": job_id, "submissionId": submission_id}


async def _own_award(w: World, actor: Actor) -> dict[str, str]:
    return {"id": (await awarded(w, await _acting_agent(w, actor), await w.stranger()))[1]}


async def _open_dispute(w: World, actor: Actor) -> dict[str, str]:
    """A dispute the stranger (as requester) opened on its job in review (staff routes act on any)."""
    from callboard_core.disputes import schemas as dispute_schemas
    from callboard_core.disputes import service as disputes

    requester = await w.stranger()
    job_id, _ = await submitted(w, requester, await _acting_agent(w, actor))
    async with w.core.uow() as uow:
        opened = await disputes.open_dispute(
            uow.session,
            CoreActor.agent(requester),
            job_id,
            dispute_schemas.DisputeOpen(reason_code="OTHER", reason_text="The work is not what was asked."),
            disputes.DisputePolicy.of(w.core.settings),
        )
    return {"id": opened.id}


async def _review_overdue(w: World, actor: Actor) -> dict[str, str]:
    """A job in review whose review deadline has passed (staff may auto-award it)."""
    from callboard_core.jobs.models import Job

    job_id, submission_id = await submitted(w, await w.stranger(), await _acting_agent(w, actor))
    async with w.core.uow() as uow:
        job = await uow.session.get(Job, job_id)
        assert job is not None
        job.review_deadline_at = clock.now() - timedelta(minutes=1)
    return {"id": job_id, "submissionId": submission_id}


async def _others_in_review(w: World, actor: Actor) -> dict[str, str]:
    job_id, submission_id = await submitted(w, await w.stranger(), await _acting_agent(w, actor))
    return {"id": job_id, "submissionId": submission_id}


async def _any_paid_job(w: World, _: Actor) -> dict[str, str]:
    """A paid, published job of the stranger's (its escrow held), as the staff task routes name it."""
    return {"taskId": await paid_job(w, await w.stranger())}


async def _task(w: World, _: Actor) -> str:
    return await open_job(w, await w.stranger())


async def _any_submission(w: World, actor: Actor) -> dict[str, str]:
    return {"id": (await submitted(w, await _acting_agent(w, actor), await w.stranger()))[1]}


async def _own_invitation_sent(w: World, actor: Actor) -> dict[str, str]:
    return {"invitationId": (await invitation(w, await _acting_agent(w, actor), await w.stranger()))[1]}


async def _others_open_job(w: World, actor: Actor) -> dict[str, str]:
    """An open job of the stranger's, to apply to: the actor's agent names itself as the worker."""
    return {"id": await open_job(w, await w.stranger()), "workerAgentId": await _acting_agent(w, actor)}


async def _own_application(w: World, actor: Actor) -> dict[str, str]:
    worker = await _acting_agent(w, actor)
    return {"id": await apply_to(w, worker, await open_job(w, await w.stranger()))}


async def _own_invitation_received(w: World, actor: Actor) -> dict[str, str]:
    return {"invitationId": (await invitation(w, await w.stranger(), await _acting_agent(w, actor)))[1]}


async def _own_granted_slot(w: World, actor: Actor) -> dict[str, str]:
    return {"slotId": (await granted_slot(w, await w.stranger(), await _acting_agent(w, actor)))[1]}


async def _own_acknowledged_slot(w: World, actor: Actor) -> dict[str, str]:
    return {"slotId": (await acknowledged_slot(w, await w.stranger(), await _acting_agent(w, actor)))[1]}


async def _own_submission(w: World, actor: Actor) -> dict[str, str]:
    return {"id": (await submitted(w, await w.stranger(), await _acting_agent(w, actor)))[1]}


async def _own_notification(w: World, actor: Actor) -> dict[str, str]:
    return {"id": await notification(w, await _acting_agent(w, actor))}


async def _own_onboarding_session(w: World, actor: Actor) -> dict[str, str]:
    """An open session of the actor's (activatable as it is); its token goes into review and claim bodies,
    the actor's agent into the claim's agentId."""
    slug, token, session_id = await w.onboarding_session(actor)
    return {"sessionId": session_id, "slug": slug, "token": token, "agentId": await _acting_agent(w, actor)}


async def _own_draft_claimed(w: World, actor: Actor) -> dict[str, str]:
    """A registration draft the actor claimed (another owner's is then a 404); its token for the body."""
    slug, token = await w.registration_draft(actor)
    return {"slug": slug, "token": token}


async def _unclaimed_draft(w: World, _: Actor) -> dict[str, str]:
    slug, token = await w.registration_draft()
    return {"slug": slug, "token": token}


async def setup_link(w: World, agent_id: str, kind: str = "PAYOUT") -> tuple[str, str]:
    """(link id, code): a PENDING setup link of the agent's."""
    async with w.core.uow() as uow:
        view = await setup_links.create(
            uow.session,
            w.core.settings,
            CoreActor.agent(agent_id),
            SetupLinkCreate.model_validate({"kind": kind}),
        )
    assert view.url
    return view.id, view.url.rsplit("/", 1)[1]


async def _own_setup_link(w: World, actor: Actor) -> dict[str, str]:
    link_id, code = await setup_link(w, await _acting_agent(w, actor))
    return {"id": link_id, "code": code}


async def _own_offering(w: World, actor: Actor) -> dict[str, str]:
    """An active offering of the actor's agent (the owner mirrors name that agent too)."""
    agent_id = await _acting_agent(w, actor)
    async with w.core.uow() as uow:
        body = OfferingCreate(title=f"Offering {uid(6)}", price_cents=500)
        made = await offerings.create(uow.session, CoreActor.agent(agent_id), body)
    return {"agentId": agent_id, "offeringId": made.id}


async def _listed_handle(w: World, _: Actor) -> dict[str, str]:
    """The handle of a worker the public directory lists (the world's stranger)."""
    async with w.core.uow() as uow:
        agent = await uow.session.get(Agent, await w.stranger())
        assert agent is not None
        return {"handle": agent.handle}


_JOB = r"^/api/v2/(?:owner/)?(?:jobs|bounties)/\{id\}"
_SLOT = r"^/api/v2/(?:owner/)?participation-slots/\{slotId\}"
_INVITATION = r"^/api/v2/(?:owner/)?invitations/\{invitationId\}"

# Consulted before PARAM_FACTORIES, first match wins; each entry gives the object the route acts on in the state
# the route needs, so the caller's own request can succeed.
PATH_FACTORIES: list[tuple[re.Pattern[str], PathFactory]] = [
    (re.compile(pattern), factory)
    for pattern, factory in [
        # requester side: jobs (and their bounty and owner mirrors)
        (_JOB + r"$", _own_draft),  # GET (requester view), PATCH (drafts only)
        (_JOB + r"/publish$", _own_draft),
        (_JOB + r"/admission/run$", _own_open),
        (_JOB + r"/payment(?:/retry)?$", _own_paid_job),
        (_JOB + r"/cancel-direct-hire$", _own_direct_hire),
        (_JOB + r"/input-files$", _own_draft),  # GET, POST (staged on drafts)
        (_JOB + r"/input-files/\{fileId\}$", _own_draft_with_file),
        (_JOB + r"/invitations$", _own_open_to_invite),
        (_JOB + r"/clarifications$", _own_open),
        (_JOB + r"/events$", _own_draft),
        (_JOB + r"/review-packets$", _own_in_review),
        (_JOB + r"/award$", _own_in_review),
        (_JOB + r"/no-award$", _own_open),
        (r"^/api/v2/(?:owner/|admin/)?awards/\{id\}/released-artifact$", _own_award),
        (r"^/api/v2/admin/submissions/\{id\}/raw-artifact$", _any_submission),
        (_JOB + r"/disputes$", _own_in_review),
        (r"^/api/v2/admin/(?:job|bounty)-disputes/\{id\}", _open_dispute),
        (r"^/api/v2/admin/(?:jobs|bounties)/\{id\}/auto-award$", _review_overdue),
        (r"^/api/v2/admin/(?:jobs|bounties)/\{id\}/award-override$", _others_in_review),
        (r"^/admin/tasks/\{taskId\}/refund$", _any_paid_job),
        (_INVITATION + r"/withdraw$", _own_invitation_sent),
        # worker side
        (_JOB + r"/applications$", _others_open_job),
        (r"^/api/v2/(?:owner/)?(?:job|bounty)-applications/\{id\}/withdraw$", _own_application),
        (_INVITATION + r"/respond$", _own_invitation_received),
        (_SLOT + r"$", _own_granted_slot),
        (_SLOT + r"/acknowledge$", _own_granted_slot),
        (_SLOT + r"/withdraw$", _own_granted_slot),
        (_SLOT + r"/(?:input-files|uploads|submit)$", _own_acknowledged_slot),
        (r"^/api/v2/(?:owner/)?submissions/\{id\}/status$", _own_submission),
        (r"^/api/v2/agent-notifications/\{id\}/read$", _own_notification),
        # offerings: the agent's own, and the owner's mirrors; the directory's profiles by handle
        (r"^/api/v2/(?:agents/me|owner/agents/\{agentId\})/offerings/\{offeringId\}", _own_offering),
        (r"^/api/v2/directory/agents/\{handle\}$", _listed_handle),
        # setup links: the agent's own (by id), its owner's (by the URL's code)
        (r"^/api/v2/agents/me/setup-links/\{id\}$", _own_setup_link),
        (r"^/api/v2/setup-links/\{code\}", _own_setup_link),
        # onboarding: sessions by id or slug, registration drafts (the agent-token routes pin their slug)
        (r"^/api/onboarding/sessions/\{(?:sessionId|slug)\}", _own_onboarding_session),
        (r"^/api/agent/onboard/\{slug\}/claim$", _own_onboarding_session),
        (r"^/api/agent/register/\{slug\}/(?:claim|activate)$", _own_draft_claimed),
        (r"^/api/agent/register/\{slug\}/", _unclaimed_draft),
    ]
]


def path_factory_for(route: RouteDef) -> PathFactory | None:
    for pattern, factory in PATH_FACTORIES:
        if pattern.search(route.path):
            return factory
    return None


PARAM_FACTORIES: dict[str, Factory] = {
    "agentId": _agent,
    "keyId": _key,
    "apiKeyId": _key,
    "code": _claim_code,
    "signupId": _signup,
    "reportId": _bug_report,
    "taskId": _task,
    "transactionId": _ledger_transaction,
    "buyerProfileId": _buyer_profile,
    "categoryId": _category,
    "tagId": _tag,
    "requestId": _tag_request,
    "slug": _slug,
    "sessionId": _onboarding_session_id,
    "userId": _user,
    "documentId": _document,
    "notificationId": _owner_notification,
}

_OPEN_TO_APPLY = (
    "the job is the requester's, not the applicant's: a worker of any other owner may apply to an open job "
    "(a job that is not open is a 404 to a non-requester: tests/test_jobs_isolation.py)"
)

# S/Kr/Kw routes whose path parameter is not an object with an owner, so "another owner's object -> 404"
# does not apply: (method, path) -> why.
NOT_OWNED: dict[tuple[str, str], str] = {
    ("POST", "/api/v2/claim/{code}"): "a claim code is a bearer capability: whoever holds it may claim",
    ("POST", "/api/v2/jobs/{id}/applications"): _OPEN_TO_APPLY,
    ("POST", "/api/v2/bounties/{id}/applications"): _OPEN_TO_APPLY,
}


def factory_for(name: str) -> Factory | None:
    """The factory for a parameter: by exact name, else by its camel-case suffix (sellerAgentId -> agentId)."""
    if name in PARAM_FACTORIES:
        return PARAM_FACTORIES[name]
    for known, factory in PARAM_FACTORIES.items():
        if name.endswith(known[0].upper() + known[1:]):
            return factory
    return None


def placeholder_path(route: RouteDef, value: str = PLACEHOLDER_ID) -> str:
    return re.sub(r"{\w+}", value, route.path)


async def fill_path(
    w: World,
    route: RouteDef,
    actor: Actor,
    pinned: dict[str, str] | None = None,
    refs: dict[str, str] | None = None,
) -> str:
    """The route's path with an object of actor's for every parameter: from the route's PATH_FACTORIES entry,
    else by parameter name. Raises LookupError naming a parameter that has no factory. With refs, also
    collects the ids the request body must name (see `sample_body`): the actor's agent as `requesterAgentId`,
    and whatever else the path factory made."""
    made: dict[str, str] = {}
    if refs is not None and actor.agent_id is not None:
        refs["requesterAgentId"] = actor.agent_id
    path_factory = path_factory_for(route) if route.path_params else None
    if path_factory is not None:
        made = await path_factory(w, actor)
        if refs is not None:
            refs.update({k: v for k, v in made.items() if k not in route.path_params})
    path = route.path
    for name in route.path_params:
        if pinned and name in pinned:
            value = pinned[name]
        elif name in made:
            value = made[name]
        else:
            factory = factory_for(name)
            if factory is None:
                raise LookupError(name)
            value = await factory(w, actor)
        path = path.replace("{" + name + "}", value)
    return path


async def fill_query(w: World, route: RouteDef, actor: Actor | None) -> dict[str, Any]:
    """The route's required query parameters; those naming an object come from the factories (for actor)."""
    if route.query is None:
        return {}
    schema, defs = model_schema(route.query)
    params: dict[str, Any] = {}
    for name in schema.get("required", []):
        factory = factory_for(name)
        if factory is not None and actor is not None:
            params[name] = await factory(w, actor)
        else:
            params[name] = sample(schema["properties"][name], defs, name)
    return params


# --- one app per database for a test module --------------------------------------------------------


@contextlib.asynccontextmanager
async def open_world(
    database_url: str, tmp_root: Path, *, wipe: bool = True, **overrides: Any
) -> AsyncIterator[World]:
    settings = make_settings(database_url, tmp_root, machine_token=MACHINE_TOKEN, **overrides)
    if database_url not in conftest._migrated:
        await migrate_and_seed(settings)
        conftest._migrated.add(database_url)
        conftest.mark_seeded(database_url)
    core = Core.build(settings)
    try:
        yield World(core=core, app=create_app(core=core))
    finally:
        await core.bus.drain()
        await core.mailer.drain()
        if wipe:
            await conftest._wipe(core)
        await core.db.dispose()


def database_url_for(request: Any) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url"))
