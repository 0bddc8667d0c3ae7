"""Settings from the environment: a malformed value is one clear line naming the variable, what is wrong and
an example, with exit status 2 (never a traceback); lists take a comma-separated form too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from callboard_core.config import ConfigError, load_settings
from http_api.cli import main

BAD = [
    pytest.param(
        "CALLBOARD_DATABASE_URL", "not a url", "is not a database URL", "postgresql+asyncpg://", id="bad-url"
    ),
    pytest.param(
        "CALLBOARD_DATABASE_URL", "mysql://db/x", "SQLite or PostgreSQL", "sqlite+aiosqlite", id="not-ours"
    ),
    pytest.param(
        "CALLBOARD_TRUSTED_ORIGINS",
        '["https://a.example"',
        "neither a JSON list nor",
        "https://app",
        id="bad-list",
    ),
    pytest.param(
        "CALLBOARD_TRUSTED_ORIGINS", "ftp://a.example", "http(s) URL", "https://app", id="bad-origin"
    ),
    pytest.param("CALLBOARD_DB_POOL_SIZE", "ten", "valid integer", "for example 10", id="bad-number"),
    pytest.param("CALLBOARD_BASE_URL", "callboard.example.com", "http(s) URL", "https://", id="bad-base-url"),
    pytest.param("CALLBOARD_RATE_LIMIT_PUBLIC", "lots", "not a rate such as", "30/minute", id="bad-rate"),
    pytest.param(
        "CALLBOARD_RATE_LIMIT_BUG_REPORT", "5 per fortnight", "not a rate such as", "10/hour", id="bad-rate-2"
    ),
]


@pytest.mark.parametrize(("name", "value", "says", "example"), BAD)
def test_a_bad_setting_is_one_line_and_exit_status_2(
    name: str,
    value: str,
    says: str,
    example: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(tmp_path))
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        main(["openapi"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"callboard: configuration error: {name}: ")
    assert says in err and example in err


def test_lists_take_a_comma_separated_form_or_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("CALLBOARD_TRUSTED_ORIGINS", " https://a.example, https://b.example:8443 ,")
    settings = load_settings()
    assert settings.trusted_origins == ["https://a.example", "https://b.example:8443"]
    assert {"https://a.example", "https://b.example:8443"} <= settings.origins
    monkeypatch.setenv("CALLBOARD_TRUSTED_ORIGINS", '["https://c.example"]')
    assert load_settings().trusted_origins == ["https://c.example"]
    monkeypatch.setenv("CALLBOARD_TRUSTED_ORIGINS", "http://x")  # one origin: the form that used to crash
    assert load_settings().trusted_origins == ["http://x"]


def test_a_rule_across_settings_names_its_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("CALLBOARD_PROCESSOR", "stripe")
    with pytest.raises(ConfigError, match="CALLBOARD_STRIPE_SECRET_KEY must be set"):
        load_settings()


@pytest.mark.slow
def test_the_real_command_exits_2_with_one_line(tmp_path: Path) -> None:
    """`callboard serve` as an operator runs it, with a malformed list."""
    env = {**os.environ, "CALLBOARD_VAR_DIR": str(tmp_path), "CALLBOARD_DB_POOL_SIZE": "lots"}
    done = subprocess.run(
        [sys.executable, "-m", "http_api", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [lines[-1]] and lines[-1].startswith(
        "callboard: configuration error: CALLBOARD_DB_POOL_SIZE"
    )


@pytest.mark.slow
def test_production_refuses_the_sandbox_processor_unless_a_demo_says_so(tmp_path: Path) -> None:
    """Production with no processor set would take test card 4242 as money: `callboard serve` stops with one
    line instead, unless CALLBOARD_ALLOW_SANDBOX_IN_PRODUCTION says this is a demo."""
    env = {
        **os.environ,
        "CALLBOARD_VAR_DIR": str(tmp_path),
        "CALLBOARD_ENV": "production",
        "CALLBOARD_SECRET_KEY": "s" * 40,
        "CALLBOARD_BASE_URL": "https://callboard.example.com",
    }
    env.pop("CALLBOARD_PROCESSOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "http_api", "openapi"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("callboard: configuration error: CALLBOARD_PROCESSOR is 'sandbox'")
    assert "CALLBOARD_ALLOW_SANDBOX_IN_PRODUCTION=true" in line

    demo = subprocess.run(
        [sys.executable, "-m", "http_api", "openapi"],
        env={**env, "CALLBOARD_ALLOW_SANDBOX_IN_PRODUCTION": "true"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert demo.returncode == 0, demo.stderr


def test_a_misspelt_variable_is_named_with_the_setting_it_meant(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setenv("CALLBOARD_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("CALLBOARD_DATABSE_URL", "postgresql://elsewhere/db")
    monkeypatch.setenv("CALLBOARD_URL", "http://bridge.example")  # callboard mcp's own: not a warning
    with caplog.at_level("WARNING", logger="callboard.config"):
        main(["openapi"])
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "CALLBOARD_DATABSE_URL is not a callboard setting and is ignored; did you mean CALLBOARD_DATABASE_URL?"
    ]


@pytest.mark.slow
def test_users_create_reads_the_password_from_stdin_not_the_command_line(tmp_path: Path) -> None:
    """The operator's first staff member: the password is the first line of stdin (an argument would stay in
    ps and the shell's history), and that password signs in."""
    env = {
        **os.environ,
        "CALLBOARD_VAR_DIR": str(tmp_path),
        "CALLBOARD_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'ops.db'}",
    }
    cli = [sys.executable, "-m", "http_api"]
    assert subprocess.run([*cli, "migrate"], env=env, capture_output=True, timeout=120).returncode == 0
    made = subprocess.run(
        [*cli, "users", "create", "--email", "Ops@Example.com", "--role", "SUPERADMIN"],
        input="a long passphrase\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert '"role": "SUPERADMIN"' in made.stdout and "passphrase" not in made.stdout
    old = subprocess.run(
        [*cli, "users", "create", "--email", "x@example.com", "--password", "p"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert old.returncode == 2 and "unrecognized arguments: --password" in old.stderr

    async def signs_in() -> bool:
        from callboard_core.container import Core
        from callboard_core.security.passwords import verify_password
        from callboard_core.users import service as users

        core = Core.build(load_settings(database_url=env["CALLBOARD_DATABASE_URL"], var_dir=tmp_path))
        try:
            async with core.uow() as uow:
                user = await users.get_by_email(uow.session, "ops@example.com")
                assert user is not None and user.email_verified_at is not None
                return await verify_password(user.password_hash, "a long passphrase")
        finally:
            await core.close()

    import asyncio

    assert asyncio.run(signs_in())
