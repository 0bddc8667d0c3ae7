"""The bug-report bridge: anyone files a report (public, rate-limited, 64 KB, secrets redacted before
storage); staff triage it; an automation runner, holding the machine token, takes the queue one report at a
time and reports back (a pull request, or closed).

`models` (the report and its one state table), `redaction` (what never reaches the database), `schemas`,
`service` (intake, the staff feed and triage, the runner's enqueue, claim and status).
"""
