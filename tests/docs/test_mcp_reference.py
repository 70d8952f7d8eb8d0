"""docs/reference/mcp.md names every tool, argument and resource a real MCP client lists
(``statewright mcp`` over stdio, as callers of four roles); regenerate it with
``python -m tests.docs.gen_mcp``."""

from __future__ import annotations

import re
from pathlib import Path

from statewright.mcp_server.catalogue import SEP
from tests.docs.mcp_catalogue import catalogue
from tests.docs.pages import code_spans, page

PAGE = page("mcp.md")


def _sections(level: str) -> dict[str, str]:
    parts = re.split(rf"^{level} (.+?)\s*$", PAGE, flags=re.MULTILINE)
    return {parts[i].strip("`"): parts[i + 1] for i in range(1, len(parts), 2)}


async def test_every_tool_argument_and_resource_is_on_the_page(tmp_path: Path) -> None:
    found = await catalogue(tmp_path)
    tools = _sections("###")
    events = code_spans(_sections("##")["Event tools"])
    missing: list[str] = []
    fixed = [n for n in found.tools if SEP not in n]
    assert {"get_workflow_state", "start_workflow", "list_workflows"} <= set(fixed)
    event_tools = [n for n in found.tools if SEP in n]
    assert event_tools
    for name in fixed:
        if name not in tools:
            missing.append(name)
            continue
        spans = code_spans(tools[name])
        for arg, schema in found.tools[name]["properties"].items():
            names = [arg, *(f"{arg}.{sub}" for sub in schema.get("properties", {}))]
            missing += [f"{name}({n})" for n in names if n not in spans]
    for name in event_tools:
        machine, _, event = name.partition(SEP)
        assert machine and event, name  # named <type>__<event>, as the page says
        missing += [f"{name}({a})" for a in found.tools[name]["properties"] if a not in events]
    spans = code_spans(PAGE)
    for uri in found.resources:
        generic = re.sub(r"^statewright://machines/[^/]+/", "statewright://machines/{type}/", uri)
        if generic not in spans:
            missing.append(uri)
    missing += [t for t in found.templates if t not in spans]
    assert found.resources and found.templates
    assert missing == [], f"not in docs/reference/mcp.md: {missing}"
