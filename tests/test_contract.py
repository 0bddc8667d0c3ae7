"""The contract test: schemathesis (v4) runs every operation of the OpenAPI document a real `callboard serve`
serves, each with the credential its security names (schemathesis reads the document's security schemes):
a claimed agent's API key with every scope, a staff (SUPERADMIN) owner's session, an onboarding token and
the machine token. Every check runs (`--checks all`: no 5xx, documented statuses, headers and bodies,
schema-invalid input refused and schema-valid input taken, auth not ignored, deleted resources gone) in every
phase, the stateful one included, and the run's own credentials must live to its end.

The run is bounded (CALLBOARD_CONTRACT_EXAMPLES examples per operation and phase, a fixed seed) to fit CI's
time; set it higher by hand for a longer hunt, and pass more `st run` options in CALLBOARD_CONTRACT_ARGS.
A failure prints schemathesis's own account of each failing case; CALLBOARD_CONTRACT_REPORT=1 also keeps
its NDJSON event log (every case, ~40 MB) beside the test's temporary files. It is off by default: writing
it took about a tenth of the run's CPU.
The rules no schema can state are listed in RULES_NO_SCHEMA_STATES with the status each route answers.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from callboard_core import clock
from callboard_core.api_keys import service as api_keys
from callboard_core.auth import sessions
from callboard_core.container import Core
from callboard_core.errors import Unauthenticated
from callboard_core.onboarding.models import OnboardingSession
from callboard_core.security import tokens
from callboard_core.users.models import Role
from http_api.routes import all_routes
from tests.conftest import make_user
from tests.jobs_helpers import new_agent, new_owner
from tests.server_process import ServerProcess, can_spawn, spawn, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.skipif(can_spawn() is not None, reason=can_spawn() or "")]

ST = str(Path(sys.executable).with_name("st"))
EXAMPLES = int(os.environ.get("CALLBOARD_CONTRACT_EXAMPLES", "6"))
REPORT = os.environ.get("CALLBOARD_CONTRACT_REPORT") == "1"
SEED = os.environ.get("CALLBOARD_CONTRACT_SEED", "20261125")
CHECKS = "all"
# positive_data_acceptance: a request the schema allows is taken (2xx), or refused only for its credential
# (401/403), an object that is not there or not yours (404), a state (409) or a rate (429). Where a route
# refuses a schema-valid request for a rule no schema can state, it answers with a code that says what to do
# instead; those routes (an operationId regex) and the status they may answer:
RULES_NO_SCHEMA_STATES = {
    # Capabilities name tags of the taxonomy, which is data (unknown_capability).
    "^(list_directory|register_agent(_[12])?|create_agent|(owner_)?(create|update)_offering)$": "422",
    # A job's times are judged against now and each other (admissionClosesAt must be in the future, ...).
    "^(owner_)?(create|update)_job(_1)?$": "422",
    # A submission meets its job type's requirements, which are data (the type's submissionRequirements).
    "^(owner_)?submit$": "422",
    # Enabling auto top-up needs a threshold and an amount, sent now or stored before (set_autotopup).
    "^set_autotopup$": "422",
    # Deleting an agent takes its handle typed again (confirmHandle must equal the handle).
    "^delete_agent$": "422",
    # A category's or tag's slug is made from its name unless one is sent (No slug can be made from this
    # name; pass a slug).
    "^admin_create_(category|tag)$": "422",
    # A cursor is a token the previous page handed out, not any string (The cursor is not valid; start
    # again without it): every operation that pages with one.
    "^("
    + "|".join(
        sorted(
            r.operation_id for r in all_routes() if r.query is not None and "cursor" in r.query.model_fields
        )
    )
    + ")$": "422",
    # A retired route: 410 public_registration_unavailable names the ways that replace it.
    "^register_start$": "410",
    # Only a body signed with the webhook secret is taken (invalid_signature).
    "^processor_webhook$": "400",
}
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]
# Operations that end the credential they are called with run apart, with credentials of their own: a
# rotated key or a signed-out session would leave every later operation of the run answering 401.
ENDS_ITS_CREDENTIAL = ("rotate_key", "logout", "change_password")


MACHINE_TOKEN = "contract-machine-token-0123456789abcdef"


def _config(key: str, session: str, onboarding: str, path: Path) -> Path:
    """schemathesis.toml: one credential per security scheme of the document (http_api/openapi.py), and the
    routes' rules no schema states. The run sends no NUL: the rule that refuses one anywhere in a request is
    stated on every string the document types, but not inside free-form JSON (a recursive schema generators
    refuse); tests/test_error_contract.py sends NUL everywhere."""
    lines = ["generation.allow-x00 = false", ""]
    for scheme, (kind, value) in {
        "apiKey": ("api_key", key),
        "session": ("api_key", session),
        "onboardingToken": ("bearer", onboarding),
        "machineToken": ("bearer", MACHINE_TOKEN),
    }.items():
        lines += [f"[auth.openapi.{scheme}]", f'{kind} = "{value}"', ""]
    for regex, status in RULES_NO_SCHEMA_STATES.items():
        statuses = ", ".join(f'"{s}"' for s in [*ACCEPTED, status])
        lines += [
            "[[operations]]",
            f"include-operation-id-regex = '{regex}'",
            f"checks.positive_data_acceptance.expected-statuses = [{statuses}]",
            "",
        ]
    path.write_text("\n".join(lines))
    return path


def _run(
    server: ServerProcess, config: Path, report: Path, selection: list[str]
) -> subprocess.CompletedProcess[str]:
    argv = [
        ST,
        "--config-file",
        str(config),
        "run",
        f"{server.url}/openapi.json",
        "--checks",
        CHECKS,
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        SEED,
        # One worker: schemathesis's workers are threads, and Python 3.11's ast module keeps its recursion
        # depth per interpreter, not per thread, so two threads building ASTs at once fail with
        # "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905).
        "--workers",
        "1",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--request-timeout",
        "10",
        "--no-color",
        "--no-shrink",
        "--generation-database",
        "none",
        "--continue-on-failure",
        "--suppress-health-check",
        "all",
        # Session writes need a trusted Origin (the server's own), whatever the credential.
        "-H",
        f"Origin: {server.url}",
    ]
    if REPORT:
        argv += ["--report", "ndjson", "--report-dir", str(report)]
    argv += selection
    argv += shlex.split(os.environ.get("CALLBOARD_CONTRACT_ARGS", ""))  # e.g. --include-path-regex ^/auth
    # Run beside the report: schemathesis keeps a cache (.schemathesis/) in its working directory.
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=1200,
        cwd=report.parent,
    )


async def _credentials(app: Any, core: Core) -> dict[str, str]:
    owner = await new_owner(app, core)
    agent = await new_agent(owner)
    staff_id, staff_token = await make_user(core, role=Role.SUPERADMIN)
    token = tokens.new_token()
    async with core.uow() as uow:
        uow.session.add(
            OnboardingSession(
                slug=f"ws-{uuid.uuid4().hex[:10]}",
                owner_id=staff_id,
                token_hash=tokens.hash_token(token),
                token_expires_at=clock.now() + timedelta(hours=2),
                data={"draft": {"agent_name": "Contract"}},
            )
        )
    spare = await new_agent(owner)
    _, spare_session = await make_user(core)
    return {
        "key": agent.key,
        "session": staff_token,
        "onboarding": token,
        "spare_key": spare.key,
        "spare_session": spare_session,
    }


async def test_every_operation_keeps_the_documented_contract(app: Any, core: Core, tmp_path: Path) -> None:
    credentials = await _credentials(app, core)
    server = spawn(
        core.settings, tmp_path / "server.log", loop=False, env={"CALLBOARD_MACHINE_TOKEN": MACHINE_TOKEN}
    )
    c = credentials
    ending = [arg for op in ENDS_ITS_CREDENTIAL for arg in ("--include-operation-id", op)]
    try:
        await wait_ready(server)
        done = _run(
            server,
            _config(c["key"], c["session"], c["onboarding"], tmp_path / "schemathesis.toml"),
            tmp_path / "report",
            [arg.replace("include", "exclude") for arg in ending],
        )
        apart = _run(
            server,
            _config(c["spare_key"], c["spare_session"], c["onboarding"], tmp_path / "ending.toml"),
            tmp_path / "report-ending",
            ending,
        )
    finally:
        server.stop()
    print(done.stdout[-6000:])  # shown with -s: what each phase ran
    assert done.returncode == 0, done.stdout[-30000:] + done.stderr[-4000:]
    assert apart.returncode == 0, apart.stdout[-30000:] + apart.stderr[-4000:]
    # The run's own key and session lived to its end (every operation met a live credential), and the
    # operations that end one ended their own.
    async with core.uow() as uow:
        s = uow.session
        assert await _alive(api_keys.authenticate, s, credentials["key"])
        assert not await _alive(api_keys.authenticate, s, credentials["spare_key"])
        assert await _alive(sessions.authenticate, s, credentials["session"])
        assert not await _alive(sessions.authenticate, s, credentials["spare_session"])


async def _alive(check: Any, session: Any, credential: str) -> bool:
    try:
        await check(session, credential)
    except Unauthenticated:
        return False
    return True
