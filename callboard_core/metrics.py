"""Prometheus metrics (issue 13): what the marketplace counts, in one registry, with low-cardinality labels
(route templates, kinds and statuses: never an id).

The front end observes requests (http_api/metrics.py); the core counts its own events where they happen:
ledger postings and payout failures (`ledger/counting.py`, a ledger hook, counted once the posting
commits), rate-limit refusals, owner-notification mail and processor-webhook delivery failures. Gauges that
describe state (database pool, the sweeper's lag) are read when the endpoint is scraped
(`callboard_core.health.metrics_text`). This module imports no domain: domains import it.

With several server processes (`callboard serve --workers N`) `callboard serve` sets
PROMETHEUS_MULTIPROC_DIR before the workers start: each process writes its values to files there and a
scrape of any process reads them all (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
REGISTRY = CollectorRegistry()

HTTP_REQUESTS = Counter(
    "callboard_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
HTTP_LATENCY = Histogram(
    "callboard_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template and method.",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
DB_POOL = Gauge(
    "callboard_db_pool_connections",
    "Database connections of the scraped process's pool, by state (checked_out, idle).",
    ["state"],
    multiprocess_mode="livesum",
    registry=REGISTRY,
)
SWEEPER_LAG = Gauge(
    "callboard_sweeper_lag_seconds",
    "How long the oldest deadline the sweeper has not acted on is past due (0: nothing is due).",
    multiprocess_mode="max",
    registry=REGISTRY,
)
RATE_LIMIT_REFUSALS = Counter(
    "callboard_rate_limit_refusals",
    "Requests refused with 429, by budget.",
    ["budget"],
    registry=REGISTRY,
)
DELIVERY_FAILURES = Counter(
    "callboard_delivery_failures",
    "Failed outbound deliveries, by channel (mail: owner notifications; webhook: the sandbox's events).",
    ["channel"],
    registry=REGISTRY,
)
MONEY_OPERATIONS = Counter(
    "callboard_money_operations",
    "Ledger transactions committed, by kind.",
    ["kind"],
    registry=REGISTRY,
)
PAYOUT_FAILURES = Counter(
    "callboard_payout_failures",
    "Payout attempts that failed, committed (a transfer taken back counts as money operation PAYOUT_REVERSED).",
    registry=REGISTRY,
)
LEDGER_VERIFY_FAILURES = Gauge(
    "callboard_ledger_verify_failures",
    "Problems the last scheduled check of the whole ledger found (0: the books are sound).",
    multiprocess_mode="max",
    registry=REGISTRY,
)
WRITE_RETRIES = Counter(
    "callboard_write_retries",
    "Write actions run again because the database undid them to break a deadlock or a serialization "
    "conflict with other requests, by reason (deadlock, serialization): a climbing count names a lock "
    "order to mend.",
    ["reason"],
    registry=REGISTRY,
)
for _channel in ("mail", "webhook"):
    DELIVERY_FAILURES.labels(channel=_channel)
for _reason in ("deadlock", "serialization"):
    WRITE_RETRIES.labels(reason=_reason)


def request_done(route: str, method: str, status: int, seconds: float) -> None:
    HTTP_REQUESTS.labels(route=route, method=method, status=str(status)).inc()
    HTTP_LATENCY.labels(route=route, method=method).observe(seconds)


def exposition() -> bytes:
    """The metrics in the Prometheus text format (every process's under `--workers N`). The state gauges
    are set by whoever scrapes first (`callboard_core.health.metrics_text`)."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)
