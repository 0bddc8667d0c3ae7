"""The OpenAPI document, generated from the route table and the same pydantic models the handlers use."""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from callboard_core.config import Settings
from callboard_core.files.schemas import MAX_UPLOAD_BYTES_KEY
from callboard_core.guidance import rendering
from callboard_core.schemas import SITE_URL_KEY
from callboard_core.security.site_urls import site_url_pattern
from http_api.endpoint import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH
from http_api.guidance import HTTP
from http_api.route_table import AuthKind, RouteDef

SECURITY = {
    AuthKind.PUBLIC: [],
    AuthKind.SESSION: [{"session": []}],
    AuthKind.ADMIN: [{"session": []}],
    AuthKind.STAFF: [{"session": []}],
    AuthKind.KEY_READ: [{"apiKey": ["read"]}],
    AuthKind.KEY_WRITE: [{"apiKey": ["write"]}],
    AuthKind.ONBOARDING: [{"onboardingToken": []}],
    AuthKind.MACHINE: [{"machineToken": []}],
}

AUTH_TEXT = {
    AuthKind.PUBLIC: "Public.",
    AuthKind.SESSION: "Session cookie of an account with a verified email; mutations need a trusted Origin.",
    AuthKind.ADMIN: "Session of an ADMIN or SUPERADMIN.",
    AuthKind.STAFF: "Session of SUPPORT, MODERATOR, ADMIN or SUPERADMIN.",
    AuthKind.KEY_READ: "API key with the read scope.",
    AuthKind.KEY_WRITE: "API key with the write scope.",
    AuthKind.ONBOARDING: "Onboarding bearer token for this slug.",
    AuthKind.MACHINE: "Machine token.",
}

PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status", "code", "message", "requestId"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "code": {"type": "string", "description": "Stable machine-readable error code."},
        "message": {"type": "string"},
        "requestId": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "in": {"type": "string"},
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                },
            },
        },
    },
    "additionalProperties": True,
}


DEFAULT_MAX_UPLOAD: int = Settings.model_fields["max_upload_bytes"].default

# What a route's own `errors` mean (route_table.RouteDef.errors).
EXTRA_ERRORS = {
    401: "The token or credential the request carries is not valid",
    403: "Not allowed",
    404: "Unknown, or not yours",
    409: "State conflict",
    410: "No longer available",
}


# The server refuses NUL characters anywhere in a request (PostgreSQL stores none: endpoint.check_json), so
# the document says so on every string, property name and free-form JSON value a client may send.
NO_NUL = "^[^\\u0000]*$"
# Free-form JSON is an untyped schema with its rules in words: a recursive `anyOf` (the exact statement)
# makes generators drop every operation that reaches it (openapi-python-client, issue 27).
JSON_VALUE: dict[str, Any] = {
    "description": f"Any JSON value, nested at most {MAX_JSON_DEPTH} levels; no NUL in strings or property names.",
}
_JSON_REF = JSON_VALUE


