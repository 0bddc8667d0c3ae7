"""The console in a real browser: Playwright for Python driving Debian's Chromium (`make browser` installs it)
against the app served by uvicorn. A person signs in by magic link (read from the mail outbox), lands back
on the page they asked for, tops up with the sandbox's test card on the processor's hosted page and comes
back to a page that shows the new balance, saves a card on the hosted form and connects an agent; another
walk claims an agent, posts, publishes and awards a paid job, opens the receipt, changes a preference and
follows the worker owner's payout; staff resolve a dispute. Each step asserts what the person sees and saves a screenshot
under the test's output directory; axe-core reports no serious or critical violation on each page; the same
walk runs once with JavaScript disabled. Skipped, saying why, where no browser is installed."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard_core import worker
from callboard_core.container import Core
from tests.conftest import make_settings
from tests.mcp_helpers import serving
from tests.netutil import free_port
from tests.test_auth import last_token

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright_api = pytest.importorskip(
    "playwright.async_api", reason="playwright is not installed (make install)"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no Chromium on this machine: `make browser` installs Debian's"
    ),
]
SERIOUS = {"serious", "critical"}
expect = playwright_api.expect
# Every check of a page waits for it (a loaded machine draws a new page after the click returns: is_visible,
# which does not wait, failed so twice); up to 15 s, as the onboarding wait below.
expect.set_options(timeout=15_000)


@contextlib.asynccontextmanager
async def site(
    core: Core, database_url: str, tmp_root: Path, **settings: Any
) -> AsyncIterator[tuple[Core, str]]:
    """The app on a real port, its base URL (links in mail, the processor's return) that port."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    served = Core.build(make_settings(database_url, tmp_root, base_url=url, **settings))
    await served.start()
    try:
        async with serving(served, port=port):
            yield served, url
    finally:
        await served.bus.drain()
        await served.read_cache.aclose()
        await served.db.dispose()


async def accessible(page: Any, name: str) -> None:
    """axe-core on the page as it is now: no serious or critical violation."""
    from axe_playwright_python.async_playwright import Axe

    results = await Axe().run(page)
    bad = [v for v in results.response["violations"] if v.get("impact") in SERIOUS]
    assert not bad, f"{name}: " + "; ".join(f"{v['id']}: {v['help']}" for v in bad)


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"])
async def test_sign_in_by_magic_link_and_top_up(
    core: Core, database_url: str, tmp_root: Path, tmp_path: Path, javascript: bool
) -> None:
    email = f"walk-{'js' if javascript else 'nojs'}@example.com"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    async with site(core, database_url, tmp_root) as (served, url), playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        context = await browser.new_context(
            java_script_enabled=javascript, viewport={"width": 1100, "height": 900}
        )
        await context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
        page = await context.new_page()

        async def step(name: str) -> None:
            await page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
            if javascript:
                await accessible(page, name)

        # Signed out, billing sends the person to sign in first.
        await page.goto(f"{url}/billing")
        assert re.search(r"/login\?next=%2Fbilling$", page.url), page.url
        await step("01-sign-in")
        await page.fill("#email", email)
        await page.check("input[name=accept_legal] >> nth=0")
        await page.click("text=Send link")
        await expect(page.locator("text=Check your mail")).to_be_visible()
        await step("02-check-mail")

        # The link from the mail, then Continue: signed in, back on billing.
        token = await last_token(served, email)
        await page.goto(f"{url}/auth/magic?token={token}")
        await step("03-continue")
        await page.click("button:has-text('Continue')")
        await page.wait_for_load_state()
        assert page.url == f"{url}/billing", (page.url, await page.content())
        await expect(page.locator("h1", has_text="Billing")).to_be_visible()
        assert (await page.locator("[data-testid=available]").inner_text()) == "$0.00"
        await step("04-billing")

        # Top up with the sandbox's test card on the processor's hosted page.
        await page.fill("#amount", "25")
        await page.click("text=Continue to payment")
        assert "/sandbox/processor/" in page.url, page.url
        await step("05-hosted-checkout")
        await page.fill("#card_number", "4242424242424242")
        await page.click("form button[type=submit]")
        await page.wait_for_url(f"{url}/billing/topup/done")
        await expect(page.locator("text=waiting for the payment processor")).to_be_visible()
        await step("06-waiting")

        # The processor's webhook arrives (the worker's pass); the page then says what happened.
        async with httpx.AsyncClient(base_url=url) as hooks:
            await worker.run_once(served, housekeeping=False, webhook_client=hooks)
        await page.goto(f"{url}/billing/topup/done")
        await expect(page.locator("text=Payment received: $25.00 was added")).to_be_visible()
        assert (await page.locator("[data-testid=available]").inner_text()) == "$25.00"
        await step("07-done")

        await page.click("text=Back to billing")
        assert (await page.locator("[data-testid=available]").inner_text()) == "$25.00"

        # Save a card on the processor's hosted form; once the processor reports it, billing lists it.
        await page.click("button:has-text('Add a card')")
        assert "/sandbox/processor/" in page.url, page.url
        await page.fill("#card_number", "4242424242424242")
        await page.click("form button[type=submit]")
        await page.wait_for_url(re.compile(r".*/billing\?card=added$"))
        async with httpx.AsyncClient(base_url=url) as hooks:
            await worker.run_once(served, housekeeping=False, webhook_client=hooks)
        await page.reload()
        await expect(page.locator("text=ending 4242")).to_be_visible()
        await step("08-card-saved")
        await page.set_viewport_size({"width": 375, "height": 800})  # a phone
        await step("09-billing-phone")
        await page.set_viewport_size({"width": 1100, "height": 900})

        # Connect an agent: a session, activated for an MCP runtime; the kit to copy.
        await page.click("nav >> text=Agents")
        await page.click("text=Connect an agent")
        await page.click("text=Start an onboarding session")
        # Waited for: without JavaScript the form's answer is a new page, which a loaded machine may not
        # have drawn yet when the click returns (is_visible does not wait; it failed so once).
        await page.locator("text=Paste this to your agent").wait_for(state="visible", timeout=15_000)
        await step("10-connect")
        await page.fill("input[name=agentName]", "Scribe")
        await page.select_option("select[name=runtimeTarget]", "MCP")
        await page.click("button:has-text('Activate')")
        await expect(page.locator("h1", has_text="Your agent is activated")).to_be_visible()
        assert "/mcp" in await page.locator("#mcp-config").input_value()
        copy = page.locator("button[data-copy='#key-value']")
        if javascript:  # the copy button is the page's one script; without it, select and copy by hand
            await copy.click()
            await expect(copy).to_have_text("Copied")  # the clipboard's promise settles after the click
            copied = await page.evaluate("navigator.clipboard.readText()")
            assert copied == await page.locator("#key-value").input_value()
        else:
            assert not await copy.is_visible()
        await step("11-kit")
        await browser.close()
    assert len(list(shots.glob("*.png"))) == 11


async def signed_in(context: Any, served: Core, url: str, role: str) -> str:
    """A staff member's session in the browser (the magic-link walk above signs in the long way)."""
    from callboard_core.auth import sessions
    from tests.conftest import make_user

    user_id, token = await make_user(served, role=role)
    await context.add_cookies([{"name": sessions.COOKIE_NAME, "value": token, "url": url}])
    return user_id


async def test_staff_resolve_a_dispute_and_find_it_in_the_audit_log(
    core: Core, app: Any, client: Any, database_url: str, tmp_root: Path, tmp_path: Path
) -> None:
    from tests.jobs_helpers import new_agent, new_owner, to_review
    from tests.payments_helpers import buyer, draft

    shots = tmp_path / "screenshots"
    shots.mkdir()
    b = await buyer(app, core, funds=5_000)  # made through the test app; the browser uses the served one
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1000, title="Summarise the contract")
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    await to_review(client, job_id, b.agent, worker)
    opened = await client.post(
        f"/api/v2/jobs/{job_id}/disputes",
        json={"reasonCode": "ARTIFACT_MISUSE", "reasonText": "The summary leaks a name."},
        headers=b.agent.h,
    )
    assert opened.status_code == 201, opened.text
    async with site(core, database_url, tmp_root) as (served, url), playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)

        admin = await browser.new_context()
        await signed_in(admin, served, url, "ADMIN")
        page = await admin.new_page()
        await page.goto(f"{url}/staff/disputes?status=OPEN")
        await page.click("text=Artifact misuse")
        await expect(page.locator("text=The summary leaks a name.")).to_be_visible()
        await accessible(page, "dispute")
        await page.screenshot(path=str(shots / "01-dispute.png"), full_page=True)
        await page.select_option("#resolution", "REFUND_REQUESTER")
        await page.fill("#resolutionNotes", "A name was leaked: the requester is refunded.")
        await page.click("text=Resolve the dispute")
        await expect(page.locator("text=Resolved: refund requester")).to_be_visible()
        await page.goto(f"{url}/staff/audit")
        await expect(page.locator("td", has_text="dispute.resolved").first).to_be_visible()
        await accessible(page, "audit")
        await page.screenshot(path=str(shots / "02-audit.png"), full_page=True)

        support = await browser.new_context()
        await signed_in(support, served, url, "SUPPORT")
        page = await support.new_page()
        await page.goto(f"{url}/staff")
        await expect(page.locator("a", has_text="Tasks").first).to_be_visible()
        assert await page.locator("a", has_text="Payments").count() == 0
        response = await page.goto(f"{url}/staff/payments")
        assert response is not None and response.status == 403
        await expect(page.locator("text=Your role does not allow this action.")).to_be_visible()
        await page.screenshot(path=str(shots / "03-support-refused.png"), full_page=True)
        await browser.close()


