"""Every MCP tool argument has a real schema (what the MCP inspector's --strict check asks): no property whose
schema accepts anything without saying so, and every tool has a description and an output schema."""

from __future__ import annotations

from typing import Any

from mcp_server.server import build_server
from tests.conftest import make_settings

KINDS = ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")


def _empty_schemas(schema: Any, path: str, defs: dict[str, Any]) -> list[str]:
    """Paths of property and item schemas that state nothing."""
    found: list[str] = []
    if not isinstance(schema, dict):
        return found
    for name, prop in (schema.get("properties") or {}).items():
        if not any(k in prop for k in KINDS):
            found.append(f"{path}.{name}")
        found += _empty_schemas(prop, f"{path}.{name}", defs)
    for key in ("items", "additionalProperties"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            if not any(k in sub for k in KINDS):
                found.append(f"{path}[{key}]")
            found += _empty_schemas(sub, f"{path}[{key}]", defs)
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key) or []):
            if isinstance(sub, dict) and not any(k in sub for k in KINDS):
                found.append(f"{path}/{key}{i}")  # e.g. `Any | None`: anyOf [{}, null]
            found += _empty_schemas(sub, f"{path}/{key}{i}", defs)
    return found


async def test_every_tool_argument_has_a_real_schema(tmp_path: Any) -> None:
    from callboard_core.container import Core

    core = Core.build(make_settings(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", tmp_path))
    try:
        tools = await build_server(core).list_tools()
    finally:
        await core.close()
    assert len(tools) >= 40
    problems = []
    for tool in tools:
        schema = tool.input_schema
        defs = schema.get("$defs", {})
        problems += _empty_schemas(schema, tool.name, defs)
        for name, sub in defs.items():
            problems += _empty_schemas(sub, f"{tool.name}#{name}", defs)
        if not tool.description or tool.output_schema is None:
            problems.append(f"{tool.name}: no description or output schema")
    assert not problems, problems
    # Every tool says it takes no other argument (call_tool refuses one: test_mcp).
    assert [t.name for t in tools if t.input_schema.get("additionalProperties") is not False] == []
