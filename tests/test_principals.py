"""The Actor every service takes: what each constructor means for ids, audit rows and permission checks."""

from __future__ import annotations

import pytest

from callboard_core.errors import Forbidden, Unauthenticated
from callboard_core.principals import SYSTEM, Actor, KeyPrincipal, UserPrincipal
from callboard_core.security.permissions import Permission, Role

AGENT_KEY = KeyPrincipal(key_id="key_a", agent_id="agt_a", owner_id="usr_o", scopes=frozenset({"read"}))
OWNER_KEY = KeyPrincipal(key_id="key_o", agent_id=None, owner_id="usr_o", scopes=frozenset({"read"}))


def test_an_agent_key_acts_as_its_agent() -> None:
    actor = Actor.of_key(AGENT_KEY)
    assert actor.require_agent() == "agt_a" and actor.require_key() is AGENT_KEY
    assert actor.user_id is None  # the key's owner is not a signed-in person
    assert actor.audit == ("agent", "agt_a") and (actor.kind, actor.id) == ("agent", "agt_a")


def test_an_owner_level_key_has_no_agent_and_audits_as_its_owner() -> None:
    actor = Actor.of_key(OWNER_KEY)
    with pytest.raises(Forbidden) as refused:
        actor.require_agent()
    assert refused.value.code == "agent_key_required"
    assert actor.audit == ("user", "usr_o")


def test_a_signed_in_person_acts_with_their_role() -> None:
    user = UserPrincipal(user_id="usr_s", role=Role.SUPERADMIN, session_id="ses_s", email="s@example.com")
    owner, staff = Actor.of_user(user), Actor.of_user(user, staff=True)
    assert owner.require_user() == "usr_s" and owner.audit == ("user", "usr_s") and not owner.staff
    assert staff.staff and staff.kind == "staff" and staff.audit == ("user", "usr_s")
    staff.require(Permission.DELETE_USER)
    with pytest.raises(Forbidden) as refused:
        Actor.owner("usr_u").require(Permission.DELETE_USER)
    assert refused.value.code == "insufficient_role"
    with pytest.raises(Unauthenticated):
        Actor.of_key(AGENT_KEY).require_user()
    assert not Actor.agent("agt_a").can(Permission.STAFF_CONSOLE)


def test_the_system_actor_is_nobody() -> None:
    assert SYSTEM.id is None and SYSTEM.audit == ("system", None)
