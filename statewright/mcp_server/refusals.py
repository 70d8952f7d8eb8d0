"""What an MCP caller is told when a tool call is refused: the error worded for the caller,
with the workflow's current state and what the caller may do now, and a hint at what to do
next (only an unknown outcome may have changed anything)."""

from __future__ import annotations

from typing import Any

from statewright.access import Access
from statewright.errors import (
    Forbidden,
    IdempotencyKeyReused,
    IllegalTransition,
    OutcomeUnknown,
    StatewrightError,
    UnknownTool,
    UnknownWorkflowType,
    VersionConflict,
    WorkflowNotFound,
)
from statewright.mcp_server import catalogue as cat
from statewright.mcp_server.catalogue import Catalogue
from statewright.mcp_server.state import allowed_actions


async def error_body(
    access: Access, catalogue: Catalogue, exc: StatewrightError, workflow_id: Any
) -> dict[str, Any]:
    """The error with the workflow's current state and what the caller may do now."""
    # Worded for this caller: a tenant's workflows by the ids it knows them by.
    body = {k: v for k, v in access.public_error(exc).items() if v is not None}
    # The machine's allowed events include ones this caller may not fire (approvals):
    # report only the caller's own.
    body.pop("allowed", None)
    if isinstance(workflow_id, str) and not isinstance(exc, WorkflowNotFound):
        try:
            row = await access.get(workflow_id)
        except StatewrightError:
            row = None
        if row is not None:
            # An error's text may quote a value the workflow's type redacts.
            body = access.redactor(row).value(body)
            body.update(
                workflow_id=access.public_id(row.id),
                state=row.state,
                version=row.version,
                terminal=row.terminal,
                allowed_actions=allowed_actions(access, catalogue, row),
            )
    if isinstance(exc, OutcomeUnknown):
        # The one error after which something may have changed.
        body["hint"] = (
            "The outcome is unknown: it may or may not have been done. Call the same tool "
            "again with the same arguments and the same idempotency_key: if it was done, "
            "nothing is done twice (replayed: true). Without an idempotency_key, call "
            "get_workflow_state before deciding whether to call it again."
        )
    elif isinstance(exc, IdempotencyKeyReused):
        body["hint"] = (
            "Nothing was changed. This idempotency_key was used for a different request: "
            "use a new key for a new request."
        )
    elif isinstance(exc, IllegalTransition | VersionConflict):
        body["hint"] = (
            "Nothing was changed. Call get_workflow_state, then pick from allowed_actions."
        )
    else:
        body.setdefault("hint", "Nothing was changed.")
    return body


def unknown_tool(access: Access, name: str) -> StatewrightError:
    """Forbidden for an event the caller's roles may not fire, else an unknown tool."""
    machine, sep, event = name.partition(cat.SEP)
    if sep:
        try:
            declared = access.type_of(machine).machine.events.get(event)
        except UnknownWorkflowType:
            declared = None
        if declared is not None:
            return Forbidden(
                f"{access.principal.actor!r} may not fire {event!r}: it is not one of your tools",
                event=event,
            )
    return UnknownTool(f"no tool named {name!r}", tool=name)


__all__ = ["error_body", "unknown_tool"]
