"""The layering of docs/architecture.md, checked on the source: every import counts, at module level or
inside a function (a deferred import is still a dependency), except those under `if TYPE_CHECKING:`.

- No import cycle anywhere in callboard_core, http_api and mcp_server.
- The core imports no front end; a domain package imports none of the modules that assemble or run the
  core (`container`, `handlers`, `worker`, `health`, `seed`, `pipeline`); `metrics` imports no domain (domains count
  their own events in it).
- The front ends do not import each other, except the HTTP server's process assembly (`http_api.app`
  mounts the MCP transports, `http_api.cli` starts `callboard mcp`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("callboard_core", "http_api", "mcp_server")
ASSEMBLY = {
    "callboard_core.container",
    "callboard_core.worker",
    "callboard_core.health",
    "callboard_core.seed",
    "callboard_core.handlers",
}
ASSEMBLY |= {"callboard_core.pipeline"}
FRONT_END_ASSEMBLY = {"http_api.app", "http_api.cli"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (a package's `__init__` for a name it re-exports)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(name: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(t for a in node.names if (t := _resolve(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    target = _resolve(f"{base}.{alias.name}") or _resolve(base)
                    if target:
                        found.add(target)
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(node, field, []) if not isinstance(node, ast.Import | ast.ImportFrom) else [])
            for handler in getattr(node, "handlers", []):
                visit(handler.body)

    visit(tree.body)
    found.discard(name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(GRAPH):
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _top(name: str) -> str:
    return name.partition(".")[0]


def _domain(name: str) -> str | None:
    """The domain package a core module belongs to (`callboard_core.jobs.sweeper` -> `jobs`), if any."""
    parts = name.split(".")
    if parts[0] != "callboard_core" or len(parts) < 2:
        return None
    return parts[1] if (ROOT / "callboard_core" / parts[1]).is_dir() and parts[1] != "db" else None


def test_the_graph_sees_the_whole_tree() -> None:
    assert len(GRAPH) > 200
    assert "callboard_core.jobs.sweeper" in GRAPH["callboard_core.health"]  # a module-level import
    assert "callboard_core.ledger.service" in GRAPH["callboard_core.worker"]


def test_no_import_cycle() -> None:
    assert _cycles() == []


def test_the_core_imports_no_front_end() -> None:
    leaks = {
        name: sorted(t for t in targets if _top(t) != "callboard_core")
        for name, targets in GRAPH.items()
        if _top(name) == "callboard_core"
    }
    assert {name: targets for name, targets in leaks.items() if targets} == {}


def test_domains_import_nothing_that_assembles_or_runs_the_core() -> None:
    upward = {
        name: sorted(targets & ASSEMBLY) for name, targets in GRAPH.items() if _domain(name) is not None
    }
    assert {name: targets for name, targets in upward.items() if targets} == {}


def test_metrics_imports_no_domain() -> None:
    assert sorted(t for t in GRAPH["callboard_core.metrics"] if _domain(t)) == []


def test_the_front_ends_do_not_import_each_other() -> None:
    crossing = {
        name: sorted(t for t in targets if _top(t) in ("http_api", "mcp_server") and _top(t) != _top(name))
        for name, targets in GRAPH.items()
        if _top(name) in ("http_api", "mcp_server") and name not in FRONT_END_ASSEMBLY
    }
    assert {name: targets for name, targets in crossing.items() if targets} == {}


# Adapters and ports keep their own sessions (a remote service's state, an outbox): not domains.
OWN_SESSIONS = {"processor", "mail"}


def test_no_domain_opens_its_own_write_session() -> None:
    """A domain's work runs in the caller's unit of work, or in one it opens through the UnitsOfWork port
    (which carries the bus): never `db.session(write=True)`."""
    found = [
        name
        for name, path in MODULES.items()
        if _domain(name) not in (None, *OWN_SESSIONS) and ".session(write=True)" in path.read_text()
    ]
    assert found == []


def test_no_domain_reads_a_processor_event() -> None:
    """The processor's raw event (its JSON) stays in the processor package; domains hear typed facts."""
    readers = sorted(
        name
        for name, targets in GRAPH.items()
        if _domain(name) not in (None, "processor") and "ProcessorEvent" in MODULES[name].read_text()
    )
    assert readers == []


def test_a_server_loads_no_library_it_may_never_use() -> None:
    """Each server process pays in resident memory for every module it imports (the 150 MB target of
    bench/run.py). The Stripe SDK (the Stripe adapter only), Alembic (migrations only) and httpx (the
    sandbox's webhook deliveries only, and with it rich and pygments when the dev extras are installed) are
    imported when first used, not when the server starts."""
    import subprocess
    import sys

    lazy = ("stripe", "alembic", "httpx", "rich", "pygments")
    probe = (
        "import sys, http_api.app, http_api.cli, mcp_server.server; "
        f"print(','.join(m for m in {lazy!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
