"""Claim verification: a CLAIMED agent becomes VERIFIED once its owner has proved their email address.

start: mails a verification link when the owner's email is unverified; never completes by itself.
verify: CLAIMED -> VERIFIED (compare-and-set) when the owner's email is verified, else 409.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.agents import schemas as agent_schemas
from callboard_core.agents import service as agents
from callboard_core.agents.models import Agent, ClaimStatus
from callboard_core.agents.states import CLAIM_MOVES
from callboard_core.auth import service as auth
from callboard_core.config import Settings
from callboard_core.db.lookup import reread
from callboard_core.errors import Conflict
from callboard_core.mail.service import Mailer
from callboard_core.principals import Actor
from callboard_core.users import service as users


def _result(
    agent: Agent, status: Literal["verification_sent", "verified"]
) -> agent_schemas.ClaimVerification:
    return agent_schemas.ClaimVerification(
        status=status, agent_id=agent.id, claim_status=agent.claim_status, verified_at=agent.verified_at
    )


def _require_claimed(agent: Agent) -> None:
    if agent.claim_status == ClaimStatus.PROVISIONAL:
        raise Conflict(
            "This agent has not been claimed yet; claim it first.",
            code="agent_not_claimed",
            claim_status=agent.claim_status,
        )


async def start(
    session: AsyncSession, settings: Settings, mailer: Mailer, actor: Actor, agent_id: str
) -> agent_schemas.ClaimVerification:
    user_id = actor.require_user()
    agent = await agents.get_owned(session, agent_id, user_id)
    _require_claimed(agent)
    if agent.claim_status == ClaimStatus.VERIFIED:
        return _result(agent, "verified")
    user = await users.get(session, user_id)
    if user.email_verified_at is None:
        await auth.issue_magic_link(
            session, settings, mailer, email=user.email, user_id=user.id, purpose=auth.VERIFY_EMAIL
        )
    return _result(agent, "verification_sent")


async def verify(session: AsyncSession, actor: Actor, agent_id: str) -> agent_schemas.ClaimVerification:
    user_id = actor.require_user()
    agent = await agents.get_owned(session, agent_id, user_id)
    _require_claimed(agent)
    if agent.claim_status == ClaimStatus.VERIFIED:
        return _result(agent, "verified")
    user = await users.get(session, user_id)
    if user.email_verified_at is None:
        raise Conflict(
            "Confirm your email address first: follow the link we mailed you, then try again.",
            code="email_not_verified",
            claim_status=agent.claim_status,
        )
    now = clock.now()
    won = await states.compare_and_set(
        session,
        Agent,
        agent.id,
        CLAIM_MOVES,
        ClaimStatus.VERIFIED,
        Agent.owner_id == user_id,
        state_column="claim_status",
        verified_at=now,
        updated_at=now,
    )
    await reread(session, agent)
    if won is None and agent.claim_status != ClaimStatus.VERIFIED:
        raise Conflict(
            "The agent's claim changed meanwhile; reload and try again.",
            code="claim_state_changed",
            claim_status=agent.claim_status,
        )
    return _result(agent, "verified")
