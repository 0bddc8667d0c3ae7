"""The waitlist: public signup (tells the operating team) and staff administration (status, soft delete,
conversion into an account with preview access)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import clock, states
from callboard_core.audit import service as audit
from callboard_core.config import Settings
from callboard_core.db.lookup import reread
from callboard_core.errors import Conflict, NotFound
from callboard_core.mail.service import Mail, Mailer
from callboard_core.principals import Actor
from callboard_core.users import service as users
from callboard_core.users.models import SignupIntent
from callboard_core.waitlist import schemas as waitlist_schemas
from callboard_core.waitlist.models import WAITLIST_MOVES, WaitlistSignup, WaitlistStatus


def view(signup: WaitlistSignup) -> waitlist_schemas.WaitlistSignup:
    return waitlist_schemas.WaitlistSignup(
        id=signup.id,
        email=signup.email,
        name=signup.name,
        use_case=signup.use_case,
        role=signup.role,
        company=signup.company,
        status=signup.status,
        notes=signup.notes,
        notified_at=signup.notified_at,
        deleted_at=signup.deleted_at,
        created_at=signup.created_at,
        updated_at=signup.updated_at,
    )


async def _by_email(session: AsyncSession, email: str) -> WaitlistSignup | None:
    return (
        await session.execute(select(WaitlistSignup).where(WaitlistSignup.email == email))
    ).scalar_one_or_none()


async def get(session: AsyncSession, signup_id: str) -> WaitlistSignup:
    signup = await session.get(WaitlistSignup, signup_id)
    if signup is None:
        raise NotFound("No such waitlist signup.", code="waitlist_signup_not_found", signupId=signup_id)
    return signup


# --- public --------------------------------------------------------------------------------------


async def join(
    session: AsyncSession, mailer: Mailer, settings: Settings, body: waitlist_schemas.WaitlistJoin
) -> waitlist_schemas.WaitlistJoined:
    """Join the waitlist. Joining again with the same email answers the same way with the first signup's id
    (no second row, no mail, nothing that tells a stranger the address was there already)."""
    email = users.normalize_email(str(body.email))
    existing = await _by_email(session, email)
    if existing is None:
        signup = WaitlistSignup(
            email=email,
            name=body.name,
            use_case=body.use_case,
            role=body.role,
            company=body.company,
            status=WaitlistStatus.PENDING,
        )
        try:
            async with session.begin_nested():
                session.add(signup)
                await session.flush()
        except IntegrityError:
            # Two joins raced with one email: the other one's row stands.
            existing = await _by_email(session, email)
            if existing is None:
                raise
        else:
            await mailer.send(
                session,
                Mail(
                    kind="waitlist_joined",
                    to=settings.ops_email,
                    subject=f"Waitlist: {body.name} ({body.role})",
                    body=(
                        f"A new waitlist signup.\n\nName: {body.name}\nEmail: {email}\nRole: {body.role}\n"
                        f"Company: {body.company or '-'}\n\nUse case:\n{body.use_case}\n\n"
                        f"Review it at {settings.base_url.rstrip('/')}/admin/waitlist\n"
                    ),
                ),
            )
            return waitlist_schemas.WaitlistJoined(
                id=signup.id, email=signup.email, created_at=signup.created_at
            )
    return waitlist_schemas.WaitlistJoined(
        id=existing.id, email=existing.email, created_at=existing.created_at
    )


# --- staff ---------------------------------------------------------------------------------------


def _record(session: AsyncSession, actor: Actor, action: str, signup_id: str, **data: Any) -> None:
    audit.by(session, actor, action, "waitlist_signup", signup_id, **data)


async def list_signups(
    session: AsyncSession, q: waitlist_schemas.WaitlistQuery
) -> waitlist_schemas.WaitlistList:
    conditions = []
    if q.status:
        conditions.append(WaitlistSignup.status == q.status)
    if not q.include_deleted and q.status != WaitlistStatus.DELETED:
        conditions.append(WaitlistSignup.status != WaitlistStatus.DELETED)
    if q.role:
        conditions.append(WaitlistSignup.role == q.role)
    if q.notified == "PENDING":
        conditions.append(WaitlistSignup.notified_at.is_(None))
    elif q.notified == "NOTIFIED":
        conditions.append(WaitlistSignup.notified_at.is_not(None))
    if q.query and q.query.strip():
        text = q.query.strip().lower()
        conditions.append(
            or_(
                *(
                    func.lower(column).contains(text, autoescape=True)
                    for column in (WaitlistSignup.email, WaitlistSignup.name, WaitlistSignup.company)
                )
            )
        )
    total = (
        await session.execute(select(func.count()).select_from(WaitlistSignup).where(*conditions))
    ).scalar_one()
    rows = await session.execute(
        select(WaitlistSignup)
        .where(*conditions)
        .order_by(WaitlistSignup.created_at.desc(), WaitlistSignup.id.desc())
        .limit(q.limit)
    )
    return waitlist_schemas.WaitlistList(signups=[view(x) for x in rows.scalars()], total=int(total))


async def update_signup(
    session: AsyncSession, actor: Actor, signup_id: str, body: waitlist_schemas.WaitlistUpdate
) -> waitlist_schemas.WaitlistSignup:
    signup = await get(session, signup_id)
    before = signup.status
    now = clock.now()
    values: dict[str, Any] = {"updated_at": now}
    if "notes" in body.model_fields_set:
        values["notes"] = body.notes
    # DELETED is the soft delete; moving out of it restores the signup.
    values["deleted_at"] = (
        func.coalesce(WaitlistSignup.deleted_at, now) if body.status == WaitlistStatus.DELETED else None
    )
    await states.move(
        session,
        WaitlistSignup,
        signup.id,
        WAITLIST_MOVES["update"],
        WaitlistStatus(body.status),
        message="The signup cannot take this status.",
        **values,
    )
    _record(
        session,
        actor,
        "waitlist.update",
        signup.id,
        status=[before, body.status],
        notes_changed="notes" in body.model_fields_set,
    )
    return view(signup)


async def delete_signup(
    session: AsyncSession, actor: Actor, signup_id: str, reason: str | None = None
) -> waitlist_schemas.WaitlistSignup:
    """Soft delete: status DELETED and deletedAt; hidden from the list unless includeDeleted. Idempotent."""
    signup = await get(session, signup_id)
    before = signup.status
    now = clock.now()
    # Compare-and-set: of two deletes (or a delete of a deleted signup) only one is recorded.
    won = await states.compare_and_set(
        session,
        WaitlistSignup,
        signup.id,
        WAITLIST_MOVES["delete"],
        WaitlistStatus.DELETED,
        deleted_at=now,
        updated_at=now,
    )
    if won is not None:
        _record(session, actor, "waitlist.delete", signup.id, previous_status=before, reason=reason)
    else:
        await reread(session, signup)
    return view(signup)


def convertible(status: str) -> bool:
    """Whether a signup in `status` can be turned into an account (the convert move's table)."""
    return states.allowed(WAITLIST_MOVES["convert"], status)


async def convert(
    session: AsyncSession, mailer: Mailer, settings: Settings, actor: Actor, signup_id: str
) -> waitlist_schemas.WaitlistConversion:
    """Turn an APPROVED (or INVITED, to resend) signup into an account with preview access and mail the
    person a sign-in link. The signup becomes INVITED and notified."""
    signup = await get(session, signup_id)
    convert_moves = WAITLIST_MOVES["convert"]
    states.check(
        convert_moves,
        signup.status,
        WaitlistStatus.INVITED,
        what="signup",
        code="waitlist_not_approved",
        message="Only APPROVED or INVITED signups can be converted; approve it first.",
    )
    now = clock.now()
    # Compare-and-set: a concurrent reject or delete wins over this conversion.
    await states.move(
        session,
        WaitlistSignup,
        signup.id,
        convert_moves,
        WaitlistStatus.INVITED,
        message="The signup changed meanwhile; only APPROVED or INVITED signups can be converted.",
        code="waitlist_not_approved",
        notified_at=now,
        updated_at=now,
    )

    user = await users.get_by_email(session, signup.email)
    created = False
    if user is None:
        try:
            # The outer savepoint keeps the session usable if the insert loses a race.
            async with session.begin_nested():
                user = await users.create(session, email=signup.email, name=signup.name)
            created = True
        except Conflict:
            # Registered meanwhile: convert the account that now exists.
            user = await users.get_by_email(session, signup.email)
            if user is None:
                raise
    if created:
        user.company = signup.company
        user.use_case = signup.use_case
        user.signup_intent = SignupIntent(signup.role)
    user.preview_access = True
    user.waitlist_status = WaitlistStatus.INVITED
    user.updated_at = now
    await session.flush()
    await reread(session, user)

    link = f"{settings.base_url.rstrip('/')}/login?email={quote(signup.email, safe='')}"
    await mailer.send(
        session,
        Mail(
            kind="waitlist_welcome",
            to=signup.email,
            subject="Your callboard invitation",
            body=(
                f"Hello {signup.name},\n\nyour place on the callboard waitlist has come up: your account is ready.\n"
                f"Sign in here (we will email you a one-time sign-in link):\n{link}\n\n"
                "If you did not ask to join, ignore this message.\n"
            ),
        ),
    )
    _record(session, actor, "waitlist.convert", signup.id, user_id=user.id, user_created=created)
    return waitlist_schemas.WaitlistConversion(
        signup=view(signup), user=users.public(user), user_created=created
    )
