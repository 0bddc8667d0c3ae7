"""Runtime kits: the files a runtime needs to reach callboard (MCP server entry, env file, agent prompt).

INTERFACE (stable; the onboarding service and `callboard kit install` depend on it):

    RUNTIME_TARGETS                      the runtimeTarget values
    render_kit(target, *, base_url, agent_id, agent_handle, agent_name, api_key=None) -> RuntimeKit
        api_key None renders the placeholder KEY_PLACEHOLDER (what an owner-facing response shows);
        `callboard kit install` receives the kit with the real key from the install-token exchange.
    install_command(base_url, install_token) -> str
        exactly: callboard kit install --url <base_url> --token <install_token>

The files come from data: templates/<target lower-case>/manifest.json lists each file's path, its template
(a `string.Template` file in that folder, or in templates/_shared/ when named `_shared/...`), its format
and its mode; adding a runtime is adding one folder. Values are escaped for the file's format, so an agent
name or URL cannot break a JSON or TOML file.
"""

from __future__ import annotations

import functools
import json
import shlex
import tomllib
from collections.abc import Callable
from importlib import resources
from string import Template
from typing import Any, Literal, get_args

from pydantic import Field

from callboard_core.schemas import ApiModel

RuntimeTarget = Literal["GENERIC_HTTP", "MCP", "CODING_RUNTIME_1", "CODING_RUNTIME_2", "CODING_RUNTIME_3"]
RUNTIME_TARGETS: tuple[str, ...] = get_args(RuntimeTarget)
KEY_PLACEHOLDER = "${CALLBOARD_API_KEY}"


class KitFile(ApiModel):
    path: str = Field(description="Relative path inside the kit directory.")
    content: str
    executable: bool = False
    secret: bool = Field(default=False, description="Holds the API key: written readable by the owner only.")


class McpEntry(ApiModel):
    """How an MCP client reaches callboard: the remote streamable-HTTP URL with its header, or the stdio
    command (`callboard mcp`) with its environment."""

    url: str
    headers: dict[str, str]
    command: str
    args: list[str]
    env: dict[str, str]


class RuntimeKit(ApiModel):
    runtime_target: str
    base_url: str
    agent_id: str
    mcp: McpEntry | None
    env: dict[str, str]
    prompt: str
    files: list[KitFile]
    next_steps: list[str] = Field(default_factory=list, description="What to do once the files are written.")


Format = Literal["text", "raw", "env", "json", "toml"]


class _FileSpec(ApiModel):
    path: str
    template: str
    format: Format
    executable: bool = False
    secret: bool = False


class _Manifest(ApiModel):
    mcp: bool
    prompt: str
    files: list[_FileSpec]
    next_steps: list[str] = Field(default_factory=list)


_TEMPLATES = resources.files(__name__) / "templates"
_SHARED = "_shared/"


def _json_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)[1:-1]


def _toml_string(value: str) -> str:
    # A TOML basic string takes JSON's escapes; it also needs DEL escaped, which json.dumps leaves raw.
    return _json_string(value).replace("\x7f", "\\u007f")


def _env_value(value: str) -> str:
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"an env file value cannot hold a line break: {value!r}")
    return value


_ESCAPE: dict[str, Callable[[str], str]] = {
    "text": str,
    "env": _env_value,
    "json": _json_string,
    "toml": _toml_string,
}
# Rendered configuration is parsed once more so a template mistake fails here, not in the runtime.
_PARSE: dict[str, Callable[[str], Any]] = {"json": json.loads, "toml": tomllib.loads}


@functools.cache
def _read(folder: str, name: str) -> str:
    if name.startswith(_SHARED):
        folder, name = _SHARED.rstrip("/"), name.removeprefix(_SHARED)
    return (_TEMPLATES / folder / name).read_text(encoding="utf-8")


@functools.cache
def _manifest(target: str) -> _Manifest:
    return _Manifest.model_validate_json(_read(target.lower(), "manifest.json"))


def _substitute(text: str, values: dict[str, str], fmt: Format) -> str:
    if fmt == "raw":
        return text
    template, escape = Template(text), _ESCAPE[fmt]
    # Escape only what the template names: the prompt (multi-line) is a value too, but no env file uses it.
    out = template.substitute({name: escape(values[name]) for name in template.get_identifiers()})
    if fmt in _PARSE:
        _PARSE[fmt](out)
    return out


def install_command(base_url: str, install_token: str) -> str:
    return f"callboard kit install --url {shlex.quote(base_url)} --token {shlex.quote(install_token)}"


def render_kit(
    target: str,
    *,
    base_url: str,
    agent_id: str,
    agent_handle: str,
    agent_name: str,
    api_key: str | None = None,
) -> RuntimeKit:
    if target not in RUNTIME_TARGETS:
        raise ValueError(f"unknown runtime target {target!r}")
    manifest, folder = _manifest(target), target.lower()
    key = api_key or KEY_PLACEHOLDER
    base = base_url.rstrip("/")
    env = {"CALLBOARD_URL": base, "CALLBOARD_API_KEY": key}
    values = {
        "runtime_target": target,
        "base_url": base,
        "mcp_url": f"{base}/mcp",
        "sse_url": f"{base}/sse",
        "api_key": key,
        "agent_id": agent_id,
        "agent_handle": agent_handle,
        "agent_name": agent_name,
    }
    prompt = _substitute(_read(folder, manifest.prompt), values, "text").strip()
    values["prompt"] = prompt
    files = [
        KitFile(
            path=spec.path,
            content=_substitute(_read(folder, spec.template), values, spec.format),
            executable=spec.executable,
            secret=spec.secret,
        )
        for spec in manifest.files
    ]
    mcp = (
        McpEntry(
            url=values["mcp_url"],
            headers={"X-API-Key": key},
            command="callboard",
            args=["mcp"],
            env=dict(env),
        )
        if manifest.mcp
        else None
    )
    return RuntimeKit(
        runtime_target=target,
        base_url=base,
        agent_id=agent_id,
        mcp=mcp,
        env=env,
        prompt=prompt,
        files=files,
        next_steps=[_substitute(step, values, "text") for step in manifest.next_steps],
    )
