"""The web console's pages without JavaScript, through the real app on SQLite and PostgreSQL: signed out they
send a person to sign in and back; home shows the agents, the money, the jobs that need the owner and the
first steps; a top-up goes to the processor's hosted page and back to a page that says what happened; the
notification preferences page saves; a form from a foreign origin is refused on a page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from callboard_core.container import Core
from tests.jobs_helpers import new_agent, new_owner, to_review
from tests.payments_helpers import CARD_OK, buyer, draft, submit_page, worker_pass

pytestmark = pytest.mark.usefixtures("books_balance")


@pytest.mark.parametrize(
    "path", ["/billing", "/billing/topup/done", "/notifications", "/notifications/preferences"]
)
async def test_signed_out_pages_send_you_to_sign_in_and_back(client: Any, path: str) -> None:
    r = await client.get(path + "?cursor=abc" if path == "/billing" else path)
    assert r.status_code == 303
    location = urlsplit(r.headers["location"])
    assert location.path == "/login" and "next=" in location.query
    follow = await client.get(r.headers["location"])
    assert follow.status_code == 200 and 'name="next"' in follow.text


async def test_home_shows_what_needs_the_owner(app: Any, core: Core, client: Any) -> None:
    owner = await new_owner(app, core)
    first = (await owner.client.get("/")).text
    assert "Your first steps" in first and "Create or claim an agent" in first and "$0.00" in first
    b = await buyer(app, core, funds=5_000)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1000, title="Translate the onboarding guide")
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    await to_review(client, job_id, b.agent, worker)
    page = (await b.owner.client.get("/")).text
    assert "Translate the onboarding guide" in page and "To review" in page
    assert "$39.00" in page and "$11.00 held for published jobs" in page  # 5,000 cents less 1,000 and the fee
    assert 'aria-current="page"' in page and "Sign out" in page


async def test_a_top_up_through_the_hosted_page_and_back(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    started = await owner.client.post("/billing/topup", data={"amount": "25.50"})
    assert started.status_code == 303, started.text
    paid = await submit_page(app, started.headers["location"], CARD_OK)
    assert paid.status_code == 303 and urlsplit(paid.headers["location"]).path == "/billing/topup/done"
    waiting = await owner.client.get("/billing/topup/done")
    assert "waiting for the payment processor" in waiting.text and "check again" in waiting.text
    await worker_pass(app, core)  # the processor's webhook arrives
    done = await owner.client.get("/billing/topup/done")
    assert "Payment received: $25.50 was added" in done.text and "$25.50" in done.text
    billing = await owner.client.get("/billing")
    assert billing.status_code == 200 and "Topup" in billing.text and "$25.50" in billing.text


async def test_refusals_show_on_a_page(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    bad = await owner.client.post("/billing/topup", data={"amount": "twenty"})
    assert bad.status_code == 422 and "Type an amount in dollars" in bad.text
    small = await owner.client.post("/billing/topup", data={"amount": "0.50"})
    assert small.status_code == 422 and "text/html" in small.headers["content-type"]
    foreign = await owner.client.post(
        "/billing/topup", data={"amount": "25"}, headers={"Origin": "https://evil.example.net"}
    )
    assert foreign.status_code == 403 and "trusted origin" in foreign.text
    prefs = await owner.client.post(
        "/notifications/preferences", data={}, headers={"Origin": "https://evil.example.net"}
    )
    assert prefs.status_code == 403


async def test_preferences_save_and_the_unsubscribe_page_points_there(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    page = await owner.client.get("/notifications/preferences")
    assert page.status_code == 200 and "Save preferences" in page.text
    form = {f"in_app:{t}": "on" for t in ("RECEIPT_READY", "BOUNTY_AWARDED")} | {"email:RECEIPT_READY": "on"}
    saved = await owner.client.post("/notifications/preferences", data=form)
    assert saved.status_code == 303 and saved.headers["location"].endswith("saved=1")
    prefs = {
        p["type"]: p for p in (await owner.client.get("/me/notifications/preferences")).json()["preferences"]
    }
    assert prefs["RECEIPT_READY"]["emailEnabled"] is True and prefs["BOUNTY_AWARDED"]["emailEnabled"] is False
    assert (
        prefs["BOUNTY_AWARDED"]["inAppEnabled"] is True
        and prefs["BOUNTY_PAYOUT_FAILED"]["inAppEnabled"] is False
    )
    again = await owner.client.get("/notifications/preferences?saved=1")
    assert "Your preferences are saved" in again.text


async def test_a_job_page_awards_and_the_receipt_opens(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core, funds=5_000)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1000, title="Label 200 photos")
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    submission = await to_review(client, job_id, b.agent, worker)
    listed = await b.owner.client.get("/jobs?status=IN_REVIEW")
    assert f'href="/jobs/{job_id}"' in listed.text and "Label 200 photos" in listed.text
    page = await b.owner.client.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and "Award this submission" in page.text and "Reserved" in page.text
    awarded = await b.owner.client.post(f"/jobs/{job_id}/award", data={"submissionId": submission})
    assert awarded.status_code == 303 and awarded.headers["location"] == f"/jobs/{job_id}"
    after = (await b.owner.client.get(f"/jobs/{job_id}")).text
    assert "Awarded" in after and "Captured" in after and "Award this submission" not in after
    again = await b.owner.client.post(f"/jobs/{job_id}/award", data={"submissionId": submission})
    assert again.status_code == 409 and "already been awarded" in again.text
    # The receipt's notification links the console's printable page; signed out it asks to sign in first.
    notes = (await b.owner.client.get("/me/notifications")).json()["notifications"]
    receipt = next(n for n in notes if n["type"] == "RECEIPT_READY")
    path = urlsplit(receipt["actionUrl"]).path
    shown = await b.owner.client.get(path)
    assert shown.status_code == 200 and "Receipt" in shown.text and "Label 200 photos" in shown.text
    signed_out = await client.get(path)
    assert signed_out.status_code == 303 and signed_out.headers["location"].startswith("/login?next=")
    documents = await b.owner.client.get("/billing/documents")
    assert path in documents.text
    stranger = await new_owner(app, core)
    assert (await stranger.client.get(path)).status_code == 404
    assert (await stranger.client.get(f"/jobs/{job_id}")).status_code == 404


async def test_a_dispute_opened_from_the_job_page(app: Any, core: Core, client: Any) -> None:
    b = await buyer(app, core, funds=5_000)
    worker = await new_agent(await new_owner(app, core))
    job_id = await draft(client, b, 1000)
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    await to_review(client, job_id, b.agent, worker)
    missing = await b.owner.client.post(f"/jobs/{job_id}/disputes", data={"reasonCode": "THEFT_CLAIM"})
    assert missing.status_code == 422
    opened = await b.owner.client.post(
        f"/jobs/{job_id}/disputes", data={"reasonCode": "THEFT_CLAIM", "reasonText": "Copied from our repo."}
    )
    assert opened.status_code == 303
    page = (await b.owner.client.get(f"/jobs/{job_id}")).text
    assert "Disputed: its money is frozen" in page and "Copied from our repo." in page
    assert "Award this submission" not in page


async def test_an_agent_page_sets_policy_mints_and_revokes_a_key(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    listed = await owner.client.get("/my/agents")
    assert f'href="/my/agents/{agent.id}"' in listed.text
    page = await owner.client.get(f"/my/agents/{agent.id}")
    assert page.status_code == 200 and "Spending policy" in page.text
    assert 'name="worker" type="checkbox" checked' in page.text  # it takes work (listed)
    saved = await owner.client.post(f"/my/agents/{agent.id}/policy", data={"limit": "12.50"})
    assert saved.status_code == 303
    policy = await owner.client.get(f"/my/agents/{agent.id}?saved=policy")
    assert 'value="12.50"' in policy.text and "Done: policy" in policy.text
    assert 'name="worker" type="checkbox">' in policy.text  # left unticked: it takes no work now
    me = (await owner.client.get("/api/v2/agents/me", headers=agent.h)).json()
    assert me["bountyProfile"]["workerEnabled"] is False
    again = await owner.client.post(f"/my/agents/{agent.id}/policy", data={"limit": "12.50", "worker": "on"})
    assert again.status_code == 303
    me = (await owner.client.get("/api/v2/agents/me", headers=agent.h)).json()
    assert me["bountyProfile"]["workerEnabled"] is True
    minted = await owner.client.post(f"/my/agents/{agent.id}/keys", data={"label": "laptop"})
    assert minted.status_code == 200 and "shown this once" in minted.text
    key = minted.text.split('id="key-value" type="text" readonly value="')[1].split('"')[0]
    assert (await owner.client.get("/api/v2/agents/me", headers={"X-API-Key": key})).status_code == 200
    key_id = next(
        k["id"]
        for k in (await owner.client.get("/api-keys/dashboard")).json()["keys"]
        if k["label"] == "laptop"
    )
    rotated = await owner.client.post(f"/my/agents/{agent.id}/keys/{key_id}/rotate")
    assert rotated.status_code == 200 and "shown this once" in rotated.text
    new_key = rotated.text.split('id="key-value" type="text" readonly value="')[1].split('"')[0]
    assert (await owner.client.get("/api/v2/agents/me", headers={"X-API-Key": key})).status_code == 401
    assert (await owner.client.get("/api/v2/agents/me", headers={"X-API-Key": new_key})).status_code == 200
    again = await owner.client.post(f"/my/agents/{agent.id}/keys/{key_id}/rotate")
    assert again.status_code == 409 and "mint a new one" in again.text
    key_id = next(
        k["id"]
        for k in (await owner.client.get("/api-keys/dashboard")).json()["keys"]
        if k["label"] == "laptop" and not k["revoked"]
    )
    revoked = await owner.client.post(f"/my/agents/{agent.id}/keys/{key_id}/revoke")
    assert revoked.status_code == 303
    assert (await owner.client.get("/api/v2/agents/me", headers={"X-API-Key": new_key})).status_code == 401
    off = await owner.client.post(
        f"/my/agents/{agent.id}/lifecycle", data={"move": "deactivate", "reason": "pause"}
    )
    assert off.status_code == 303
    assert "Reactivate" in (await owner.client.get(f"/my/agents/{agent.id}")).text
    stranger = await new_owner(app, core)
    assert (await stranger.client.get(f"/my/agents/{agent.id}")).status_code == 404
    assert (await stranger.client.post(f"/my/agents/{agent.id}/keys", data={})).status_code == 404
    assert (await stranger.client.post(f"/my/agents/{agent.id}/keys/{key_id}/rotate")).status_code == 404
    handle = (await owner.client.get(f"/agents/dashboard/{agent.id}")).json()["handle"]
    wrong = await owner.client.post(f"/my/agents/{agent.id}/delete", data={"confirmHandle": "nope"})
    assert wrong.status_code == 422 and "handle" in wrong.text
    deleted = await owner.client.post(f"/my/agents/{agent.id}/delete", data={"confirmHandle": handle})
    assert deleted.status_code == 303 and deleted.headers["location"] == "/my/agents?saved=deleted"
    assert "The agent is deleted" in (await owner.client.get(deleted.headers["location"])).text
    assert (await owner.client.get(f"/my/agents/{agent.id}")).status_code == 404


async def test_connect_an_agent_and_copy_its_kit(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    page = await owner.client.get("/connect")
    assert page.status_code == 200 and "Start an onboarding session" in page.text
    minted = await owner.client.post("/connect", data={"role": "SELLER"})
    assert minted.status_code == 200 and "Paste this to your agent" in minted.text
    session_id = minted.text.split('action="/connect/')[1].split("/activate")[0]
    kit = await owner.client.post(
        f"/connect/{session_id}/activate", data={"runtimeTarget": "MCP", "agentName": "Scribe"}
    )
    assert kit.status_code == 200, kit.text
    assert "Install command" in kit.text and "MCP configuration" in kit.text and "/mcp" in kit.text
    key = kit.text.split('id="key-value" type="text" readonly value="')[1].split('"')[0]
    me = await owner.client.get("/api/v2/agents/me", headers={"X-API-Key": key})
    assert me.status_code == 200, me.text
    again = await owner.client.post(f"/connect/{session_id}/activate", data={"runtimeTarget": "MCP"})
    assert again.status_code == 409
    bad = await owner.client.post(f"/connect/{session_id}/activate", data={"runtimeTarget": "EMACS"})
    assert bad.status_code == 422


async def test_payouts_set_up_through_the_hosted_page_and_listed(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    page = await owner.client.get("/payouts")
    assert page.status_code == 200 and "Set up payouts" in page.text and "No payout account yet" in page.text
    started = await owner.client.post("/payouts/setup")
    assert started.status_code == 303, started.text
    location = urlsplit(started.headers["location"])
    back = await submit_page(app, location.path + ("?" + location.query if location.query else ""), None)
    assert back.status_code == 303 and urlsplit(back.headers["location"]).path == "/payouts"
    await worker_pass(app, core)
    ready = await owner.client.get("/payouts")
    assert "Ready" in ready.text, ready.text


async def test_the_sign_in_form_says_when_the_terms_box_is_unticked(client: Any) -> None:
    from tests.payments_helpers import ORIGIN

    page = await client.get("/login")
    assert 'href="/terms"' in page.text and 'href="/privacy"' in page.text
    unticked = await client.post(
        "/login", data={"action": "magic", "email": "new@example.com"}, headers=ORIGIN
    )
    assert unticked.status_code == 200 and "You did not tick the box" in unticked.text
    ticked = await client.post(
        "/login", data={"action": "magic", "email": "new2@example.com", "accept_legal": "1"}, headers=ORIGIN
    )
    assert "You did not tick the box" not in ticked.text and "Check your mail" in ticked.text
    for path in ("/terms", "/privacy"):
        legal = await client.get(path)
        assert legal.status_code == 200 and "Version" in legal.text
    icon = await client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


async def test_the_public_directory_and_a_profile_with_its_offerings(
    app: Any, core: Core, client: Any
) -> None:
    owner = await new_owner(app, core)
    worker = await new_agent(owner, name="Careful Cleaner")
    made = await owner.client.post(
        f"/api/v2/owner/agents/{worker.id}/offerings",
        json={"title": "Data cleaning", "priceCents": 4500, "deliveryHours": 24},
    )
    assert made.status_code == 201, made.text
    handle = (await client.get("/api/v2/agents/me", headers=worker.h)).json()["handle"]
    listed = await client.get("/directory", params={"q": "Careful"})
    assert listed.status_code == 200 and f'href="/directory/{handle}"' in listed.text
    profile = await client.get(f"/directory/{handle}")
    assert "Careful Cleaner" in profile.text and "Data cleaning" in profile.text and "$45.00" in profile.text
    missing = await client.get("/directory/no-such-agent")
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]
    bad = await client.get("/directory", params={"page": "0"})
    assert bad.status_code == 422


async def test_cards_auto_top_up_and_caps_from_the_billing_page(app: Any, core: Core) -> None:
    owner = await new_owner(app, core)
    no_card = await owner.client.post(
        "/billing/settings", data={"autoTopup": "on", "threshold": "5", "autoAmount": "25"}
    )
    assert no_card.status_code == 409 and "card" in no_card.text
    started = await owner.client.post("/billing/cards")
    assert started.status_code == 303, started.text
    location = urlsplit(started.headers["location"])
    saved = await submit_page(app, location.path + ("?" + location.query if location.query else ""), CARD_OK)
    assert saved.status_code == 303 and urlsplit(saved.headers["location"]).path == "/billing"
    await worker_pass(app, core)
    page = await owner.client.get("/billing?card=added")
    assert "ending 4242" in page.text and "default" in page.text
    settings = await owner.client.post(
        "/billing/settings",
        data={"autoTopup": "on", "threshold": "5", "autoAmount": "25", "perTaskCap": "50", "dailyCap": ""},
    )
    assert settings.status_code == 303, settings.text
    me = (await owner.client.get("/me/billing")).json()
    assert me["autoTopupEnabled"] is True and me["autoTopupThresholdCents"] == 500
    assert (
        me["autoTopupAmountCents"] == 2500
        and me["perTaskCapCents"] == 5000
        and me["dailySpendCapCents"] is None
    )
    card_id = me["paymentMethods"][0]["id"]
    removed = await owner.client.post(f"/billing/cards/{card_id}/remove")
    assert removed.status_code == 303
    after = (await owner.client.get("/me/billing")).json()
    assert after["paymentMethods"] == [] and after["autoTopupEnabled"] is False


@pytest.mark.parametrize(
    "path", ["/billing/topup", "/billing/cards", "/billing/cards/x_1/remove", "/payouts/setup"]
)
async def test_signed_out_forms_with_a_processor_step_send_you_to_sign_in(client: Any, path: str) -> None:
    r = await client.post(path, data={"amount": "25"})
    assert r.status_code == 303 and r.headers["location"].startswith("/login"), r.text


async def test_post_a_paid_job_publish_it_and_see_the_hold(app: Any, core: Core) -> None:
    """An owner posts a job for an agent from the console, publishes it (the hold of reward and fee), and a
    publish the balance cannot cover shows what is missing on the page, the job still a draft."""
    b = await buyer(app, core, funds=3_000)
    form = await b.owner.client.get("/jobs/new")
    assert form.status_code == 200 and b.agent.id in form.text
    fields = {
        "requesterAgentId": b.agent.id,
        "title": "Proofread the handbook",
        "description": "Spelling and grammar.",
        "reward": "20",
        "participantCap": "1",
        "admissionHours": "2",
        "workHours": "3",
        "submissionHours": "6",
        "reviewHours": "12",
    }
    made = await b.owner.client.post("/jobs/new", data=fields)
    assert made.status_code == 303, made.text
    job_path = made.headers["location"]
    page = await b.owner.client.get(job_path)
    assert "Proofread the handbook" in page.text and "Publish the job" in page.text and "Draft" in page.text
    published = await b.owner.client.post(job_path + "/publish")
    assert published.status_code == 303, published.text
    after = await b.owner.client.get(job_path)
    assert "Admission open" in after.text and "Publish the job" not in after.text
    job = (await b.owner.client.get("/api/v2/owner/jobs/" + job_path.rsplit("/", 1)[1])).json()
    held = 2_000 + job["platformFeeCents"]
    bal = (await b.owner.client.get("/me/billing")).json()
    assert job["platformFeeCents"] > 0 and bal["reservedCents"] == held
    assert bal["availableCents"] == 3_000 - held

    second = await b.owner.client.post("/jobs/new", data=fields | {"title": "Too dear", "reward": "25"})
    refused = await b.owner.client.post(second.headers["location"] + "/publish")
    assert refused.status_code == 409 and "text/html" in refused.headers["content-type"]
    assert "cannot be published yet" in refused.text and "BALANCE" in refused.text
    assert refused.text.count("<li>") >= 1  # each missing requirement on a line of its own
    assert "Draft" in (await b.owner.client.get(second.headers["location"])).text

    wrong = await b.owner.client.post("/jobs/new", data=fields | {"reviewHours": "soon"})
    assert wrong.status_code == 422 and "reviewHours: Type a whole number of hours" in wrong.text
    stranger = await new_owner(app, core)
    foreign = await stranger.client.post("/jobs/new", data=fields)
    assert foreign.status_code == 404  # another owner's agent


async def test_offerings_enroll_tokens_and_the_work_of_an_agent(app: Any, core: Core, client: Any) -> None:
    owner = await new_owner(app, core)
    agent = await new_agent(owner, name="Tidy Worker")
    added = await owner.client.post(
        f"/my/agents/{agent.id}/offerings", data={"title": "Tidy a CSV", "price": "45", "deliveryHours": "24"}
    )
    assert added.status_code == 303, added.text
    page = await owner.client.get(f"/my/agents/{agent.id}")
    assert "Tidy a CSV" in page.text and "$45.00" in page.text and "No jobs taken yet" in page.text
    listed = (await owner.client.get(f"/api/v2/owner/agents/{agent.id}/offerings")).json()["offerings"]
    archived = await owner.client.post(f"/my/agents/{agent.id}/offerings/{listed[0]['id']}/archive")
    assert archived.status_code == 303
    assert "Archived" in (await owner.client.get(f"/my/agents/{agent.id}")).text
    bad = await owner.client.post(f"/my/agents/{agent.id}/offerings", data={"title": "", "price": "x"})
    assert bad.status_code == 422

    minted = await owner.client.post("/my/enroll-tokens")
    assert minted.status_code == 200 and "enr_" in minted.text and "shown once" in minted.text.lower()
    token = minted.text.split("enr_", 1)[1].split('"', 1)[0].split("&", 1)[0]
    registered = await client.post(
        "/api/v2/agents/register",
        json={
            "name": "Enrolled",
            "endpointUrl": "https://enrolled.example.com",
            "enrollToken": "enr_" + token,
        },
    )
    assert registered.status_code == 201, registered.text
    assert "Enrolled" in (await owner.client.get("/my/agents")).text

    # The worker side: a slot taken by the owner's agent shows on the jobs page and the agent's page.
    b = await buyer(app, core, funds=5_000)
    job_id = await draft(client, b, 0, title="Label the photos")
    assert (await client.post(f"/api/v2/jobs/{job_id}/publish", headers=b.agent.h)).status_code == 200
    await to_review(client, job_id, b.agent, agent)
    jobs_page = await owner.client.get("/jobs")
    assert "Worked on by your agents" in jobs_page.text and "Label the photos" in jobs_page.text
    assert "Label the photos" in (await owner.client.get(f"/my/agents/{agent.id}")).text


async def test_the_console_script_is_served_and_allowed(client: Any) -> None:
    script = await client.get("/console.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "data-copy" in script.text
    page = await client.get("/login")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script src="/console.js" defer></script>' in page.text


async def test_two_rotations_of_one_key_at_once_mint_one_replacement(app: Any, core: Core) -> None:
    import asyncio

    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    other = await new_agent(owner)
    key_id = next(
        k["id"]
        for k in (await owner.client.get("/api-keys/dashboard")).json()["keys"]
        if k["agentId"] == agent.id
    )
    wrong_agent = await owner.client.post(f"/my/agents/{other.id}/keys/{key_id}/rotate")
    assert wrong_agent.status_code == 404  # the page's agent must be the key's
    both = await asyncio.gather(
        owner.client.post(f"/my/agents/{agent.id}/keys/{key_id}/rotate"),
        owner.client.post(f"/my/agents/{agent.id}/keys/{key_id}/rotate"),
    )
    assert sorted(r.status_code for r in both) == [200, 409], [r.text[:200] for r in both]
    live = [
        k
        for k in (await owner.client.get("/api-keys/dashboard")).json()["keys"]
        if k["agentId"] == agent.id and not k["revoked"]
    ]
    assert len(live) == 1 and live[0]["id"] != key_id
    assert (await owner.client.get("/api/v2/agents/me", headers=agent.h)).status_code == 401
