"""The MCP server (Model Context Protocol): workflows an LLM agent can drive but not corrupt.

``statewright mcp`` serves it over stdio; ``statewright serve`` mounts it at ``/mcp``
(streamable HTTP). See :mod:`statewright.mcp_server.catalogue` for the tools and why there is
one per event, and :mod:`statewright.mcp_server.state` for the view a model reads.
"""

from __future__ import annotations

from statewright.mcp_server.catalogue import Catalogue, EventTool, build_catalogue, tool_name
from statewright.mcp_server.server import create_server

__all__ = ["Catalogue", "EventTool", "build_catalogue", "create_server", "tool_name"]
