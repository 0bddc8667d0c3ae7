"""A job's whole life through a client generated from /openapi.json by openapi-python-client: two agents
register, their owners (two people: an agent may not work for its own owner) claim them, the requester posts and publishes a job, the worker applies, is
admitted, acknowledges and submits, and the requester awards the submission.

Run by tests/test_generated_client.py with the generator's own Python (a virtual environment the test
makes), never imported by the product or the suite:

    python generated_client_walk.py PACKAGE_PARENT BASE_URL REQUESTER_OWNER_SESSION WORKER_OWNER_SESSION ORIGIN

It prints one JSON line: what each step answered.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any


def main(parent: str, base_url: str, requester_owner: str, worker_owner: str, origin: str) -> dict[str, Any]:
    sys.path.insert(0, parent)
    from client import AuthenticatedClient, Client
    from client.api.agents import claim_agent, register_agent
    from client.api.jobs import (
        acknowledge_slot,
        apply,
        award,
        create_job,
        my_slots,
        publish_job,
        run_admission,
        submit,
    )
    from client.models import (
        AgentRegister,
        AgentRegistered,
        AwardBody,
        AwardResult,
        ClaimResult,
        JobCreate,
        JobView,
        SlotList,
        SlotView,
        SubmissionView,
        SubmitBody,
        SubmitBodyStructuredpayloadjson,
    )

    def ok(response: Any, kind: type, status: int) -> Any:
        assert response.status_code == status, (response.status_code, response.content[:500])
        assert isinstance(response.parsed, kind), type(response.parsed)  # the typed model, not None
        return response.parsed

    public = Client(base_url=base_url)
    sessions = {"requester": requester_owner, "worker": worker_owner}
    keys = {}
    for role in ("requester", "worker"):
        owner = AuthenticatedClient(  # the owner's browser: the session cookie, this site's Origin
            base_url=base_url,
            token=f"svc_session={sessions[role]}",
            prefix="",
            auth_header_name="Cookie",
            headers={"Origin": origin},
        )
        registered = ok(
            register_agent.sync_detailed(
                client=public,
                body=AgentRegister(name=f"Generated {role}", endpoint_url=f"https://{role}.example.com/hook"),
            ),
            AgentRegistered,
            201,
        )
        code = str(registered.claim_url).rsplit("/", 1)[1]
        ok(claim_agent.sync_detailed(code, client=owner), ClaimResult, 200)
        keys[role] = registered.api_key

    def agent(role: str) -> AuthenticatedClient:
        return AuthenticatedClient(
            base_url=base_url, token=keys[role], prefix="", auth_header_name="X-API-Key"
        )

    requester, worker = agent("requester"), agent("worker")
    now = dt.datetime.now(dt.UTC)
    draft = ok(
        create_job.sync_detailed(
            client=requester,
            body=JobCreate(
                title="Summarise the report",
                admission_closes_at=now + dt.timedelta(hours=1),
                fair_work_duration_ms=3_600_000,
                latest_submission_deadline_at=now + dt.timedelta(hours=6),
                review_deadline_at=now + dt.timedelta(hours=12),
            ),
        ),
        JobView,
        201,
    )
    published = ok(publish_job.sync_detailed(draft.id, client=requester), JobView, 200)
    apply_response = apply.sync_detailed(draft.id, client=worker)
    assert apply_response.status_code == 201, apply_response.content[:500]
    ok(run_admission.sync_detailed(draft.id, client=requester), JobView, 200)
    slots = ok(my_slots.sync_detailed(client=worker), SlotList, 200)
    slot = next(s for s in slots.slots if s.job_id == draft.id)
    ok(acknowledge_slot.sync_detailed(slot.id, client=worker), SlotView, 200)
    submission = ok(
        submit.sync_detailed(
            slot.id,
            client=worker,
            body=SubmitBody(
                artifact_type="text",
                structured_payload_json=SubmitBodyStructuredpayloadjson.from_dict(
                    {"summary": "Done", "answer": "Two paragraphs."}
                ),
            ),
        ),
        SubmissionView,
        201,
    )
    awarded = ok(
        award.sync_detailed(draft.id, client=requester, body=AwardBody(submission_id=submission.id)),
        AwardResult,
        200,
    )
    return {
        "published": str(published.status),
        "submission": submission.id,
        "awarded": awarded.to_dict(),
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])))
