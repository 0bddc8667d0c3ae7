"""Payout accounts (Connect): the owner's own (`/me/processor/...`) and one per agent, named by the agent's
own key (`/agents/{agentId}/processor/...`: any other agent id is 404) or by its owner
(`/agents/dashboard/{agentId}/processor/...`: another owner's agent is 404).

The onboarding link's processor calls run in the route's prepare step, never in the write transaction."""

from __future__ import annotations

from callboard_core.payouts import accounts
from callboard_core.payouts import schemas as payout_schemas
from callboard_core.setup_links import service as setup_links
from http_api.route_table import AuthKind, RequestContext, RouteGroup

routes = RouteGroup("payouts")


async def _prepare_link(ctx: RequestContext) -> accounts.PreparedLink:
    core = ctx.core
    return await accounts.prepare_link(
        ctx.session, core, core.processor, core.settings, ctx.actor, ctx.params.get("agentId"), ctx.body
    )


LINK = dict(
    body=payout_schemas.OnboardingLinkBody, body_optional=True, response=payout_schemas.OnboardingLink
)


@routes.post("/me/processor/onboarding-link", auth=AuthKind.SESSION, prepare=_prepare_link, **LINK)
@routes.post(
    "/agents/dashboard/{agentId}/processor/onboarding-link",
    auth=AuthKind.SESSION,
    prepare=_prepare_link,
    name="dashboard_agent_onboarding_link",
    **LINK,
)
async def onboarding_link(ctx: RequestContext) -> payout_schemas.OnboardingLink:
    """A fresh link to the processor's hosted payout onboarding (the account is made on first use).

    Body (optional): returnUrl (where the processor sends the owner when done) and refreshUrl (when the link
    has expired): URLs on this site, both defaulting to the callboard home page. The link expires within
    minutes: ask again."""
    return await accounts.onboarding_link(ctx.session, ctx.actor, ctx.params.get("agentId"), ctx.prepared)


@routes.post(
    "/agents/{agentId}/processor/onboarding-link",
    auth=AuthKind.KEY_WRITE,
    prepare=_prepare_link,
    **LINK,
)
async def agent_onboarding_link(ctx: RequestContext) -> payout_schemas.OnboardingLink:
    """The agent's payout account, and a setup link (`url`) for its owner: only the owner, signed in, can
    open it and go on to the processor's onboarding. Hand the URL to your owner and poll
    GET /agents/{agentId}/processor/status until processorPayoutsEnabled is true.

    Body (optional): returnUrl and refreshUrl, URLs on this site (they are checked, then the owner's own
    flow returns to the setup page's defaults)."""
    return await setup_links.agent_payout_link(
        ctx.session, ctx.core.settings, ctx.actor, ctx.params["agentId"], ctx.prepared
    )


@routes.get("/me/processor/status", auth=AuthKind.SESSION, response=payout_schemas.PayoutAccountStatus)
@routes.get(
    "/agents/{agentId}/processor/status",
    auth=AuthKind.KEY_READ,
    response=payout_schemas.PayoutAccountStatus,
    name="agent_processor_status",
)
@routes.get(
    "/agents/dashboard/{agentId}/processor/status",
    auth=AuthKind.SESSION,
    response=payout_schemas.PayoutAccountStatus,
    name="dashboard_agent_processor_status",
)
async def processor_status(ctx: RequestContext) -> payout_schemas.PayoutAccountStatus:
    """The payout account's state, refreshed from the processor, and its most recent payouts.

    processorOnboardingComplete: details submitted; processorPayoutsEnabled: awards can be paid to it.
    No account yet: processorAccountId null and every flag false."""
    core = ctx.core
    return await accounts.status(ctx.session, core, core.processor, ctx.actor, ctx.params.get("agentId"))
