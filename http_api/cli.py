"""The `callboard` command: serve, migrate, worker, users create, openapi, backup, restore, mcp, kit install."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any


def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from callboard_core.config import get_settings
    from callboard_core.seed import migrate_and_seed
    from http_api import supervisor

    settings = get_settings()
    if args.workers > 1:
        _shared_metrics_dir(settings.var_dir)
    if not args.no_migrate:
        asyncio.run(migrate_and_seed(settings))
    options: dict[str, Any] = {
        "app": "http_api.app:create_app",
        "factory": True,
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        # X-Forwarded-* only from the proxies named in CALLBOARD_TRUSTED_PROXIES (none by default): else
        # any client on the machine could choose the address the rate limits count.
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": ",".join(settings.trusted_proxies) or None,
        "access_log": False,  # http_api/request_log.py writes one structured line per request instead
        # SIGTERM: stop accepting, let requests in flight finish (at most this long), then the lifespan's
        # shutdown lets the background pass under way finish.
        "timeout_graceful_shutdown": args.graceful_timeout,
    }
    if args.workers > 1 and supervisor.available():  # a socket per worker: see http_api/supervisor.py
        try:
            workers = supervisor.Supervisor(uvicorn.Config(**options), args.workers)
        except OSError as exc:  # the port is taken, or the address is not this machine's
            print(
                f"callboard serve: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr
            )
            raise SystemExit(supervisor.STARTUP_FAILURE) from None
        sys.exit(workers.run())
    uvicorn.run(**options, workers=args.workers)


def _shared_metrics_dir(var_dir: Path) -> None:
    """Several workers: each writes its metrics to files in one directory, and a scrape of any of them
    reads all (prometheus_client's multiprocess mode). Emptied at start: a dead run's values would count."""
    import os
    import shutil

    from callboard_core.metrics import MULTIPROC_ENV

    if os.environ.get(MULTIPROC_ENV):  # the operator's own directory: theirs to manage
        return
    path = Path(var_dir) / "metrics"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    os.environ[MULTIPROC_ENV] = str(path)


def _migrate(_: argparse.Namespace) -> None:
    from callboard_core.config import get_settings
    from callboard_core.seed import migrate_and_seed

    asyncio.run(migrate_and_seed(get_settings()))
    print("database is at the latest schema; seed data applied")


def _worker(args: argparse.Namespace) -> None:
    from callboard_core.config import get_settings
    from callboard_core.worker import run_worker

    asyncio.run(run_worker(get_settings(), once=args.once))


def _password() -> str:
    """The new user's password: typed twice at a terminal, else the first line of stdin (never an argument,
    which ps and the shell's history would keep)."""
    import getpass

    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            print("callboard users create: the passwords differ", file=sys.stderr)
            raise SystemExit(2)
        return password
    return sys.stdin.readline().rstrip("\r\n")


def _users_create(args: argparse.Namespace) -> None:
    from callboard_core.config import get_settings
    from callboard_core.container import Core
    from callboard_core.users import service as users

    async def run() -> None:
        core = Core.build(get_settings())
        try:
            async with core.uow() as uow:
                user = await users.create_with_password(  # the operator vouches for the address
                    uow.session,
                    email=args.email,
                    password=_password(),
                    role=args.role,
                    name=args.name,
                    verified=True,
                )
                user_id = user.id
        finally:
            await core.close()
        print(json.dumps({"id": user_id, "email": args.email.lower(), "role": args.role}))

    asyncio.run(run())


def _openapi(_: argparse.Namespace) -> None:
    from callboard_core.config import load_settings
    from http_api.openapi import build_openapi
    from http_api.routes import all_routes

    settings = load_settings()
    json.dump(
        build_openapi(all_routes(), base_url=settings.base_url, max_upload_bytes=settings.max_upload_bytes),
        sys.stdout,
        indent=2,
    )
    sys.stdout.write("\n")


def _backup(args: argparse.Namespace) -> None:
    from callboard_core.config import load_settings
    from callboard_core.db import backup

    settings = load_settings()
    url, path = settings.database_url, Path(args.path)
    try:
        if args.command == "backup":
            done = backup.backup_all(
                url,
                path,
                var_dir=settings.var_dir,
                local_files=settings.blob_backend == "local",
                secret_key=settings.secret_key,
                overwrite=args.force,
            )
            files = "files in S3 (not archived)" if done.files is None else f"{done.files} files"
            key = (
                "the development secret key"
                if done.secret
                else "no secret key (CALLBOARD_SECRET_KEY is yours)"
            )
            print(f"backed up to {args.path} (schema {done.revision}; the database, {files}, {key})")
        else:
            back = backup.restore_all(url, path, var_dir=settings.var_dir, secret_key=settings.secret_key)
            files = "" if back.files is None else f", {back.files} files"
            print(
                f"restored {args.path} (schema {back.revision}{files}); start the server to migrate it forward "
                "if needed"
            )
            if back.secret == "differs":
                print(
                    "the backup was made with another secret key than CALLBOARD_SECRET_KEY: set it to the "
                    "backup's (its secret_key member) or its files' links and stored responses will not verify",
                    file=sys.stderr,
                )
    except backup.BackupError as exc:
        print(f"callboard {args.command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _kit_install(args: argparse.Namespace) -> None:
    from runtime_kits.install import KitInstallError, run

    logging.getLogger("httpx").setLevel(logging.WARNING)  # its request line would only repeat --url
    try:
        print(run(args.url, args.token, args.dir))
    except KitInstallError as exc:
        print(f"callboard kit install: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def _mcp(_: argparse.Namespace) -> None:
    from mcp_server.stdio import SetupError, main

    logging.getLogger().setLevel(logging.WARNING)  # stderr only: stdout carries the protocol
    try:
        asyncio.run(main())
    except SetupError as exc:
        print(f"callboard mcp: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="callboard",
        description="callboard marketplace service. Settings come from CALLBOARD_* environment variables "
        "(README: Configuration).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    defaults = argparse.ArgumentDefaultsHelpFormatter  # every --help shows each option's default

    serve = sub.add_parser("serve", help="migrate, then serve the HTTP API", formatter_class=defaults)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port to listen on; links in mail and claim URLs use CALLBOARD_BASE_URL, so set it to match "
        "(make run PORT=... sets both)",
    )
    serve.add_argument("--workers", type=int, default=1, help="server processes")
    serve.add_argument("--log-level", default="info", help="uvicorn's log level")
    serve.add_argument(
        "--graceful-timeout",
        type=float,
        default=30.0,
        help="seconds requests in flight may take to finish after SIGTERM",
    )
    serve.add_argument("--no-migrate", action="store_true", help="do not apply migrations first")
    serve.set_defaults(func=_serve)

    sub.add_parser("migrate", help="apply migrations and seed data").set_defaults(func=_migrate)

    worker = sub.add_parser("worker", help="run background jobs", formatter_class=defaults)
    worker.add_argument("--once", action="store_true", help="run one pass and exit")
    worker.set_defaults(func=_worker)

    users = sub.add_parser("users", help="manage users").add_subparsers(dest="users_command", required=True)
    create = users.add_parser(
        "create",
        help="create a user with a password",
        description="Create a user whose address counts as verified (the operator vouches for it). The "
        "password is typed twice at a terminal, or read as the first line of stdin: "
        "printf '%s\\n' \"$PASSWORD\" | callboard users create --email a@example.com --role ADMIN",
        formatter_class=defaults,
    )
    create.add_argument("--email", required=True, help="the user's email address")
    create.add_argument(
        "--role",
        default="USER",
        choices=["USER", "SUPPORT", "MODERATOR", "ADMIN", "SUPERADMIN"],
        help="the user's role",
    )
    create.add_argument("--name", default=None, help="display name")
    create.set_defaults(func=_users_create)

    sub.add_parser("openapi", help="print the OpenAPI document").set_defaults(func=_openapi)

    back = sub.add_parser(
        "backup",
        help="archive the SQLite database (an online snapshot), its local files and its development secret key",
    )
    back.add_argument("path")
    back.add_argument("--force", action="store_true", help="replace PATH if it exists")
    back.set_defaults(func=_backup)
    restore = sub.add_parser(
        "restore",
        help="restore the backup at PATH: the database replaced, its files and key put back (stop first)",
    )
    restore.add_argument("path")
    restore.set_defaults(func=_backup)

    sub.add_parser(
        "mcp",
        help="the MCP server over stdio (CALLBOARD_API_KEY; CALLBOARD_URL bridges to a remote service)",
        description="The MCP server over stdio, for a runtime that starts its tools as processes. "
        "Environment: CALLBOARD_API_KEY (required: the agent's API key) and CALLBOARD_URL (the service, e.g. "
        "https://callboard.example: every request is bridged to its /mcp; without it the server runs "
        "in-process on CALLBOARD_DATABASE_URL).",
    ).set_defaults(func=_mcp)

    kit = sub.add_parser("kit", help="runtime kits").add_subparsers(dest="kit_command", required=True)
    install = kit.add_parser("install", help="exchange a one-time install token and write the runtime kit")
    install.add_argument("--url", required=True, help="the callboard service, e.g. https://callboard.example")
    install.add_argument("--token", required=True, help="the install token returned by activation")
    install.add_argument("--dir", default=".", help="where to write the kit (default: the current directory)")
    install.set_defaults(func=_kit_install)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    from callboard_core.config import ConfigError, unknown_variables

    for warning in unknown_variables(os.environ):  # a misspelt setting would otherwise be ignored unsaid
        logging.getLogger("callboard.config").warning(warning)

    try:
        args.func(args)
    except ConfigError as exc:  # one clear line, not a traceback
        print(f"callboard: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
