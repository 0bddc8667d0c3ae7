"""The agent's lifecycle as data: the owner's moves on `Agent.status`, one table each (`{target: sources}`),
and whether each move needs the agent archived or not. lifecycle.py drives them through
`callboard_core.states`; docs/decisions.md ("Agent lifecycle") explains the states.

A suspension (staff) survives every owner move: archive, unarchive and delete keep SUSPENDED, and
deactivate/reactivate do not take it as a source.
"""

from __future__ import annotations

from callboard_core.agents.models import AgentStatus

A = AgentStatus
_SET_ASIDE = {A.INACTIVE: frozenset({A.ACTIVE, A.INACTIVE}), A.SUSPENDED: frozenset({A.SUSPENDED})}

AGENT_MOVES: dict[str, dict[AgentStatus, frozenset[AgentStatus]]] = {
    "deactivate": {A.INACTIVE: frozenset({A.ACTIVE})},
    "reactivate": {A.ACTIVE: frozenset({A.INACTIVE})},
    "archive": _SET_ASIDE,
    "unarchive": _SET_ASIDE,
    "delete": _SET_ASIDE,
}

# True: only an archived agent; False: only an unarchived one; None: either.
ARCHIVED_BEFORE: dict[str, bool | None] = {
    "deactivate": False,
    "reactivate": False,
    "archive": False,
    "unarchive": True,
    "delete": None,
}
