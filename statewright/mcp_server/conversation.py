"""The MCP resource ``statewright://workflows/{workflow_id}/conversation``: the messages of a
workflow's agents' model calls, in order (:meth:`~statewright.access.Access.conversation`),
redacted as the MCP server's callers read everything (agents never see what a type redacts).
"""

from __future__ import annotations

import json

import mcp_types as types

from statewright.access import Access

TEMPLATE = types.ResourceTemplate(
    uri_template="statewright://workflows/{workflow_id}/conversation",
    name="workflow-conversation",
    title="A workflow's agent conversation",
    description="The messages of the workflow's agents' model calls, in order (each with the "
    "step, agent, state and visit it came from), as JSON; empty for a workflow without agents.",
    mime_type="application/json",
)


async def read(access: Access, workflow_id: str) -> str:
    """The resource's text: ``{"workflow_id", "messages"}``."""
    messages = await access.conversation(workflow_id)
    return json.dumps({"workflow_id": workflow_id, "messages": messages}, indent=1)
