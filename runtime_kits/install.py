"""`callboard kit install`: exchange a one-time install token for the runtime kit and write its files.

The token is single use, so everything that can fail locally (the directory) is checked before the
exchange, and the kit's paths are all checked before the first file is written.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from runtime_kits import KEY_PLACEHOLDER, KitFile, RuntimeKit

EXCHANGE_PATH = "/api/onboarding/install-token/exchange"


class KitInstallError(Exception):
    """A failure the user can act on; the message says what happened."""


def fetch_kit(url: str, token: str, *, timeout: float = 30.0) -> RuntimeKit:
    """POST the token to the exchange route and return the kit it answers with (real key inside)."""
    base = url.strip().rstrip("/")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise KitInstallError(f"--url must be the service's http(s) address, got {url!r}")
    try:
        response = httpx.post(
            base + EXCHANGE_PATH, json={"token": token}, timeout=timeout, follow_redirects=True
        )
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise KitInstallError(f"could not reach {base}: {exc}") from exc
    if response.status_code != 200:
        raise KitInstallError(_describe_error(base, response))
    try:
        body = response.json()
    except ValueError:
        raise KitInstallError(f"{base} answered without JSON; is --url the callboard service?") from None
    if not isinstance(body, dict) or "runtimeKit" not in body:
        raise KitInstallError(f"{base} answered without a runtimeKit; is --url the callboard service?")
    try:
        kit = RuntimeKit.model_validate(body["runtimeKit"])
    except ValidationError as exc:
        raise KitInstallError(f"the server sent an invalid kit:\n{exc}") from None
    if kit.env.get("CALLBOARD_API_KEY", KEY_PLACEHOLDER) == KEY_PLACEHOLDER:
        raise KitInstallError("the server sent a kit without an API key; nothing was written")
    return kit


def _describe_error(base: str, response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "code" in body:
        text = f"{base} refused the exchange (HTTP {response.status_code}) {body['code']}: {body.get('message', '')}"
        return text + (f" (request {body['requestId']})" if body.get("requestId") else "")
    snippet = response.text.strip()[:200]
    return f"{base} answered HTTP {response.status_code}" + (f": {snippet}" if snippet else "")


def _relative(path: str) -> Path:
    """The kit path as a path inside the kit directory; anything that could leave it is refused."""
    pure = PurePosixPath(path)
    if not path or "\\" in path or "\0" in path or PureWindowsPath(path).anchor or pure.is_absolute():
        raise KitInstallError(f"the kit names an unsafe path {path!r}; nothing was written")
    if ".." in pure.parts or not pure.parts:
        raise KitInstallError(f"the kit names a path outside its directory {path!r}; nothing was written")
    return Path(*pure.parts)


def _mode(file: KitFile) -> int:
    if file.secret or PurePosixPath(file.path).name.startswith(".env"):
        return 0o700 if file.executable else 0o600
    return 0o755 if file.executable else 0o644


def _write_atomically(target: Path, data: bytes, mode: int) -> None:
    # mkstemp creates the file 0600, so a key is never readable by others, even for a moment.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def prepare_directory(directory: str | os.PathLike[str]) -> Path:
    """Create the kit directory and check it is writable (before a single-use token is spent)."""
    root = Path(directory).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KitInstallError(f"cannot create {root}: {exc.strerror}") from None
    if not root.is_dir() or not os.access(root, os.W_OK | os.X_OK):
        raise KitInstallError(f"{root} is not a writable directory")
    return root


def write_kit(
    kit: RuntimeKit, directory: str | os.PathLike[str], *, on_backup: Callable[[Path], None] | None = None
) -> list[Path]:
    """Write the kit's files under `directory` and return their paths. A file already there with other
    content is kept beside it as `<name>.bak` (a runtime config may hold the user's other servers)."""
    root = prepare_directory(directory)
    targets: dict[Path, KitFile] = {}
    for file in kit.files:
        target = root / _relative(file.path)
        # A symbolic link already in the directory (say .cursor -> /etc) must not carry a write outside it.
        if not target.resolve().is_relative_to(root):
            raise KitInstallError(
                f"{file.path!r} leads outside {root} through a symbolic link; nothing was written"
            )
        if target in targets:
            raise KitInstallError(f"the kit lists {file.path!r} twice; nothing was written")
        targets[target] = file
    written = []
    try:
        for target, file in targets.items():
            data, mode = file.content.encode("utf-8"), _mode(file)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                if target.is_dir() and not target.is_symlink():
                    raise KitInstallError(f"{target} is a directory; nothing was written there")
                if target.is_symlink() or target.read_bytes() != data:
                    backup = target.with_name(target.name + ".bak")
                    os.replace(target, backup)
                    if on_backup:
                        on_backup(backup)
            _write_atomically(target, data, mode)
            written.append(target)
    except OSError as exc:
        raise KitInstallError(f"could not write the kit into {root}: {exc}") from None
    return written


def _install(
    url: str, token: str, directory: str | os.PathLike[str], on_backup: Callable[[Path], None] | None = None
) -> tuple[RuntimeKit, list[Path]]:
    prepare_directory(directory)
    kit = fetch_kit(url, token)
    return kit, write_kit(kit, directory, on_backup=on_backup)


def install(url: str, token: str, directory: str | os.PathLike[str]) -> list[Path]:
    """Exchange the install token at `url` and write the kit under `directory`."""
    return _install(url, token, directory)[1]


def run(url: str, token: str, directory: str | os.PathLike[str]) -> str:
    """`callboard kit install`: install, then the summary to print."""
    backups: list[Path] = []
    kit, written = _install(url, token, directory, backups.append)
    return summary(kit, written, Path(directory).resolve(), backups)


def summary(kit: RuntimeKit, written: Sequence[Path], root: Path, backups: Sequence[Path] = ()) -> str:
    lines = [f"Installed the {kit.runtime_target} kit for agent {kit.agent_id} in {root}:"]
    lines += [f"  {path.relative_to(root)}" for path in written]
    for backup in backups:
        name = backup.relative_to(root)
        lines.append(f"Kept the previous {name.with_name(name.name.removesuffix('.bak'))} as {name}.")
    if kit.mcp:
        lines.append(
            f"MCP server: {kit.mcp.url} (X-API-Key header), or over stdio: {kit.mcp.command} "
            + " ".join(kit.mcp.args)
        )
    else:
        lines.append(f"API: {kit.base_url}/api/v2 (X-API-Key header)")
    secret = [f.path for f in kit.files if _mode(f) & 0o077 == 0]
    if secret:
        lines.append(f"The agent's API key is in {', '.join(secret)}: keep out of version control.")
    if kit.next_steps:
        lines.append("Next:")
        lines += [f"  - {step}" for step in kit.next_steps]
    return "\n".join(lines)
