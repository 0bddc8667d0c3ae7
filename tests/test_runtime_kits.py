"""Runtime kits: rendering from the template folders, writing them safely, and `callboard kit install`
against a real HTTP server (uvicorn on a free port) that plays the install-token exchange."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import stat
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from http_api.cli import main
from runtime_kits import (
    KEY_PLACEHOLDER,
    RUNTIME_TARGETS,
    KitFile,
    RuntimeKit,
    install_command,
    render_kit,
)
from runtime_kits.install import EXCHANGE_PATH, KitInstallError, install, write_kit
from tests.netutil import free_port

BASE = "https://callboard.example"
KEY = "cbk_0123456789abcdefghijABCDEFGHIJklmnopq1"
AGENT = {"agent_id": "agt_1", "agent_handle": "scribe", "agent_name": "Scribe"}
# The config file each MCP runtime reads, and whether its entry is remote (url + header) or stdio.
CONFIGS = {
    "MCP": [("mcp.json", "http"), ("mcp.stdio.json", "stdio")],
    "CODING_RUNTIME_1": [(".mcp.json", "http")],
    "CODING_RUNTIME_2": [(".codex/config.toml", "stdio")],
    "CODING_RUNTIME_3": [(".cursor/mcp.json", "url")],
}
TEMPLATE_NAMES = re.compile(r"\$\{?(base_url|mcp_url|sse_url|api_key|agent_\w+|prompt|runtime_target)\b")


def kit_files(kit: RuntimeKit) -> dict[str, KitFile]:
    return {f.path: f for f in kit.files}


def parse(file: KitFile) -> Any:
    return tomllib.loads(file.content) if file.path.endswith(".toml") else json.loads(file.content)


def server_entry(file: KitFile) -> dict[str, Any]:
    doc = parse(file)
    return doc["mcp_servers"]["callboard"] if file.path.endswith(".toml") else doc["mcpServers"]["callboard"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- rendering ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", RUNTIME_TARGETS)
def test_every_target_renders_parsable_files(target):
    kit = render_kit(target, base_url=BASE + "/", api_key=KEY, **AGENT)
    assert kit.runtime_target == target and kit.base_url == BASE and kit.agent_id == "agt_1"
    assert kit.env == {"CALLBOARD_URL": BASE, "CALLBOARD_API_KEY": KEY}
    assert "Scribe (@scribe, agent id agt_1)" in kit.prompt and "home" in kit.prompt
    assert KEY not in kit.prompt and kit.next_steps
    files = kit_files(kit)
    assert (
        files[".env"].content == f"CALLBOARD_URL={BASE}\nCALLBOARD_API_KEY={KEY}\n" and files[".env"].secret
    )
    for file in kit.files:
        if file.path.endswith((".json", ".toml")):
            parse(file)
        if not file.executable:  # the shell script uses its own $variables
            assert not TEMPLATE_NAMES.search(file.content), file.path
    instructions = [f for f in kit.files if f.path.endswith(".md")]
    assert (
        len(instructions) == 1
        and kit.prompt in instructions[0].content
        and KEY not in instructions[0].content
    )


@pytest.mark.parametrize("target", sorted(CONFIGS))
def test_mcp_runtimes_name_the_server_url_header_and_command(target):
    kit = render_kit(target, base_url=BASE, api_key=KEY, **AGENT)
    assert kit.mcp is not None
    assert kit.mcp.url == f"{BASE}/mcp" and kit.mcp.headers == {"X-API-Key": KEY}
    assert (kit.mcp.command, kit.mcp.args) == ("callboard", ["mcp"])
    assert kit.mcp.env == {"CALLBOARD_URL": BASE, "CALLBOARD_API_KEY": KEY}
    files = kit_files(kit)
    for path, shape in CONFIGS[target]:
        assert files[path].secret
        entry = server_entry(files[path])
        if shape == "stdio":
            assert entry == {
                "command": "callboard",
                "args": ["mcp"],
                "env": {"CALLBOARD_URL": BASE, "CALLBOARD_API_KEY": KEY},
            }
        else:
            expected = {"url": f"{BASE}/mcp", "headers": {"X-API-Key": KEY}}
            assert entry == ({"type": "http", **expected} if shape == "http" else expected)


def test_generic_http_kit_has_no_mcp_entry_and_a_curl_script():
    kit = render_kit("GENERIC_HTTP", base_url=BASE, api_key=KEY, **AGENT)
    assert kit.mcp is None
    files = kit_files(kit)
    assert set(files) == {".env", "AGENT_PROMPT.md", "callboard.sh"}
    assert f"GET {BASE}/api/v2/home" in kit.prompt and f"GET {BASE}/api/v2/jobs" in kit.prompt
    assert "X-API-Key" in kit.prompt
    script = files["callboard.sh"]
    assert script.executable and script.content.startswith("#!/bin/sh\n") and KEY not in script.content


@pytest.mark.parametrize("target", RUNTIME_TARGETS)
def test_without_a_key_every_file_carries_the_placeholder(target):
    kit = render_kit(target, base_url=BASE, **AGENT)
    assert kit.env["CALLBOARD_API_KEY"] == KEY_PLACEHOLDER
    assert kit.mcp is None or (
        kit.mcp.headers["X-API-Key"] == KEY_PLACEHOLDER
        and kit.mcp.env["CALLBOARD_API_KEY"] == KEY_PLACEHOLDER
    )
    assert "cbk_" not in kit.model_dump_json()
    for file in kit.files:
        if file.secret:
            assert KEY_PLACEHOLDER in file.content, file.path
    for path, _ in CONFIGS.get(target, []):
        assert KEY_PLACEHOLDER in json.dumps(server_entry(kit_files(kit)[path]))
    # ...and with the key, no placeholder is left anywhere.
    assert KEY_PLACEHOLDER not in render_kit(target, base_url=BASE, api_key=KEY, **AGENT).model_dump_json()


def test_values_are_escaped_for_each_format():
    odd_url = 'http://h/a"b\\c\x7f'
    name = 'Quote " back \\ slash\nnew line ✓'
    for target in ("MCP", "CODING_RUNTIME_2"):
        kit = render_kit(
            target, base_url=odd_url, agent_id="a", agent_handle="h", agent_name=name, api_key=KEY
        )
        for path, _ in CONFIGS[target]:
            entry = server_entry(kit_files(kit)[path])
            assert entry.get("url", entry.get("env", {}).get("CALLBOARD_URL")) in (f"{odd_url}/mcp", odd_url)
        assert name in kit.prompt
    with pytest.raises(ValueError, match="line break"):
        render_kit("MCP", base_url="http://h/\nINJECTED=1", api_key=KEY, **AGENT)


def test_unknown_target_raises():
    with pytest.raises(ValueError, match="unknown runtime target"):
        render_kit("CODING_RUNTIME_9", base_url=BASE, **AGENT)


def test_install_command_is_the_cli_line():
    assert install_command(BASE, "cbi_abc") == f"callboard kit install --url {BASE} --token cbi_abc"


def test_kit_round_trips_through_camel_case_json():
    kit = render_kit("CODING_RUNTIME_1", base_url=BASE, api_key=KEY, **AGENT)
    dumped = kit.model_dump(by_alias=True, mode="json")
    assert {"runtimeTarget", "baseUrl", "agentId", "nextSteps"} <= set(dumped)
    assert RuntimeKit.model_validate(dumped) == kit


def test_every_template_file_is_package_data():
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["*"]
    root = Path(__file__).parents[1] / "runtime_kits" / "templates"
    files = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) >= len(RUNTIME_TARGETS) * 2
    for path in files:
        assert any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns), path


# --- writing ------------------------------------------------------------------------------------------


def one_file_kit(*files: KitFile) -> RuntimeKit:
    kit = render_kit("GENERIC_HTTP", base_url=BASE, api_key=KEY, **AGENT)
    return kit.model_copy(update={"files": list(files)})


@pytest.mark.parametrize(
    "path",
    [
        "../escape.txt",
        "a/../../escape.txt",
        "/tmp/escape.txt",
        "..",
        "",
        ".",
        "C:\\escape.txt",
        "a\\..\\..\\escape.txt",
    ],
)
def test_write_kit_refuses_paths_outside_the_directory(tmp_path, path):
    target = tmp_path / "kit"
    kit = one_file_kit(KitFile(path="fine.md", content="ok"), KitFile(path=path, content="x"))
    with pytest.raises(KitInstallError, match="nothing was written"):
        write_kit(kit, target)
    assert list(target.iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()


def test_write_kit_refuses_a_symlink_leading_out(tmp_path):
    outside, kit_dir = tmp_path / "outside", tmp_path / "kit"
    outside.mkdir()
    kit_dir.mkdir()
    (kit_dir / ".cursor").symlink_to(outside)
    kit = render_kit("CODING_RUNTIME_3", base_url=BASE, api_key=KEY, **AGENT)
    with pytest.raises(KitInstallError, match="symbolic link"):
        write_kit(kit, kit_dir)
    assert list(outside.iterdir()) == [] and not (kit_dir / ".env").exists()


def test_write_kit_refuses_duplicate_paths(tmp_path):
    with pytest.raises(KitInstallError, match="twice"):
        write_kit(
            one_file_kit(KitFile(path="a.md", content="1"), KitFile(path="./a.md", content="2")), tmp_path
        )


def test_write_kit_sets_modes_and_creates_parents(tmp_path):
    previous = os.umask(0o077)  # the modes are the kit's, whatever the umask
    try:
        written = write_kit(render_kit("GENERIC_HTTP", base_url=BASE, api_key=KEY, **AGENT), tmp_path / "new")
        written += write_kit(
            render_kit("CODING_RUNTIME_2", base_url=BASE, api_key=KEY, **AGENT), tmp_path / "cr2"
        )
    finally:
        os.umask(previous)
    root = tmp_path.resolve() / "new"
    assert written[:3] == [root / ".env", root / "AGENT_PROMPT.md", root / "callboard.sh"]
    assert mode(root / ".env") == 0o600 and mode(root / "callboard.sh") == 0o755
    assert mode(root / "AGENT_PROMPT.md") == 0o644
    config = tmp_path / "cr2" / ".codex" / "config.toml"
    assert mode(config) == 0o600 and tomllib.loads(config.read_text())["mcp_servers"]["callboard"]["env"]
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_write_kit_keeps_a_different_existing_file_as_backup(tmp_path):
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"other": {"command": "x"}}}')
    kit = render_kit("CODING_RUNTIME_1", base_url=BASE, api_key=KEY, **AGENT)
    backups: list[Path] = []
    write_kit(kit, tmp_path, on_backup=backups.append)
    assert backups == [tmp_path / ".mcp.json.bak"]
    assert "other" in (tmp_path / ".mcp.json.bak").read_text()
    assert (
        server_entry(kit_files(kit)[".mcp.json"])
        == json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["callboard"]
    )
    write_kit(kit, tmp_path, on_backup=backups.append)  # same content again: nothing to keep
    assert len(backups) == 1


# --- install against a real server --------------------------------------------------------------------


class Exchange:
    """The install-token exchange: `tok-<TARGET>-<n>` is a valid single-use token; a few tokens answer
    with a broken server's replies; any other token is refused like the real route refuses it."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    async def handle(self, request: Request) -> Response:
        token = (await request.json()).get("token", "")
        if token == "tok-html":
            return PlainTextResponse("<html>Bad gateway</html>", status_code=502)
        if token == "tok-broken":
            return JSONResponse(self.body({"runtimeTarget": "MCP", "files": "nope"}))
        if token == "tok-escape":
            kit = render_kit("GENERIC_HTTP", base_url=BASE, api_key=KEY, **AGENT)
            kit.files.append(KitFile(path="../escaped.txt", content="x"))
            return JSONResponse(self.body(kit.model_dump(by_alias=True, mode="json")))
        if token == "tok-placeholder":
            kit = render_kit("MCP", base_url=BASE, **AGENT)
            return JSONResponse(self.body(kit.model_dump(by_alias=True, mode="json")))
        target = token.removeprefix("tok-").rsplit("-", 1)[0]
        # The real route's refusals (callboard_core/onboarding/activation.py: exchange).
        if token in self.used:
            return JSONResponse(
                {
                    "code": "install_token_used",
                    "message": "This install token was used already.",
                    "requestId": "req_test",
                },
                status_code=410,
            )
        if target not in RUNTIME_TARGETS:
            return JSONResponse(
                {
                    "code": "install_token_not_found",
                    "message": "No such install token.",
                    "requestId": "req_test",
                },
                status_code=404,
            )
        self.used.add(token)
        kit = render_kit(target, base_url=str(request.base_url), api_key=KEY, **AGENT)
        return JSONResponse(self.body(kit.model_dump(by_alias=True, mode="json")))

    @staticmethod
    def body(kit: dict[str, Any]) -> dict[str, Any]:
        return {
            "installCommand": "callboard kit install --url x --token y",
            "runtimeKit": kit,
            "activation": {},
            "source": "onboarding_session",
            "activationId": "act_1",
        }


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    app = Starlette(routes=[Route(EXCHANGE_PATH, Exchange().handle, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


def test_install_writes_the_kit_with_the_real_key(server_url, tmp_path):
    written = install(server_url + "/", "tok-CODING_RUNTIME_1-1", tmp_path / "kit")
    root = tmp_path.resolve() / "kit"
    assert written == [root / ".mcp.json", root / ".env", root / "CALLBOARD.md"]
    entry = json.loads((root / ".mcp.json").read_text())["mcpServers"]["callboard"]
    assert entry == {"type": "http", "url": f"{server_url}/mcp", "headers": {"X-API-Key": KEY}}
    assert (root / ".env").read_text() == f"CALLBOARD_URL={server_url}\nCALLBOARD_API_KEY={KEY}\n"
    assert mode(root / ".env") == 0o600 and mode(root / ".mcp.json") == 0o600
    # the token is single use: the second exchange is refused, with the server's code
    with pytest.raises(KitInstallError, match="install_token_used") as err:
        install(server_url, "tok-CODING_RUNTIME_1-1", tmp_path / "again")
    assert "HTTP 410" in str(err.value) and "req_test" in str(err.value)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("cbi_unknown", r"HTTP 404\) install_token_not_found: No such install token"),
        ("tok-html", "answered HTTP 502: <html>Bad gateway"),
        ("tok-broken", "invalid kit"),
        ("tok-placeholder", "without an API key"),
        ("tok-escape", "outside its directory"),
    ],
)
def test_install_reports_what_went_wrong_and_writes_nothing(server_url, tmp_path, token, message):
    with pytest.raises(KitInstallError, match=message):
        install(server_url, token, tmp_path / "kit")
    assert list((tmp_path / "kit").iterdir()) == []
    assert not (tmp_path / "escaped.txt").exists()


def test_install_reports_an_unreachable_or_bad_url(tmp_path):
    with pytest.raises(KitInstallError, match="could not reach"):
        install(f"http://127.0.0.1:{free_port()}", "tok-MCP-1", tmp_path)
    with pytest.raises(KitInstallError, match="http"):
        install("ftp://callboard.example", "tok-MCP-1", tmp_path)


def test_install_refuses_an_unwritable_directory_before_spending_the_token(server_url, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(KitInstallError, match=r"not a writable directory|cannot create"):
        install(server_url, "tok-MCP-9", tmp_path / "file")
    assert install(server_url, "tok-MCP-9", tmp_path / "kit")  # the token was not spent


def test_cli_kit_install_writes_the_kit_and_prints_a_summary(server_url, tmp_path, capsys):
    main(["kit", "install", "--url", server_url, "--token", "tok-MCP-2", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert {p.name for p in tmp_path.iterdir()} == {"mcp.json", "mcp.stdio.json", ".env", "AGENT_PROMPT.md"}
    assert json.loads((tmp_path / "mcp.json").read_text())["mcpServers"]["callboard"]["headers"] == {
        "X-API-Key": KEY
    }
    assert f"MCP server: {server_url}/mcp" in out and "callboard mcp" in out
    assert "mcp.json" in out and ".env" in out and "Next:" in out and KEY not in out


def test_cli_kit_install_fails_with_the_server_code(server_url, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["kit", "install", "--url", server_url, "--token", "cbi_unknown", "--dir", str(tmp_path)])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "callboard kit install:" in err and "install_token_not_found" in err
    assert list(tmp_path.iterdir()) == []