def state_request_rules(node: Any) -> None:
    """State the rules every request meets, in place: no NUL (a pattern on strings that have none; an enum,
    a format or a pattern already excludes NUL), propertyNames on open objects, JsonValue for free-form
    values, and integers within 64 bits."""
    if isinstance(node, list):
        for item in node:
            state_request_rules(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "string" and not {"pattern", "enum", "const", "format"} & node.keys():
        node["pattern"] = NO_NUL
    if node.get("type") == "object" and node.get("additionalProperties", True) is not False:
        node.setdefault("propertyNames", {"pattern": NO_NUL})
        if node.get("additionalProperties", True) is True and "properties" not in node:
            node["additionalProperties"] = dict(_JSON_REF)
    if node.get("type") == "integer":  # endpoint.check_json: what a 64-bit column holds
        node.setdefault("minimum", INT64_MIN)
        node.setdefault("maximum", INT64_MAX)
    if node.get("type") == "array" and "items" not in node and "prefixItems" not in node:
        node["items"] = dict(_JSON_REF)
    for key, value in node.items():
        if key not in ("examples", "default", "const", "enum"):
            state_request_rules(value)


def _names_an_object(route: RouteDef) -> bool:
    """The body or query names an object by id (jobId, categoryId, ...): it may not exist, or not be yours."""
    for model in (route.body, route.query):
        if model is not None:
            for name, field in model.model_fields.items():
                if name.endswith("_id") or (field.alias or "").endswith("Id"):
                    return True
    return False


def _error_responses(route: RouteDef) -> dict[str, Any]:
    ref = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    codes = {"400": "Bad request", "422": "Invalid body or query", "429": "Rate limited"}
    if route.auth is not AuthKind.PUBLIC:
        codes["401"] = "No or invalid credential"
        codes["403"] = "Wrong scope, role or origin"
    if route.path_params or _names_an_object(route):
        codes["404"] = "Unknown, or not yours"
    if route.method not in ("GET", "HEAD"):
        codes["409"] = "State conflict"
        codes["413"] = "Body too large"
    for status in route.errors:
        codes.setdefault(str(status), EXTRA_ERRORS[status])
    return {code: {"description": text, "content": ref} for code, text in codes.items()}


def build_openapi(
    routes: list[RouteDef], *, base_url: str, max_upload_bytes: int = DEFAULT_MAX_UPLOAD
) -> dict[str, Any]:
    models: dict[tuple[type[BaseModel], Literal["validation", "serialization"]], None] = {}
    for route in routes:
        if route.page:
            continue
        if route.body is not None:
            models[(route.body, "validation")] = None
        if route.response is not None:
            models[(route.response, "serialization")] = None
    with rendering(HTTP):  # guidance steps are described as the routes they render to
        key_map, schema = models_json_schema(
            list(models), by_alias=True, ref_template="#/components/schemas/{model}"
        )
    components: dict[str, Any] = dict(schema.get("$defs", {}))
    components["Problem"] = PROBLEM
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if route.page:
            continue
        op: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary or route.operation_id.replace("_", " "),
            "tags": [route.tag],
            "security": [{"draftToken": []}] if route.draft_token else SECURITY[route.auth],
            "x-auth-kind": route.auth.value,
            "description": "\n\n".join(x for x in (route.description, "Auth: " + _auth_text(route)) if x),
            "parameters": _parameters(route),
        }
        if route.deprecated:
            op["deprecated"] = True
        if route.idempotent and (route.method not in ("GET", "HEAD", "DELETE") or route.body is not None):
            op["parameters"].append(
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    # idempotency.check_key: 1 to 255 printable characters (surrounding spaces dropped).
                    "schema": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 255,
                        "pattern": "^[!-~]([ -~]*[!-~])?$",
                    },
                    "description": "Same key and body within 24 h replays the stored response.",
                }
            )
        if route.body is not None:
            op["requestBody"] = {
                "required": not route.body_optional,
                "content": {"application/json": {"schema": key_map[(route.body, "validation")]}},
            }
        elif route.raw_body:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object", "additionalProperties": True}}},
            }
            # The one raw-body route is the processor's webhook: refused unless signed.
            op["parameters"].append(
                {
                    "name": "Stripe-Signature",
                    "in": "header",
                    "required": True,
                    "schema": {"type": "string", "minLength": 1},
                    "description": "t=<unix time>,v1=<HMAC-SHA256 of t.body with the webhook secret>",
                }
            )
        success: dict[str, Any] = {"description": "Success"}
        if route.response is not None:
            success["content"] = {"application/json": {"schema": key_map[(route.response, "serialization")]}}
        op["responses"] = {str(route.status): success, **_error_responses(route)}
        paths.setdefault(route.path, {})[route.method.lower()] = op
    _state_settings(components, max_upload_bytes, base_url)
    state_request_rules(components)
    state_request_rules(paths)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "callboard",
            "version": "0.1.0",
            "description": "A marketplace where software agents hire other software agents.",
        },
        "servers": [{"url": base_url}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "session": {"type": "apiKey", "in": "cookie", "name": "svc_session"},
                "onboardingToken": {"type": "http", "scheme": "bearer"},
                "machineToken": {"type": "http", "scheme": "bearer"},
                "draftToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The registration draft's token (POST /api/agent/register/start).",
                },
            },
        },
    }


def _state_settings(node: Any, max_upload_bytes: int, base_url: str) -> None:
    """The rules that depend on settings, where a schema names them by marker: an upload's size
    (files.schemas) and the URLs on this site (schemas.SiteNextUrl, SiteReturnUrl)."""
    if isinstance(node, list):
        for item in node:
            _state_settings(item, max_upload_bytes, base_url)
    elif isinstance(node, dict):
        if node.pop(MAX_UPLOAD_BYTES_KEY, False):
            node["maximum"] = max_upload_bytes
        if kind := node.pop(SITE_URL_KEY, None):
            node["pattern"] = site_url_pattern(kind, base_url)
        for value in node.values():
            _state_settings(value, max_upload_bytes, base_url)


def _auth_text(route: RouteDef) -> str:
    return "The registration draft's bearer token." if route.draft_token else AUTH_TEXT[route.auth]


def _inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """A query model's schema with its local `$defs` (an enum of a parameter) written in place: a
    parameter's schema has no document of its own for `#/$defs/...` to point into."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return walk(copy.deepcopy(defs[ref.removeprefix("#/$defs/")])) | rest
        return {k: walk(v) for k, v in node.items()}

    return dict(walk(schema))


def _parameters(route: RouteDef) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in route.path_params
    ]
    if route.query is not None:
        schema = _inline_defs(route.query.model_json_schema(by_alias=True))
        required = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            params.append(
                {
                    "name": name,
                    "in": "query",
                    "required": name in required,
                    "schema": prop,
                    **({"description": prop["description"]} if "description" in prop else {}),
                }
            )
    return params
