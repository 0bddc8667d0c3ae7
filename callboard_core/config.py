"""Settings from the environment (CALLBOARD_*)."""

from __future__ import annotations

import difflib
import json
import secrets
from collections.abc import Mapping
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent
VAR_DIR = PROJECT_ROOT / "var"


class ConfigError(ValueError):
    """A setting that cannot be used: one line naming the variable, what is wrong and an example. The CLI
    prints it and exits with status 2."""


# An example of each setting whose value has a shape to get right (the error shows it).
EXAMPLES: dict[str, str] = {
    "database_url": "sqlite+aiosqlite:///var/callboard.db or postgresql+asyncpg://user@host:5432/callboard",
    "base_url": "https://callboard.example.com",
    "trusted_origins": "https://app.example.com,https://admin.example.com (or a JSON list)",
    "redis_url": "redis://127.0.0.1:6379/0",
    "env": "development, test or production",
    "processor": "sandbox or stripe",
    "blob_backend": "local or s3",
    "mail_backend": "outbox or smtp",
    "rate_limit_public": "30/minute",
    "trusted_proxies": "127.0.0.1,10.0.0.0/8",
}


def _http_url(value: str, what: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{what} must be an http(s) URL with a host, not {value!r}")
    return value.strip()


class Environment(StrEnum):
    DEVELOPMENT = "development"
    TEST = "test"
    PRODUCTION = "production"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_", extra="ignore")

    env: Environment = Environment.DEVELOPMENT
    database_url: str = Field(default_factory=lambda: f"sqlite+aiosqlite:///{VAR_DIR / 'callboard.db'}")
    base_url: str = "http://127.0.0.1:8000"
    # Comma-separated (`https://a.example,https://b.example`) or a JSON list.
    trusted_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # The reverse proxies whose X-Forwarded-For / X-Forwarded-Proto `callboard serve` believes (addresses or
    # networks, comma-separated). Empty (the default): none, so no client picks the address the rate limits
    # and the request log see. Behind a proxy, name it: `127.0.0.1` or `10.0.0.0/8`.
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    secret_key: str = ""
    redis_url: str | None = None
    var_dir: Path = VAR_DIR

    # Mail: "outbox" records to the database (and logs); "smtp" sends through aiosmtplib.
    mail_backend: str = "outbox"
    mail_from: str = "callboard <no-reply@callboard.local>"
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 25
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = False
    # Where operating-team notifications (waitlist joins) go.
    ops_email: str = "ops@callboard.local"
    # Who issues the receipts, invoices and credit notes (printed on each document page); the address on
    # several lines separated by "\n" or ";", and the issuer's tax id if it has one.
    issuer_name: str = "Callboard"
    issuer_address: str = "Callboard marketplace; Set CALLBOARD_ISSUER_ADDRESS"
    issuer_tax_id: str | None = None

    # Limits and lifetimes.
    max_body_bytes: int = 1_048_576
    session_ttl_hours: int = 24 * 14
    magic_link_ttl_minutes: int = 15
    # Versions of the terms of service and the privacy notice a sign-up accepts (GET /auth/legal-versions).
    terms_version: str = "2025-01-01"
    privacy_version: str = "2025-01-01"
    rate_limit_enabled: bool = True
    rate_limit_public: str = "30/minute"
    rate_limit_signin: str = "10/minute"
    # Every public GET (directory search, profiles, claim and setup-link previews, pages), per address.
    rate_limit_public_read: str = "600/minute"
    # Bug reports filed, per address (the intake is public and stores what it is sent).
    rate_limit_bug_report: str = "10/hour"
    # Prefix of the rate-limit keys in Redis, so several deployments (or test runs) can share one server.
    rate_limit_key_prefix: str = "callboard-ratelimit"
    machine_token: str | None = None
    # GET /metrics (Prometheus text) answers only `Authorization: Bearer <this>`; unset, it is a 404.
    metrics_token: str | None = None
    # The deadline sweeper: how often it runs, and whether `callboard serve` runs it in-process.
    sweep_interval_seconds: float = 5.0
    # How often the background loop checks the whole ledger (`ledger.verify`: full scans) and reports what
    # it found on /metrics (`callboard_ledger_verify_failures`); 0 turns the check off.
    ledger_verify_interval_seconds: float = Field(default=3600.0, ge=0)
    sweeper_in_server: bool = True
    # One line per request (http_api/request_log.py), written by a background thread: `auto` is JSON in
    # production and readable text otherwise.
    request_log: bool = True
    log_format: Literal["auto", "json", "text"] = "auto"
    db_pool_size: int = 10
    sqlite_busy_timeout_ms: int = 30_000

    # File storage (callboard_core/blobs): "local" keeps files under var_dir/blobs and serves signed
    # /blobs/{token} URLs itself; "s3" presigns against an S3-compatible bucket.
    blob_backend: str = "local"
    s3_bucket: str | None = None
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    # Unset: boto3's default credential chain (environment, profile, instance role).
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    max_upload_bytes: int = 100 * 1024 * 1024
    upload_url_ttl_seconds: int = 900
    download_url_ttl_seconds: int = 300

    # Payment processor (callboard_core/processor): "sandbox" is the embedded one (state in our database,
    # hosted pages under /sandbox/processor); "stripe" needs the secret key and the webhook signing secret.
    processor: str = "sandbox"
    # Production refuses to start on the sandbox (its test cards would add real spending power) unless this
    # says it is a demo.
    allow_sandbox_in_production: bool = False
    stripe_secret_key: str | None = None
    stripe_webhook_secret: str | None = None
    stripe_api_base: str = "https://api.stripe.com"
    # Where the worker delivers the sandbox's webhook events (default: {base_url}/webhooks/processor).
    processor_webhook_url: str | None = None
    # The platform fee on a paid job, in basis points of the pay (1000 = 10%), charged to the requester's
    # owner on top of the pay and recorded on the job at publish (callboard_core/payments).
    platform_fee_bps: int = Field(default=1000, ge=0, le=10_000)
    # The smallest reward a paid job may carry (cents), so the platform fee of every paid job is at least a
    # cent and a job is worth a worker's time; 0 stays a free job.
    min_paid_reward_cents: int = Field(default=100, ge=1)
    # Disputes (callboard_core/disputes): a party may open one until this many days after the job closed;
    # staff owe a first response and a resolution within these hours of the opening, and the SLA indicator
    # shows "due soon" this many hours before each deadline.
    dispute_window_days: int = Field(default=14, ge=1)
    dispute_response_hours: float = Field(default=24.0, gt=0)
    dispute_resolution_hours: float = Field(default=120.0, gt=0)
    dispute_due_soon_hours: float = Field(default=4.0, ge=0)

    @field_validator("trusted_origins", mode="before")
    @classmethod
    def _origins_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except ValueError:
                    raise ValueError("is neither a JSON list nor comma-separated URLs") from None
            else:
                value = [part for part in (p.strip() for p in text.split(",")) if part]
        if isinstance(value, list):
            return [_http_url(str(item), "each origin") for item in value]
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies_list(cls, value: Any) -> Any:
        import ipaddress

        if isinstance(value, str):
            value = [part for part in (p.strip() for p in value.split(",")) if part]
        for item in value if isinstance(value, list) else []:
            try:
                ipaddress.ip_network(str(item), strict=False)
            except ValueError:
                raise ValueError(f"each proxy is an IP address or network, not {item!r}") from None
        return value

    @field_validator(
        "rate_limit_public", "rate_limit_signin", "rate_limit_public_read", "rate_limit_bug_report"
    )
    @classmethod
    def _rate_limit(cls, value: str) -> str:
        from limits import parse_many

        try:
            parse_many(value)
        except ValueError:
            raise ValueError(f"is not a rate such as 30/minute or 10/hour: {value!r}") from None
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return _http_url(value, "the base URL").rstrip("/")

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            backend = make_url(value).get_backend_name()
        except ArgumentError:
            raise ValueError(f"is not a database URL: {value!r}") from None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"names the {backend!r} database; callboard runs on SQLite or PostgreSQL")
        return value

    @model_validator(mode="after")
    def _production_rules(self) -> Settings:
        if self.env is Environment.PRODUCTION and not self.secret_key:
            raise ValueError("CALLBOARD_SECRET_KEY must be set in production")
        if self.blob_backend not in ("local", "s3"):
            raise ValueError("CALLBOARD_BLOB_BACKEND must be 'local' or 's3'")
        if self.blob_backend == "s3" and not self.s3_bucket:
            raise ValueError("CALLBOARD_S3_BUCKET must be set when CALLBOARD_BLOB_BACKEND is 's3'")
        if self.processor not in ("sandbox", "stripe"):
            raise ValueError("CALLBOARD_PROCESSOR must be 'sandbox' or 'stripe'")
        if (
            self.env is Environment.PRODUCTION
            and self.processor == "sandbox"
            and not self.allow_sandbox_in_production
        ):
            raise ValueError(
                "CALLBOARD_PROCESSOR is 'sandbox' (the default) in production, where its test cards would "
                "fund real balances: set CALLBOARD_PROCESSOR=stripe with CALLBOARD_STRIPE_SECRET_KEY and "
                "CALLBOARD_STRIPE_WEBHOOK_SECRET, or for a demo CALLBOARD_ALLOW_SANDBOX_IN_PRODUCTION=true"
            )
        if self.processor == "stripe":
            for name in ("stripe_secret_key", "stripe_webhook_secret"):
                if not getattr(self, name):
                    raise ValueError(
                        f"CALLBOARD_{name.upper()} must be set when CALLBOARD_PROCESSOR is 'stripe'"
                    )
        return self

    @property
    def is_production(self) -> bool:
        return self.env is Environment.PRODUCTION

    @property
    def origins(self) -> set[str]:
        """Origins trusted for cookie-authenticated unsafe requests: the base URL's plus the configured ones."""
        return {_origin_of(self.base_url), *(_origin_of(o) for o in self.trusted_origins)}

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def _origin_of(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}".lower()


