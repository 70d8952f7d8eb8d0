"""Plain-JSON views of workflows for the surfaces (HTTP, dashboard, MCP).

A context blob can be large (documents, tool outputs); the views carry a *summary* shaped for
a person or an LLM: every top-level key, long strings cut, long lists shortened, deep nesting
elided. The full context stays one request away.
"""

from __future__ import annotations

from typing import Any

from statewright.types import StepRecord, TransitionRecord, WorkflowRow

MAX_STRING = 200
MAX_ITEMS = 5
MAX_KEYS = 30
MAX_DEPTH = 2


def summarize(value: Any, depth: int = 0) -> Any:
    """A bounded copy of a JSON value (see the module docstring)."""
    if isinstance(value, str):
        if len(value) <= MAX_STRING:
            return value
        return value[:MAX_STRING] + f"... ({len(value) - MAX_STRING} more characters)"
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            return f"[{len(value)} items]"
        head = [summarize(v, depth + 1) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            head.append(f"... ({len(value) - MAX_ITEMS} more items)")
        return head
    if isinstance(value, dict):
        if depth >= MAX_DEPTH and value:
            return f"{{{len(value)} keys}}"
        keys = list(value)
        out = {k: summarize(value[k], depth + 1) for k in keys[:MAX_KEYS]}
        if len(keys) > MAX_KEYS:
            out["..."] = f"{len(keys) - MAX_KEYS} more keys"
        return out
    return value


def workflow_view(row: WorkflowRow, allowed: list[str] | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": row.id,
        "type": row.type,
        "machine_version": row.machine_version,
        "tenant": row.tenant,
        "state": row.state,
        "terminal": row.terminal,
        "version": row.version,
        "attempts": row.attempts,
        "total_attempts": row.total_attempts,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "state_entered_at": row.state_entered_at,
        "next_due_at": row.next_due_at,
        "leased_by": row.lease_owner,
        "last_error": row.last_error,
        "cancel_requested": row.cancel_requested is not None,
        "parked": row.parked,
        "progress": row.progress,
        "summary": summarize(row.context),
    }
    if allowed is not None:
        view["allowed_events"] = allowed
    return view


def transition_view(rec: TransitionRecord) -> dict[str, Any]:
    return {
        "seq": rec.seq,
        "workflow_id": rec.workflow_id,
        "version": rec.version,
        "from_state": rec.from_state,
        "to_state": rec.to_state,
        "event": rec.event,
        "payload": rec.payload,
        "actor": rec.actor,
        "context_patch": rec.context_patch,
        "at": rec.at,
    }


def step_view(rec: StepRecord) -> dict[str, Any]:
    return {
        "key": rec.key,
        "step": rec.step,
        "status": rec.status,
        "outcome": rec.outcome,
        "result": rec.result,
        "error": rec.error,
        "attempts": rec.attempts,
        "started_at": rec.started_at,
        "finished_at": rec.finished_at,
    }
