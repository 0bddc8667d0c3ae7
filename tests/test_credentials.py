"""Credential mechanisms that have no routes of their own yet (onboarding tokens, the machine token),
the key format, and the staff policy table."""

from __future__ import annotations

from datetime import timedelta

import pytest
from starlette.requests import Request

from callboard_core import clock
from callboard_core.errors import Forbidden, Unauthenticated
from callboard_core.onboarding import tokens as onboarding_tokens
from callboard_core.onboarding.models import OnboardingSession
from callboard_core.principals import UserPrincipal
from callboard_core.security import tokens
from callboard_core.security.permissions import POLICY, Permission, Role, allows
from http_api import auth
from tests.conftest import make_user


def test_api_key_format_has_prefix_and_checksum():
    key = tokens.new_api_key()
    assert key.startswith("cbk_") and tokens.api_key_well_formed(key)
    # One changed character breaks the checksum: a typo is refused before any lookup.
    flipped = key[:10] + ("A" if key[10] != "A" else "B") + key[11:]
    assert not tokens.api_key_well_formed(flipped)
    assert tokens.api_key_prefix(key) == key[:12]
    assert len({tokens.new_api_key() for _ in range(200)}) == 200


def test_policy_table_superadmin_only_actions():
    superadmin_only = [
        Permission.CHANGE_USER_ROLE,
        Permission.DELETE_USER,
        Permission.CHANGE_AGENT_HANDLE,
        Permission.REVOKE_SINGLE_KEY,
        Permission.CORRECT_REPUTATION,
    ]
    for permission in superadmin_only:
        assert [r for r in Role if allows(r, permission)] == [Role.SUPERADMIN]
    assert not allows(Role.USER, Permission.STAFF_CONSOLE)
    assert all(allows(r, Permission.STAFF_CONSOLE) for r in (Role.SUPPORT, Role.MODERATOR, Role.ADMIN))
    assert [r for r in Role if allows(r, Permission.ADMIN_CONSOLE)] == [Role.ADMIN, Role.SUPERADMIN]
    # Financial surfaces are hidden from SUPPORT.
    assert not allows(Role.SUPPORT, Permission.VIEW_FINANCIALS)
    assert set(POLICY) == set(Permission)


def test_user_principal_require_raises_forbidden():
    support = UserPrincipal(user_id="usr_x", role=Role.SUPPORT, session_id="ses_x", email="s@example.com")
    with pytest.raises(Forbidden) as info:
        support.require(Permission.DELETE_USER)
    assert info.value.code == "insufficient_role"


async def test_onboarding_token_is_bound_to_its_slug_and_expires(core):
    user_id, _ = await make_user(core)
    token = tokens.new_token()
    async with core.uow() as uow:
        uow.session.add(
            OnboardingSession(
                slug="ws-alpha",
                owner_id=user_id,
                token_hash=tokens.hash_token(token),
                token_expires_at=clock.now() + timedelta(hours=1),
            )
        )
        uow.session.add(
            OnboardingSession(
                slug="ws-beta",
                owner_id=user_id,
                token_hash=tokens.hash_token("other"),
                token_expires_at=clock.now() + timedelta(hours=1),
            )
        )
    async with core.uow(write=False) as uow:
        principal = await onboarding_tokens.authenticate(uow.session, "ws-alpha", token)
        assert principal.owner_id == user_id and principal.slug == "ws-alpha"
        with pytest.raises(Unauthenticated):
            await onboarding_tokens.authenticate(uow.session, "ws-beta", token)
        with pytest.raises(Unauthenticated):
            await onboarding_tokens.authenticate(uow.session, "ws-alpha", token + "x")
    previous = clock.set_clock(clock.FrozenClock(clock.now() + timedelta(hours=1, seconds=1)))
    try:
        async with core.uow(write=False) as uow:
            with pytest.raises(Unauthenticated) as info:
                await onboarding_tokens.authenticate(uow.session, "ws-alpha", token)
            assert info.value.code == "invalid_onboarding_token"
    finally:
        clock.set_clock(previous)


def _request(headers: dict[str, str]) -> Request:
    return Request(
        {
            "type": "http",
            "method": "POST",
            "path": "/",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }
    )


async def test_machine_token_checked_in_constant_time(core):
    core.settings.machine_token = "m-secret-123"
    assert auth.machine_token(_request({"Authorization": "Bearer m-secret-123"}), core).name == "automation"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic m-secret-123"}):
        with pytest.raises(Unauthenticated):
            auth.machine_token(_request(headers), core)
    core.settings.machine_token = None
    with pytest.raises(Unauthenticated):
        auth.machine_token(_request({"Authorization": "Bearer m-secret-123"}), core)