def _dev_secret(var_dir: Path) -> str:
    """Development keeps a generated secret under var/ so sessions survive restarts."""
    var_dir.mkdir(parents=True, exist_ok=True)
    path = var_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    key = secrets.token_urlsafe(48)
    path.write_text(key)
    path.chmod(0o600)
    return key


def _config_error(exc: ValidationError) -> ConfigError:
    """The first problem as one line: the variable, what is wrong, an example."""
    error = exc.errors()[0]
    field = str(error["loc"][0]) if error.get("loc") else ""
    message = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
    if not field:  # a rule across settings: its message names the variables itself
        return ConfigError(message)
    example = EXAMPLES.get(field)
    default = Settings.model_fields[field].default if field in Settings.model_fields else None
    if example is None and default is not None and not callable(default):
        example = str(default)
    got = error.get("input")
    shown = (
        f" (got {got!r})"
        if isinstance(got, str | int | float) and not str(message).endswith(f"{got!r}")
        else ""
    )
    hint = f"; for example {example}" if example else ""
    return ConfigError(f"CALLBOARD_{field.upper()}: {message}{shown}{hint}")


def load_settings(**overrides: object) -> Settings:
    import os

    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise _config_error(exc) from None
    if settings.is_production and "CALLBOARD_BASE_URL" not in os.environ and "base_url" not in overrides:
        raise ConfigError(
            "CALLBOARD_BASE_URL must be set in production; for example https://callboard.example.com"
        )
    if not settings.secret_key:
        settings.secret_key = (
            secrets.token_urlsafe(48) if settings.env is Environment.TEST else _dev_secret(settings.var_dir)
        )
    if settings.database_url.startswith("sqlite"):
        settings.var_dir.mkdir(parents=True, exist_ok=True)
    return settings


# CALLBOARD_* variables read outside Settings: the MCP bridge's (callboard mcp), the test suite's.
OTHER_VARIABLES = frozenset({"CALLBOARD_URL", "CALLBOARD_API_KEY"})
OTHER_PREFIXES = ("CALLBOARD_TEST_", "CALLBOARD_CONTRACT_")


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each CALLBOARD_* variable no setting reads (a misspelt one would otherwise be ignored
    without a word), with the setting it most likely meant."""
    known = {f"CALLBOARD_{name.upper()}" for name in Settings.model_fields} | OTHER_VARIABLES
    warnings = []
    for name in sorted(environ):
        if not name.startswith("CALLBOARD_") or name in known or name.startswith(OTHER_PREFIXES):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        warnings.append(f"{name} is not a callboard setting and is ignored{hint}")
    return warnings


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
