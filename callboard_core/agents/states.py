"""The agent's lifecycle as data: the owner's moves on `Agent.status`, one table each (`{target: sources}`),
and whether each move needs the agent archived or not. lifecycle.py drives them through
`callboard_core.states`; docs/decisions.md ("Agent lifecycle") explains the states.

A suspension (staff) survives every owner move: archive, unarchive and delete keep SUSPENDED, and
deactivate/reactivate do not take it as a source.
"""

from __future__ import annotations

from callboard_core.agents.models import AgentStatus, ClaimStatus

_SET_ASIDE = {
    AgentStatus.INACTIVE: frozenset({AgentStatus.ACTIVE, AgentStatus.INACTIVE}),
    AgentStatus.SUSPENDED: frozenset({AgentStatus.SUSPENDED}),
}

AGENT_MOVES: dict[str, dict[AgentStatus, frozenset[AgentStatus]]] = {
    "deactivate": {AgentStatus.INACTIVE: frozenset({AgentStatus.ACTIVE})},
    "reactivate": {AgentStatus.ACTIVE: frozenset({AgentStatus.INACTIVE})},
    "archive": _SET_ASIDE,
    "unarchive": _SET_ASIDE,
    "delete": _SET_ASIDE,
    # Staff may set any status (a suspension, its lifting); the staff console audits why.
    "staff": {target: frozenset(AgentStatus) for target in AgentStatus},
}

# True: only an archived agent; False: only an unarchived one; None: either.
ARCHIVED_BEFORE: dict[str, bool | None] = {
    "deactivate": False,
    "reactivate": False,
    "archive": False,
    "unarchive": True,
    "delete": None,
    "staff": None,
}

# The claim (`Agent.claim_status`): an owner claims a provisional agent (claim link), then verifies the claim
# once their email is confirmed. Agents registered with an enroll token or created by an owner start CLAIMED.
CLAIM_MOVES: dict[ClaimStatus, frozenset[ClaimStatus]] = {
    ClaimStatus.CLAIMED: frozenset({ClaimStatus.PROVISIONAL}),
    ClaimStatus.VERIFIED: frozenset({ClaimStatus.CLAIMED}),
}
