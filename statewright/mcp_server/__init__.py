"""The MCP server (Model Context Protocol): workflows an LLM agent can drive but not corrupt.

``statewright mcp`` serves it over stdio; ``statewright serve`` mounts it at ``/mcp``
(streamable HTTP). See :mod:`statewright.mcp_server.catalogue` for the tools and why there is
one per event, and :mod:`statewright.mcp_server.state` for the view a model reads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statewright.mcp_server.catalogue import (
        Catalogue,
        EventTool,
        build_catalogue,
        tool_name,
    )
    from statewright.mcp_server.server import create_server

# The names are imported on first use (PEP 562): importing a submodule runs this file, and
# statewright.mcp_server.http (imported by every `statewright serve`) must not load the MCP
# SDK that these import until /mcp is first called (see there).
_LAZY: dict[str, str] = {
    "Catalogue": "statewright.mcp_server.catalogue",
    "EventTool": "statewright.mcp_server.catalogue",
    "build_catalogue": "statewright.mcp_server.catalogue",
    "create_server": "statewright.mcp_server.server",
    "tool_name": "statewright.mcp_server.catalogue",
}

if not TYPE_CHECKING:  # type checkers see the imports above, and flag unknown names

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups do not come back here
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["Catalogue", "EventTool", "build_catalogue", "create_server", "tool_name"]
