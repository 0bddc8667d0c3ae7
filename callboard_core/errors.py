"""The one error hierarchy of the core. Front ends map it (HTTP status, MCP isError) in one place each."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel


class CallboardError(Exception):
    """Base class: every domain error has a stable machine-readable code and a human message."""

    code: str = "error"
    message: str = "Something went wrong."

    def __init__(self, message: str | None = None, *, code: str | None = None, **details: Any) -> None:
        self.message = message or type(self).message
        if code:
            self.code = code
        self.details = {k: v for k, v in details.items() if v is not None}
        super().__init__(self.message)


class PrepareFirst(Exception):
    """Raised by a write step run before its prepare step (`pipeline.run_write` with `prepare_on_demand`)
    that found it needs what the prepare step does (files to re-hash, a payment to record or fund). The
    pipeline rolls that attempt back, runs the prepare step and runs the write step again with its result;
    a write step given a prepared result never raises it. Not a CallboardError: no front end maps it."""


class ValidationFailed(CallboardError):
    """The request is well-formed but its content breaks a rule (400/422)."""

    code = "validation_failed"
    message = "The request is not valid."

    def __init__(self, message: str | None = None, *, errors: list[dict[str, Any]] | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.errors = errors or []


class BadRequest(CallboardError):
    code = "bad_request"
    message = "The request could not be understood."


class Unauthenticated(CallboardError):
    code = "unauthenticated"
    message = "A valid credential is required."


class Forbidden(CallboardError):
    code = "forbidden"
    message = "This credential may not perform this action."


class NotFound(CallboardError):
    code = "not_found"
    message = "No such resource."


class Conflict(CallboardError):
    """The resource is not in a state that allows the action; details carry the current state."""

    code = "conflict"
    message = "The resource is not in a state that allows this action."


class Gone(CallboardError):
    code = "gone"
    message = "This resource is no longer available."


class PayloadTooLarge(CallboardError):
    code = "payload_too_large"
    message = "The request body is too large."


class RateLimited(CallboardError):
    code = "rate_limited"
    message = "Too many requests; retry later."

    def __init__(self, retry_after: int, message: str | None = None) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after


class Unavailable(CallboardError):
    """A service we depend on (the payment processor, the database) is down: retry later (`retry_after`
    seconds when we can tell)."""

    code = "unavailable"
    message = "A service this action needs is not available right now; retry later."

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        retry_after: int | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, code=code, retry_after=retry_after, **details)
        self.retry_after = retry_after


class PaymentNotReady(CallboardError):
    code = "payment_not_ready"
    message = "The owner's payment set-up is not complete."


def field_error(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(message, errors=[{"field": field, "code": code, "message": message}])


def from_pydantic(exc: ValidationError, *, location: str = "body") -> ValidationFailed:
    """A pydantic ValidationError as the core's ValidationFailed, one entry per field (every front end)."""
    errors = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        loc = [str(p) for p in err["loc"]]
        errors.append(
            {"field": ".".join(loc) or location, "in": location, "code": err["type"], "message": err["msg"]}
        )
    fields = ", ".join(sorted({x["field"] for x in errors}))[:300]
    verb = "are" if location.endswith("s") else "is"  # "the body is", "the arguments are"
    return ValidationFailed(f"The {location} {verb} not valid: {fields}.", errors=errors)


def _wire(value: Any) -> Any:
    """A detail as JSON data: models (a next step, payment requirements) as the front end renders them."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value


def wire_details(exc: CallboardError) -> dict[str, Any]:
    """The error's details as every front end shows them: named in Python (snake_case) in the core,
    camelCase on the wire like every body; per-field `errors` for a ValidationFailed."""
    details: dict[str, Any] = {to_camel(k) if "_" in k else k: _wire(v) for k, v in exc.details.items()}
    if isinstance(exc, ValidationFailed):
        details["errors"] = exc.errors
    return details
