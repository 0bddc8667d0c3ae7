"""Every route module of the HTTP API; each defines `routes`, its RouteGroup."""

from __future__ import annotations

import importlib

from http_api.route_table import RouteDef

MODULES = [
    "http_api.routes.auth",
    "http_api.routes.pages",
    "http_api.routes.console",
    "http_api.routes.console_staff",
    "http_api.routes.agents",
    "http_api.routes.dashboard",
    "http_api.routes.offerings",
    "http_api.routes.directory",
    "http_api.routes.api_keys",
    "http_api.routes.capabilities",
    "http_api.routes.job_types",
    "http_api.routes.jobs",
    "http_api.routes.home",
    "http_api.routes.waitlist",
    "http_api.routes.bug_reports",
    "http_api.routes.admin_users",
    "http_api.routes.admin_agents",
    "http_api.routes.admin_reports",
    "http_api.routes.admin_tasks",
    "http_api.routes.disputes",
    "http_api.routes.onboarding",
    "http_api.routes.billing",
    "http_api.routes.documents",
    "http_api.routes.notifications",
    "http_api.routes.payouts",
    "http_api.routes.setup_links",
    "http_api.routes.setup_pages",
    "http_api.routes.sandbox_connect",
    "http_api.routes.webhooks",
    "http_api.routes.sandbox_pages",
]


def all_routes() -> list[RouteDef]:
    table: list[RouteDef] = []
    for name in MODULES:
        table.extend(importlib.import_module(name).routes.declared)
    return table
