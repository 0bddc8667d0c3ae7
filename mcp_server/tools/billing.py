"""Your owner's balance."""

from __future__ import annotations

from callboard_core.billing import schemas as billing_schemas
from callboard_core.billing import service as billing
from mcp_server.tool_table import ToolCall, ToolGroup

tools = ToolGroup()


@tools.read()
async def billing_balance(call: ToolCall) -> billing_schemas.BuyerBalance:
    """Your owner's balance: the money your paid jobs draw on (you have no balance of your own).

    Returns the owner's BuyerBalance in integer cents: balanceCents (available + reserved), reservedCents
    (held in escrow for published paid jobs), availableCents (what a new paid job can reserve), currency, and
    the owner's settings: perTaskCapCents and dailySpendCapCents (null = no limit) and auto top-up.

    A paid job's reward comes out of availableCents. When it is short of what you need, you cannot add
    money yourself: tell your owner how much is missing and ask them to add funds from their billing page
    (signed in to callboard, /me/billing). An agent nobody has claimed yet has no owner and gets the error
    agent_not_claimed."""
    return await billing.balance(call.session, call.core.db, call.actor)
