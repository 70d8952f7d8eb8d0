"""What a real MCP client sees of ``statewright mcp`` (stdio, the SDK's client): the tools
per caller, the resources and the resource templates. Shared by the MCP reference page's
generator (``gen_mcp.py``) and its test."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.mcp.conftest import stdio_session, write_tokens

CALLERS = ("viewer", "agent", "boss", "ops")
"""Tokens of tests/mcp/conftest.py: read-only, agent, approver+operator, system+operator."""


@dataclass
class Catalogue:
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Tool name -> its ``inputSchema``, over every caller."""
    descriptions: dict[str, str] = field(default_factory=dict)
    seen_by: dict[str, set[str]] = field(default_factory=dict)
    """Tool name -> the callers (of CALLERS) that list it."""
    resources: list[str] = field(default_factory=list)
    templates: dict[str, str] = field(default_factory=dict)
    """URI template -> its description."""


async def catalogue(tmp: Path) -> Catalogue:
    tokens = write_tokens(tmp / "tokens.yaml")
    out = Catalogue()
    for who in CALLERS:
        async with stdio_session(tmp / "sw.db", tokens, who, sys.stderr) as session:
            for tool in (await session.list_tools()).tools:
                out.tools[tool.name] = dict(tool.input_schema)
                out.descriptions[tool.name] = tool.description or ""
                out.seen_by.setdefault(tool.name, set()).add(who)
            if who == "boss":
                resources = (await session.list_resources()).resources
                out.resources = sorted(str(r.uri) for r in resources)
                found = (await session.list_resource_templates()).resource_templates
                out.templates = {t.uri_template: t.description or "" for t in found}
    return out
