"""Agents: registration, the agent's own view, claim by an owner, enroll tokens, heartbeats, key rotation."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.agents import handles, presence, reputation
from callboard_core.agents import keys as agent_keys
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents.models import (
    Agent,
    AgentCapability,
    AgentClaimLink,
    AgentEnrollToken,
    AgentHeartbeat,
    AgentStatus,
    CapabilitySource,
    ClaimStatus,
)
from callboard_core.agents.states import CLAIM_MOVES
from callboard_core.api_keys import service as api_keys
from callboard_core.capabilities.models import CapabilityTag, TaxonomyStatus
from callboard_core.config import Settings
from callboard_core.db.engine import dialect_of, insert_for
from callboard_core.db.readcache import MISSING, ReadCache
from callboard_core.errors import Conflict, Forbidden, Gone, NotFound, ValidationFailed
from callboard_core.guidance import Act, Step, hint, step
from callboard_core.ids import new_id, random_string
from callboard_core.principals import Actor
from callboard_core.security import tokens

CLAIM_LINK_TTL = timedelta(days=7)
ENROLL_TOKEN_TTL = timedelta(hours=1)


# --- views ---------------------------------------------------------------------------------------


def to_response(agent: Agent) -> agent_schemas.AgentResponse:
    return agent_schemas.AgentResponse(**_fields(agent))


def _fields(agent: Agent) -> dict:
    return dict(
        id=agent.id,
        name=agent.name,
        handle=agent.handle,
        owner_id=agent.owner_id,
        endpoint_url=agent.endpoint_url,
        description=agent.description,
        capabilities=agent.capability_slugs,
        pricing_model=agent.pricing_model,
        price_per_unit=agent.price_per_unit,
        currency=agent.currency,
        sla_response_ms=agent.sla_response_ms,
        sla_uptime_pct=agent.sla_uptime_pct,
        auth_method=agent.auth_method,
        status=agent.status,
        reputation_score=reputation.current(agent.reputation_score or 0.0),
        total_tasks=agent.total_tasks,
        success_rate=agent.success_rate,
        avg_response_ms=agent.avg_response_ms,
        dispute_rate=agent.dispute_rate,
        metadata=agent.metadata_json,
        sample_input=agent.sample_input,
        sample_output=agent.sample_output,
        processor_account_id=agent.processor_account_id,
        processor_onboarding_complete=agent.processor_onboarding_complete,
        processor_charges_enabled=agent.processor_charges_enabled,
        processor_payouts_enabled=agent.processor_payouts_enabled,
        bounty_profile=agent_schemas.AgentBountyProfileSummary(
            claim_status=agent.claim_status,
            requester_enabled=agent.requester_enabled,
            worker_enabled=agent.worker_enabled,
            auto_publish_limit_cents=agent.auto_publish_limit_cents,
            claimed_at=agent.claimed_at,
            verified_at=agent.verified_at,
        ),
        created_at=agent.created_at,
        updated_at=agent.updated_at,
    )


async def to_dashboard(session: AsyncSession, agent: Agent) -> agent_schemas.AgentDashboardResponse:
    last_beat = (
        await session.execute(
            select(func.max(AgentHeartbeat.last_seen_at)).where(AgentHeartbeat.agent_id == agent.id)
        )
    ).scalar_one()
    keys = (await api_keys.count_active(session, [agent.id])).get(agent.id, 0)
    return agent_schemas.AgentDashboardResponse(
        **_fields(agent),
        intent=agent.intent,
        archived=agent.archived_at is not None,
        archived_at=agent.archived_at,
        is_house=agent.is_house,
        last_heartbeat_at=last_beat,
        active_key_count=keys,
    )


def public_card(agent: Agent) -> agent_schemas.AgentPublicCard:
    return agent_schemas.AgentPublicCard(
        id=agent.id,
        name=agent.name,
        handle=agent.handle,
        description=agent.description,
        capabilities=agent.capability_slugs,
        endpoint_url=agent.endpoint_url,
        created_at=agent.created_at,
    )


# --- lookups -------------------------------------------------------------------------------------


async def get_live(session: AsyncSession, agent_id: str) -> Agent:
    """An agent that exists and is not deleted (the caller's own, via its key)."""
    agent = await session.get(Agent, agent_id)
    if agent is None or agent.deleted_at is not None:
        raise NotFound("No such agent.", code="agent_not_found")
    return agent


async def get_owned(session: AsyncSession, agent_id: str, owner_id: str) -> Agent:
    """An agent of this owner. Another owner's agent is indistinguishable from a missing one (404)."""
    agent = await session.get(Agent, agent_id)
    if agent is None or agent.owner_id != owner_id or agent.deleted_at is not None:
        raise NotFound("No such agent.", code="agent_not_found")
    return agent


async def me(
    session: AsyncSession, actor: Actor, cache: ReadCache | None = None
) -> agent_schemas.AgentResponse:
    """The calling agent's own record (read-through cached on SQLite; see db/readcache.py)."""
    agent_id = actor.require_agent()
    if cache is None:
        return to_response(await get_live(session, agent_id))
    key = ("agent_me", agent_id)
    hit = cache.get(key)
    if hit is not MISSING:
        return hit
    return await cache.load(key, lambda: _load_me(session, agent_id))


async def _load_me(session: AsyncSession, agent_id: str) -> agent_schemas.AgentResponse:
    return to_response(await get_live(session, agent_id))


# --- capabilities and handles --------------------------------------------------------------------


async def split_capabilities(
    session: AsyncSession, slugs: Sequence[str]
) -> tuple[list[CapabilityTag], list[str]]:
    """(the known, active capability tags among these slugs, the other slugs), both in order, duplicates
    dropped; slugs are matched trimmed and lower-cased."""
    wanted = list(dict.fromkeys(x.strip().lower() for x in slugs))
    if not wanted:
        return [], []
    found = {
        t.slug: t
        for t in (
            await session.execute(
                select(CapabilityTag).where(
                    CapabilityTag.slug.in_(wanted), CapabilityTag.status == TaxonomyStatus.ACTIVE
                )
            )
        ).scalars()
    }
    return [found[x] for x in wanted if x in found], [x for x in wanted if x not in found]


async def resolve_capabilities(
    session: AsyncSession, slugs: Sequence[str], field: str = "capabilities"
) -> list[CapabilityTag]:
    """Known, active capability tags for these slugs (order kept, duplicates dropped), else a field error."""
    tags, unknown = await split_capabilities(session, slugs)
    if unknown:
        raise ValidationFailed(
            f"Unknown capability tag(s): {', '.join(unknown)}. Name active capability tags by their slugs "
            "(the public capability list has them).",
            errors=[
                {"field": field, "code": "unknown_capability", "message": f"unknown tag '{x}'"}
                for x in unknown
            ],
        )
    return tags


async def set_capabilities(session: AsyncSession, agent: Agent, slugs: Sequence[str]) -> None:
    """Replace the declared tags; earned and staff-granted tags stay."""
    tags = await resolve_capabilities(session, slugs)
    keep = [link for link in agent.capability_links if link.source != CapabilitySource.DECLARED]
    kept_ids = {link.tag_id for link in keep}
    agent.capability_links = keep + [
        AgentCapability(
            tag_id=t.id,
            tag_slug=t.slug,
            source=CapabilitySource.DECLARED,
            presence_rank=agent.presence_rank or 0,
        )
        for t in tags
        if t.id not in kept_ids
    ]


def _slugify(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:30].strip("-")
    return slug if len(slug) >= 3 else f"agent-{slug}".strip("-")


async def _handle_taken(session: AsyncSession, handle: str) -> bool:
    return (await session.execute(select(Agent.id).where(Agent.handle == handle))).first() is not None


async def check_handle_free(session: AsyncSession, handle: str) -> None:
    """422 for a reserved handle, 409 for one another agent holds."""
    handles.check(handle)
    if await _handle_taken(session, handle):
        raise Conflict(f"The handle '{handle}' is taken.", code="handle_taken")


async def choose_handle(session: AsyncSession, requested: str | None, name: str) -> str:
    """The requested handle (refused when reserved or taken), else one made from the name."""
    if requested:
        await check_handle_free(session, requested)
        return requested
    base = _slugify(name)
    if not handles.is_reserved(base) and not await _handle_taken(session, base):
        return base
    if handles.is_reserved(base):
        base = f"agent-{base}"[:30]
    for _ in range(10):
        candidate = f"{base[:33]}-{random_string(6)}"
        if not handles.is_reserved(candidate) and not await _handle_taken(session, candidate):
            return candidate
    raise Conflict("Could not find a free handle; pass one explicitly.", code="handle_taken")


async def flush_agent(session: AsyncSession) -> None:
    """Flush, turning a handle race (two registrations, one handle) into 409 rather than 500."""
    try:
        async with session.begin_nested():
            await session.flush()
    except IntegrityError:
        raise Conflict("The handle is taken.", code="handle_taken") from None


# --- registration --------------------------------------------------------------------------------


async def _consume_enroll_token(session: AsyncSession, token: str) -> str:
    """Single use, compare-and-set: of two registrations racing with one token, one wins."""
    now = clock.now()
    row = (
        await session.execute(
            update(AgentEnrollToken)
            .where(
                AgentEnrollToken.token_hash == tokens.hash_token(token),
                AgentEnrollToken.used_at.is_(None),
                AgentEnrollToken.expires_at > now,
            )
            .values(used_at=now)
            .returning(AgentEnrollToken.id, AgentEnrollToken.owner_id)
        )
    ).one_or_none()
    if row is None:
        raise ValidationFailed(
            "The enroll token is unknown, used or expired; ask your owner for a new one.",
            errors=[
                {
                    "field": "enrollToken",
                    "code": "invalid_enroll_token",
                    "message": "unknown, used or expired",
                }
            ],
            code="invalid_enroll_token",
        )
    return str(row.owner_id)


async def register(
    session: AsyncSession, settings: Settings, body: agent_schemas.AgentRegister
) -> agent_schemas.AgentRegistered:
    """Register an agent with no human account. Provisional agents get a read-only key and a claim URL;
    an enroll token makes the agent claimed at once, with a read+write key and no claim URL."""
    owner_id = await _consume_enroll_token(session, body.enroll_token) if body.enroll_token else None
    now = clock.now()
    agent = Agent(
        name=body.name,
        handle=await choose_handle(session, body.handle, body.name),
        description=body.description,
        endpoint_url=body.endpoint_url,
        intent=body.intent,
        owner_id=owner_id,
        status=AgentStatus.ACTIVE,
        claim_status=ClaimStatus.CLAIMED if owner_id else ClaimStatus.PROVISIONAL,
        claimed_at=now if owner_id else None,
        capability_links=[],
    )
    session.add(agent)
    await set_capabilities(session, agent, body.capabilities or [])
    await flush_agent(session)
    if owner_id:
        await session.execute(
            update(AgentEnrollToken)
            .where(AgentEnrollToken.token_hash == tokens.hash_token(body.enroll_token or ""))
            .values(agent_id=agent.id)
        )
    scopes = api_keys.READ_WRITE if owner_id else [api_keys.READ]
    plaintext, key = await api_keys.issue(
        session, agent_id=agent.id, owner_id=owner_id, scopes=scopes, label="registration"
    )
    claim = None if owner_id else await _new_claim_link(session, settings, agent)
    next_actions = (
        [hint("{HOME}"), hint("{HEARTBEAT}")]
        if owner_id
        else [
            hint("Give claimUrl to your human owner: the key is read-only until they claim you."),
            hint("{WHOAMI}"),
            hint("{HEARTBEAT}"),
        ]
    )
    return agent_schemas.AgentRegistered(
        agent=to_response(agent),
        api_key=plaintext,
        key_info=await agent_keys.info_one(session, key),
        claim_url=claim.claim_url if claim else None,
        claim_expires_at=claim.expires_at if claim else None,
        next_actions=next_actions,
    )


# --- the agent's own view ------------------------------------------------------------------------


def ask_owner_for_work(agent_id: str, why: str = "") -> Step:
    """What an agent whose worker role is off is told: only its owner turns it on (it lists the agent in the
    public directory), on the agent's page."""
    return step(
        Act.OWNER_AGENT,
        why + "Ask your owner to turn on your worker role (Take work) on your page, signed in to callboard.",
        agent_id=agent_id,
    )


async def update_me(
    session: AsyncSession, actor: Actor, body: agent_schemas.AgentSelfUpdate
) -> agent_schemas.AgentResponse:
    agent = await get_live(session, actor.require_agent())
    data = body.model_dump(exclude_unset=True)  # name and endpointUrl, when sent, are not null (Omittable)
    if data.get("worker_enabled") and not agent.worker_enabled and agent.owner_id is not None:
        raise Forbidden(
            "Only your owner can turn your worker role on: it lists you in the public directory.",
            code="owner_decides_listing",
            next_action=ask_owner_for_work(agent.id),
        )
    if "capabilities" in data:
        await set_capabilities(session, agent, data.pop("capabilities") or [])
    for field, value in data.items():
        if field in ("requester_enabled", "worker_enabled", "intent") and value is None:
            continue
        setattr(agent, field, value)
    agent.updated_at = clock.now()
    await session.flush()
    return to_response(agent)


# --- claim ---------------------------------------------------------------------------------------


async def mint_claim_link(session: AsyncSession, settings: Settings, agent: Agent) -> agent_schemas.ClaimLink:
    """A fresh claim link for a provisional agent; earlier unused links stop working."""
    if agent.claim_status != ClaimStatus.PROVISIONAL:
        raise Conflict(
            "This agent is claimed already.", code="already_claimed", claim_status=agent.claim_status
        )
    await session.execute(
        update(AgentClaimLink)
        .where(
            AgentClaimLink.agent_id == agent.id,
            AgentClaimLink.used_at.is_(None),
            AgentClaimLink.revoked_at.is_(None),
        )
        .values(revoked_at=clock.now())
    )
    return await _new_claim_link(session, settings, agent)


async def _new_claim_link(session: AsyncSession, settings: Settings, agent: Agent) -> agent_schemas.ClaimLink:
    """A claim link for the agent, leaving any other as it is (`register` calls it for an agent it has just
    made, which has none to revoke)."""
    code = tokens.new_token(24)
    link = AgentClaimLink(
        agent_id=agent.id, code_hash=tokens.hash_token(code), expires_at=clock.now() + CLAIM_LINK_TTL
    )
    session.add(link)
    await session.flush()
    return agent_schemas.ClaimLink(
        claim_url=f"{settings.base_url.rstrip('/')}/claim/{code}", expires_at=link.expires_at
    )


async def claim_link_for_me(
    session: AsyncSession, settings: Settings, actor: Actor
) -> agent_schemas.ClaimLink:
    return await mint_claim_link(session, settings, await get_live(session, actor.require_agent()))


async def _live_claim_link(
    session: AsyncSession, code: str, *, claiming: bool = False
) -> tuple[AgentClaimLink, Agent]:
    link = (
        (
            await session.execute(
                select(AgentClaimLink).where(AgentClaimLink.code_hash == tokens.hash_token(code))
            )
        ).scalar_one_or_none()
        if 0 < len(code) <= 128
        else None
    )
    if link is None or link.revoked_at is not None:
        raise NotFound("No such claim link; ask the agent for a fresh one.", code="claim_link_not_found")
    agent = await session.get(Agent, link.agent_id)
    if agent is None or agent.deleted_at is not None:
        raise NotFound("No such claim link; ask the agent for a fresh one.", code="claim_link_not_found")
    if link.used_at is not None:
        if claiming:
            # Losing a race to the same link reads the same whichever database serialised it.
            raise Conflict("This agent has been claimed already.", code="already_claimed")
        raise Gone("This claim link was used already.", code="claim_link_used")
    if link.expires_at <= clock.now():
        raise Gone(
            "This claim link has expired; the agent can mint a new one.",
            code="claim_link_expired",
            next_action=step(Act.CLAIM_LINK, "The agent mints a fresh claim link for its owner."),
        )
    return link, agent


async def claim_preview(session: AsyncSession, code: str) -> agent_schemas.ClaimPreview:
    link, agent = await _live_claim_link(session, code)
    return agent_schemas.ClaimPreview(
        agent=public_card(agent),
        claim_status=agent.claim_status,
        claimable=agent.claim_status == ClaimStatus.PROVISIONAL,
        expires_at=link.expires_at,
    )


async def claim(session: AsyncSession, actor: Actor, code: str) -> agent_schemas.ClaimResult:
    """Bind a provisional agent and its keys to the signed-in owner; its keys become read+write.

    Compare-and-set on the agent's claim status: of two people claiming at once, one wins, one gets 409."""
    user_id = actor.require_user()
    link, agent = await _live_claim_link(session, code, claiming=True)
    now = clock.now()
    won = await states.compare_and_set(
        session,
        Agent,
        agent.id,
        CLAIM_MOVES,
        ClaimStatus.CLAIMED,
        Agent.owner_id.is_(None),
        state_column="claim_status",
        owner_id=user_id,
        claimed_at=now,
        updated_at=now,
    )
    if won is None:
        raise Conflict("This agent has been claimed already.", code="already_claimed")
    await session.execute(
        update(AgentClaimLink)
        .where(AgentClaimLink.id == link.id)
        .values(used_at=now, claimed_by_user_id=user_id)
    )
    upgraded = await api_keys.hand_to_owner(session, agent.id, user_id)
    # The compare-and-set returned the claimed row (its capabilities reloaded): no refresh needed.
    return agent_schemas.ClaimResult(agent=to_response(won), upgraded_key_count=upgraded)


# --- enroll tokens -------------------------------------------------------------------------------


async def mint_enroll_token(
    session: AsyncSession, settings: Settings, actor: Actor
) -> agent_schemas.EnrollToken:
    token = "enr_" + tokens.new_token(24)
    row = AgentEnrollToken(
        owner_id=actor.require_user(),
        token_hash=tokens.hash_token(token),
        expires_at=clock.now() + ENROLL_TOKEN_TTL,
    )
    session.add(row)
    await session.flush()
    register_url = f"{settings.base_url.rstrip('/')}/api/v2/agents/register"
    prompt = (
        "Register with callboard, already claimed by your owner: POST "
        f'{register_url} with JSON {{"name": "<your name>", "endpointUrl": "<your URL>", '
        f'"enrollToken": "{token}"}}. Keep the apiKey from the response: it is shown once. '
        "The token works once and expires in one hour."
    )
    return agent_schemas.EnrollToken(
        enroll_token=token, expires_at=row.expires_at, prompt=prompt, register_url=register_url
    )


# --- policy --------------------------------------------------------------------------------------


async def policy_of(session: AsyncSession, actor: Actor, agent_id: str) -> agent_schemas.AgentPolicy:
    """One of the owner's agents' policy (another owner's agent is 404)."""
    agent = await get_owned(session, agent_id, actor.require_user())
    return _policy(agent)


def _policy(agent: Agent) -> agent_schemas.AgentPolicy:
    return agent_schemas.AgentPolicy(
        agent_id=agent.id,
        auto_publish_limit_cents=agent.auto_publish_limit_cents,
        intent=agent.intent,
        worker_enabled=agent.worker_enabled,
    )


async def update_policy(
    session: AsyncSession, actor: Actor, agent_id: str, body: agent_schemas.AgentPolicyUpdate
) -> agent_schemas.AgentPolicy:
    agent = await get_owned(session, agent_id, actor.require_user())
    if body.auto_publish_limit_cents is not None:
        agent.auto_publish_limit_cents = body.auto_publish_limit_cents
    if body.intent is not None:
        agent.intent = body.intent
    if body.worker_enabled is not None:
        agent.worker_enabled = body.worker_enabled
    agent.updated_at = clock.now()
    await session.flush()
    return _policy(agent)


# --- heartbeats ----------------------------------------------------------------------------------


def _heartbeat_record(beat: AgentHeartbeat) -> agent_schemas.HeartbeatRecord:
    return agent_schemas.HeartbeatRecord.model_validate(beat, from_attributes=True)


async def heartbeat(
    session: AsyncSession, actor: Actor, body: agent_schemas.HeartbeatBody
) -> agent_schemas.HeartbeatAck:
    """One row per (agent, runtimeId), updated in place: the latest state of each runtime.

    A single upsert, so concurrent beats of one runtime neither collide nor lose a count."""
    agent_id = actor.require_agent()
    now = clock.now()
    values = body.model_dump(exclude_unset=False)
    values["status"] = body.status or "ONLINE"
    values.update(last_seen_at=now, updated_at=now)
    upsert = (
        insert_for(dialect_of(session))(AgentHeartbeat)
        .values(id=new_id("hbt"), agent_id=agent_id, created_at=now, beat_count=1, **values)
        .on_conflict_do_update(
            index_elements=[AgentHeartbeat.agent_id, AgentHeartbeat.runtime_id],
            set_={**values, "beat_count": AgentHeartbeat.beat_count + 1},
        )
        .returning(AgentHeartbeat)
    )
    beat = (await session.execute(upsert, execution_options={"populate_existing": True})).scalar_one()
    await presence.refresh(session, agent_id, now)
    return agent_schemas.HeartbeatAck(heartbeat=_heartbeat_record(beat), server_time=now)


async def heartbeats(session: AsyncSession, actor: Actor) -> agent_schemas.HeartbeatList:
    rows = (
        await session.execute(
            select(AgentHeartbeat)
            .where(AgentHeartbeat.agent_id == actor.require_agent())
            .order_by(AgentHeartbeat.last_seen_at.desc())
            .limit(100)
        )
    ).scalars()
    return agent_schemas.HeartbeatList(heartbeats=[_heartbeat_record(b) for b in rows])


async def seller_workers(session: AsyncSession, actor: Actor, agent_id: str) -> agent_schemas.SellerWorkers:
    await get_owned(session, agent_id, actor.require_user())
    rows = (
        await session.execute(
            select(AgentHeartbeat)
            .where(AgentHeartbeat.agent_id == agent_id)
            .order_by(AgentHeartbeat.last_seen_at.desc())
            .limit(200)
        )
    ).scalars()
    return agent_schemas.SellerWorkers(
        workers=[
            agent_schemas.SellerWorkerHeartbeat(
                id=b.id,
                seller_agent_id=b.agent_id,
                worker_id=b.runtime_id,
                status=b.status,
                capabilities=[str(x) for x in b.capabilities_json]
                if isinstance(b.capabilities_json, list)
                else [],
                last_seen_at=b.last_seen_at,
                created_at=b.created_at,
                updated_at=b.updated_at,
                runtime=b.runtime,
                version=b.version,
                current_task_id=b.current_bounty_id,
                last_error=b.last_error,
                metadata=b.metadata_json,
            )
            for b in rows
        ]
    )


# --- key rotation --------------------------------------------------------------------------------


async def rotate_key(session: AsyncSession, actor: Actor) -> agent_schemas.KeyRotated:
    """Revoke the calling key (an owner-level key too) and issue its replacement with the same scopes and
    label. Compare-and-set: two concurrent rotations of one key cannot both mint a replacement."""
    key_id = actor.require_key().key_id
    plaintext, key = await agent_keys.replace(session, actor, key_id)
    return agent_schemas.KeyRotated(
        key=plaintext, key_info=await agent_keys.info_one(session, key), revoked_key_id=key_id
    )


def require_claimed(agent: Agent) -> None:
    if agent.claim_status == ClaimStatus.PROVISIONAL:
        raise Forbidden("This agent must be claimed by its owner first.", code="agent_not_claimed")
