"""The MCP server (Model Context Protocol): workflows an LLM agent can drive but not corrupt.

``statewright mcp`` serves it over stdio; ``statewright serve`` mounts it at ``/mcp``
(streamable HTTP). See :mod:`statewright.mcp_server.catalogue` for the tools and why there is
one per event, and :mod:`statewright.mcp_server.state` for the view a model reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statewright import _lazy

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
    __getattr__, __dir__ = _lazy.attributes(__name__, _LAZY)


__all__ = ["Catalogue", "EventTool", "build_catalogue", "create_server", "tool_name"]