async def test_claim_post_a_paid_job_award_it_open_the_receipt_and_the_workers_payout(
    core: Core, app: Any, database_url: str, tmp_root: Path, tmp_path: Path
) -> None:
    """An owner claims the agent that registered itself (its claim URL), posts a paid job for it and
    publishes it, awards the submission from the job page, opens the receipt and changes a notification
    preference; the worker's owner sees the payout wait for an account, sets payouts up on the processor's
    hosted page and sees it paid."""
    from callboard_core.auth import sessions
    from tests.jobs_helpers import AgentHandle, Owner, new_agent, new_owner, to_review
    from tests.payments_helpers import fund

    shots = tmp_path / "screenshots"
    shots.mkdir()
    issuer = {"issuer_name": "Callboard Test Ltd", "issuer_address": "1 Ledger Lane; Springfield"}
    async with (
        site(core, database_url, tmp_root, **issuer) as (served, url),
        playwright_api.async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        owner_ctx = await browser.new_context(viewport={"width": 1100, "height": 900})
        owner_id = await signed_in(owner_ctx, served, url, "USER")
        page = await owner_ctx.new_page()
        n = 0

        async def step(p: Any, name: str) -> None:
            nonlocal n
            n += 1
            await p.screenshot(path=str(shots / f"{n:02d}-{name}.png"), full_page=True)
            await accessible(p, name)

        # The agent registers itself over HTTP and hands its owner the claim URL.
        async with httpx.AsyncClient(base_url=url) as api:
            registered = await api.post(
                "/api/v2/agents/register",
                json={"name": "Ledger Scribe", "endpointUrl": "https://scribe.example.com/hook"},
            )
            assert registered.status_code == 201, registered.text
            claim_url, key = registered.json()["claimUrl"], registered.json()["apiKey"]
            await page.goto(claim_url)
            await expect(page.locator("text=Ledger Scribe").first).to_be_visible()
            await step(page, "claim")
            await page.click("button:has-text('Claim')")
            await expect(page.locator("text=Ledger Scribe").first).to_be_visible()
            await page.goto(f"{url}/my/agents")
            await page.click("text=Ledger Scribe")
            agent_id = page.url.rsplit("/", 1)[1]
            await step(page, "agent")

            # Funds (a top-up is the first walk), then a paid job posted and published from the console.
            await fund(core, owner_id, 5_000)
            await page.goto(f"{url}/jobs")
            await page.click("text=Post a job")
            await page.fill("#title", "Reconcile the March invoices")
            await page.fill("#description", "Match each invoice to its payment.")
            await page.fill("#reward", "12")
            await step(page, "post-a-job")
            await page.click("button:has-text('Save the draft')")
            await expect(page.locator("h1", has_text="Reconcile the March invoices")).to_be_visible()
            await page.click("button:has-text('Publish the job')")
            await expect(page.locator("text=Admission open").first).to_be_visible()
            await step(page, "published")
            job_id = page.url.rsplit("/", 1)[1]

            # A worker of another owner takes the job and submits.
            worker_owner = await new_owner(app, core)
            clerk = await new_agent(worker_owner, name="Careful Clerk")
            requester = AgentHandle(agent_id, key, Owner(api, owner_id))  # its calls use only the key
            await to_review(api, job_id, requester, clerk)

        # The award from the job page.
        await page.reload()
        await step(page, "review")
        await page.click("button:has-text('Award this submission')")
        await expect(page.locator(".badge", has_text="Awarded").first).to_be_visible()

        # The receipt, printable, with the issuer from settings.
        await page.goto(f"{url}/billing/documents")
        await page.click("tr:has-text('Reconcile the March invoices') >> a:has-text('Receipt')")
        await expect(page.locator("h1", has_text="Receipt")).to_be_visible()
        await expect(page.locator("text=Reconcile the March invoices").first).to_be_visible()
        await expect(page.locator("text=Callboard Test Ltd")).to_be_visible()
        await expect(page.locator("text=1 Ledger Lane")).to_be_visible()
        await step(page, "receipt")

        # A notification preference changed and kept.
        await page.goto(f"{url}/notifications/preferences")
        box = page.locator("#email-RECEIPT_READY")
        assert await box.is_checked()
        await box.uncheck()
        await page.click("button:has-text('Save preferences')")
        await expect(page.locator("text=Your preferences are saved")).to_be_visible()
        assert not await page.locator("#email-RECEIPT_READY").is_checked()
        await step(page, "preferences")

        # The worker's owner: the payout waits for an account, then is paid.
        worker_ctx = await browser.new_context(viewport={"width": 1100, "height": 900})
        cookie = sessions.COOKIE_NAME
        token = worker_owner.client.cookies.get(cookie)
        await worker_ctx.add_cookies([{"name": cookie, "value": token, "url": url}])
        wpage = await worker_ctx.new_page()
        await wpage.goto(f"{url}/payouts")
        await expect(wpage.locator("td", has_text="Waiting for account")).to_be_visible()
        await step(wpage, "payout-waiting")
        await wpage.click("button:has-text('Set up payouts')")
        assert "/sandbox/" in wpage.url, wpage.url
        await step(wpage, "hosted-onboarding")
        await wpage.click("form button[type=submit]")
        await wpage.wait_for_url(f"{url}/payouts")
        async with httpx.AsyncClient(base_url=url) as hooks:
            await worker.run_once(served, housekeeping=False, webhook_client=hooks)
            await worker.run_once(served, housekeeping=False, webhook_client=hooks)
        await wpage.goto(f"{url}/payouts")
        await expect(wpage.locator(".badge", has_text="Ready")).to_be_visible()
        await expect(wpage.locator("td", has_text="Paid").first).to_be_visible()
        await expect(wpage.locator("td", has_text="$12.00").first).to_be_visible()
        await step(wpage, "payout-paid")
        await browser.close()
