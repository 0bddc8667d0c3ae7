"""Users, as staff administer them.

- List and detail are any staff role's; SUPPORT's detail is redacted (no balance or transactions, no audit
  entries, no session forensics, no consent fingerprints), the other roles see it whole.
- A role change is SUPERADMIN's; the last active SUPERADMIN cannot be demoted (409 `last_superadmin`).
- Status: SUSPENDED ends every session and revokes every credential the user holds (their keys and their
  agents', enroll and install tokens, onboarding sessions, open setup links); ACTIVE reinstates (the
  credentials stay revoked: the owner mints new ones). DELETED is SUPERADMIN's: the same revocations, the
  account soft-deleted (`deletedAt`) and its agents taken out of the directory (INACTIVE). Nobody changes
  their own status or role.
- Key reset revokes every key of the user and of their agents.
- The mirror (SUPERADMIN) is a read-only snapshot of what the user sees, never a session as them.
Each change is audited in its transaction: who, what, the target, before and after, the reason.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock
from callboard_core.agents.models import Agent, AgentStatus
from callboard_core.api_keys import service as api_keys
from callboard_core.api_keys.models import ApiKey
from callboard_core.audit import service as audit
from callboard_core.auth import revocation
from callboard_core.auth import sessions as user_sessions
from callboard_core.auth.models import UserSession
from callboard_core.errors import Conflict, Forbidden, NotFound
from callboard_core.ledger import service as ledger
from callboard_core.principals import Actor
from callboard_core.security.permissions import Permission, Role
from callboard_core.staff import schemas as staff_schemas
from callboard_core.users.models import LegalConsent, User, UserStatus

RECENT = 20  # transactions and audit entries shown on a user's detail


def admin_view(user: User) -> staff_schemas.AdminUser:
    return staff_schemas.AdminUser(
        id=user.id,
        email=user.email,
        username=user.username,
        name=user.name,
        role=user.role,
        status=user.status,
        email_verified=user.email_verified_at is not None,
        preview_access=user.preview_access,
        created_at=user.created_at,
        updated_at=user.updated_at,
        deleted_at=user.deleted_at,
    )


async def _user(session: AsyncSession, user_id: str) -> User:
    user = await session.get(User, user_id, populate_existing=True)
    if user is None:
        raise NotFound("No such user.", code="user_not_found", userId=user_id)
    return user


async def _agents(session: AsyncSession, user_id: str) -> list[staff_schemas.OwnedAgent]:
    rows = await session.scalars(select(Agent).where(Agent.owner_id == user_id).order_by(Agent.created_at))
    return [
        staff_schemas.OwnedAgent(
            id=a.id,
            handle=a.handle,
            name=a.name,
            status=a.status,
            archived=a.archived_at is not None,
            deleted=a.deleted_at is not None,
        )
        for a in rows
    ]


def _not_yourself(actor: Actor, user_id: str) -> None:
    if actor.user_id == user_id:
        raise Forbidden(
            "Staff cannot change their own role or status; ask another administrator.", code="own_account"
        )


# --- reads ------------------------------------------------------------------------------------------------


async def list_users(session: AsyncSession, q: staff_schemas.AdminUserQuery) -> staff_schemas.AdminUserList:
    conditions = []
    if q.role:
        conditions.append(User.role == q.role)
    if q.status:
        conditions.append(User.status == q.status)
    if not q.include_deleted and q.status != UserStatus.DELETED:
        conditions.append(User.status != UserStatus.DELETED)
    if q.query and q.query.strip():
        text = q.query.strip().lower()
        conditions.append(
            or_(
                *(
                    func.lower(c).contains(text, autoescape=True)
                    for c in (User.email, User.username, User.name)
                )
            )
        )
    total = await session.scalar(select(func.count()).select_from(User).where(*conditions))
    rows = await session.scalars(
        select(User).where(*conditions).order_by(User.created_at.desc(), User.id.desc()).limit(q.limit)
    )
    return staff_schemas.AdminUserList(users=[admin_view(u) for u in rows], total=int(total or 0))


async def _forensics(session: AsyncSession, user_id: str) -> staff_schemas.SessionForensics:
    now = clock.now()
    active = await session.scalar(
        select(func.count())
        .select_from(UserSession)
        .where(UserSession.user_id == user_id, UserSession.revoked_at.is_(None), UserSession.expires_at > now)
    )
    last = await session.scalar(
        select(UserSession)
        .where(UserSession.user_id == user_id)
        .order_by(UserSession.created_at.desc())
        .limit(1)
    )
    return staff_schemas.SessionForensics(
        active=int(active or 0),
        last_started_at=last.created_at if last else None,
        last_ip_address=last.ip_address if last else None,
        last_user_agent=last.user_agent if last else None,
    )


async def detail(session: AsyncSession, actor: Actor, user_id: str) -> staff_schemas.AdminUserDetail:
    user = await _user(session, user_id)
    keys = await session.scalar(
        select(func.count())
        .select_from(ApiKey)
        .where(
            or_(
                ApiKey.owner_id == user_id,
                ApiKey.agent_id.in_(select(Agent.id).where(Agent.owner_id == user_id)),
            ),
            ApiKey.revoked_at.is_(None),
        )
    )
    whole = actor.can(Permission.VIEW_UNREDACTED) and actor.can(Permission.VIEW_FINANCIALS)
    view = staff_schemas.AdminUserDetail(
        user=admin_view(user),
        agents=await _agents(session, user_id),
        active_api_keys=int(keys or 0),
        redacted=not whole,
        balance=None,
        transactions=None,
        audit_entries=None,
        sessions=None,
        consents=None,
    )
    if not whole:
        return view
    view.balance = await ledger.balances(session, user_id)
    view.transactions = (await ledger.statement(session, user_id, limit=RECENT)).entries
    view.audit_entries = [
        staff_schemas.AuditEntry.of(e) for e in await audit.about(session, "user", user_id, RECENT)
    ]
    view.sessions = await _forensics(session, user_id)
    consents = await session.scalars(
        select(LegalConsent).where(LegalConsent.user_id == user_id).order_by(LegalConsent.accepted_at.desc())
    )
    view.consents = [
        staff_schemas.Consent(
            terms_version=c.terms_version,
            privacy_version=c.privacy_version,
            ip_address=c.ip_address,
            user_agent=c.user_agent,
            accepted_at=c.accepted_at,
        )
        for c in consents
    ]
    return view


# --- changes ----------------------------------------------------------------------------------------------


def _record(session: AsyncSession, actor: Actor, action: str, user_id: str, **data: Any) -> None:
    audit.by(session, actor, action, "user", user_id, **{k: v for k, v in data.items() if v is not None})


async def change_role(
    session: AsyncSession, actor: Actor, user_id: str, body: staff_schemas.RoleUpdate
) -> staff_schemas.AdminUser:
    actor.require(Permission.CHANGE_USER_ROLE)
    _not_yourself(actor, user_id)
    user = await _user(session, user_id)
    before = user.role
    if before == Role.SUPERADMIN and body.role != Role.SUPERADMIN:
        others = await session.scalar(
            select(func.count())
            .select_from(User)
            .where(User.role == Role.SUPERADMIN, User.status == UserStatus.ACTIVE, User.id != user_id)
        )
        if not others:
            raise Conflict("The last active SUPERADMIN keeps the role.", code="last_superadmin")
    user.role = body.role
    user.updated_at = clock.now()
    await session.flush()
    _record(session, actor, "user.role_changed", user_id, before=before, after=body.role)
    return admin_view(user)


async def change_status(
    session: AsyncSession, actor: Actor, user_id: str, body: staff_schemas.StatusUpdate
) -> staff_schemas.AdminUser:
    if body.status == UserStatus.DELETED:
        actor.require(Permission.DELETE_USER)
    _not_yourself(actor, user_id)
    user = await _user(session, user_id)
    before = user.status
    if before == UserStatus.DELETED and body.status != UserStatus.DELETED:
        actor.require(Permission.DELETE_USER)  # undeleting is the deleter's call too
    now = clock.now()
    revoked: list[str] = []
    if body.status != UserStatus.ACTIVE and before != body.status:
        await user_sessions.revoke_all(session, user_id)
        revoked = (await revocation.revoke_grants(session, user, f"user_{body.status.lower()}")).keys
    user.status = body.status
    user.updated_at = now
    if body.status == UserStatus.DELETED:
        user.deleted_at = user.deleted_at or now
        # Out of the directory: the agents stop being listed and working (their keys are revoked above).
        await session.execute(
            update(Agent)
            .where(Agent.owner_id == user_id, Agent.status == AgentStatus.ACTIVE)
            .values(status=AgentStatus.INACTIVE, updated_at=now)
            .execution_options(synchronize_session=False)
        )
    elif before == UserStatus.DELETED:
        user.deleted_at = None
    await session.flush()
    _record(
        session,
        actor,
        "user.status_changed",
        user_id,
        before=before,
        after=body.status,
        reason=body.reason,
        adminNotes=body.admin_notes,
        keysRevoked=revoked or None,
    )
    return admin_view(user)


async def delete(
    session: AsyncSession, actor: Actor, user_id: str, body: staff_schemas.DeleteBody | None
) -> staff_schemas.AdminUser:
    """The soft delete (SUPERADMIN): as a status change to DELETED."""
    reason = body.reason if body is not None else None
    return await change_status(
        session, actor, user_id, staff_schemas.StatusUpdate(status="DELETED", reason=reason)
    )


async def reset_keys(session: AsyncSession, actor: Actor, user_id: str) -> staff_schemas.KeysReset:
    await _user(session, user_id)
    agent_ids = select(Agent.id).where(Agent.owner_id == user_id).scalar_subquery()
    revoked = await api_keys.revoke_for_owner(session, user_id, reason="staff_reset", agent_ids=agent_ids)
    _record(session, actor, "user.api_keys_reset", user_id, revoked=revoked)
    return staff_schemas.KeysReset(revoked=revoked)


async def mirror(session: AsyncSession, actor: Actor, user_id: str) -> staff_schemas.Mirror:
    actor.require(Permission.MIRROR_USER)
    user = await _user(session, user_id)
    _record(session, actor, "user.mirrored", user_id)
    return staff_schemas.Mirror(
        user=admin_view(user),
        agents=await _agents(session, user_id),
        balance=await ledger.balances(session, user_id),
        transactions=(await ledger.statement(session, user_id, limit=RECENT)).entries,
    )
