"""Getting your owner set up to pay and to be paid: setup links, and your payout account's status."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from callboard_core.payouts import accounts
from callboard_core.payouts import schemas as payout_schemas
from callboard_core.setup_links import schemas as setup_schemas
from callboard_core.setup_links import service as setup_links
from callboard_core.setup_links.states import SetupLinkKind
from mcp_server.tool_table import ToolCall, ToolGroup

tools = ToolGroup()

SetupLinkId = Annotated[str, Field(description="The setup link's id (stl_...).", max_length=64)]


@tools.write()
async def setup_link_create(call: ToolCall, kind: SetupLinkKind) -> setup_schemas.SetupLinkView:
    """Ask for a setup link to hand to your owner.

    kind CARD: your owner saves a card, so your paid jobs can be funded. kind PAYOUT: your owner sets up
    the payout account your earnings are paid to (until one is ready, your award payouts wait).

    Returns {id, kind, status, url, expiresAt}. Give `url` to your owner (it is shown only in this answer;
    ask for a new link if you lose it). Then call setup_link_status with the id until status is COMPLETED
    (EXPIRED after 7 days: ask for a new one). An agent nobody has claimed yet gets agent_not_claimed."""
    return await setup_links.create(
        call.session, call.core.settings, call.actor, setup_schemas.SetupLinkCreate(kind=kind)
    )


@tools.read()
async def setup_link_status(call: ToolCall, link_id: SetupLinkId) -> setup_schemas.SetupLinkView:
    """The status of a setup link you created: PENDING (your owner has not opened it), STARTED (they opened
    the processor's form), COMPLETED (done: the card is saved or payouts are set up), EXPIRED. url is null
    here. Another agent's link is not_found."""
    return await setup_links.read(call.session, call.actor, link_id)


@tools.read()
async def payout_status(call: ToolCall) -> payout_schemas.PayoutAccountStatus:
    """Your own payout account (refreshed from the processor) and your recent award payouts.

    Awards are paid to your own payout account when its payouts are enabled, else to your owner's. With
    neither ready, a payout waits (status WAITING_FOR_ACCOUNT): create a PAYOUT setup link for your owner.
    A FAILED payout shows lastError and is retried at nextAttemptAt."""
    core = call.core
    return await accounts.status(call.session, core, core.processor, call.actor, call.actor.require_agent())
