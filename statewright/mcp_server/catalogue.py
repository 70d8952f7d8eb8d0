"""The tools one caller sees: a few fixed ones and one per event its roles may fire.

Why one tool per event rather than a single ``send_event`` with an ``enum`` of event names:

- **The model picks by name and description.** ``order_fulfilment__ship`` with "The parcel
  left the warehouse. Fires from fulfillment_triggered -> shipped." is a choice a model makes
  reliably; an enum member inside one generic tool carries no description of its own.
- **Each event gets its exact payload schema.** The ``payload`` property of an event tool is
  the event's own JSON Schema (``ship`` requires ``tracking_number``), so the client and the
  model see the required fields before calling. A single tool could only say "payload: any
  object" or a ``oneOf`` keyed on the enum, which models fill in poorly.
- **What the caller may not do does not exist for it.** Tools are built per caller from the
  machine's roles: an agent's list simply has no approval tool, so there is nothing to
  hallucinate a call to. ``get_workflow_state`` names the tools that are legal *now*
  (``allowed_actions``) with the same names.

The cost is more tools (one per event and machine the caller may fire); the list is fixed for
a caller (it does not change with a workflow's state), so clients can cache it. Legality in the
current state is checked on every call, never assumed from the list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import mcp_types as types

from statewright.access import Principal
from statewright.definition.data import plain
from statewright.definition.machine import Event, Machine
from statewright.engine.workflow_type import WorkflowType
from statewright.mcp_server import arguments, bulk
from statewright.paging import MAX_CURSOR

SEP = "__"
"""Between machine and event in an event tool's name: ``order_fulfilment__ship``."""
TOOL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
"""The characters and length MCP allows in a tool name (SEP-986)."""

GET_STATE = "get_workflow_state"
LIST = "list_workflows"
START = "start_workflow"
WAIT = "wait_for_state"
POST_INPUT = "post_input"
MAX_WAIT = 300.0
DEFAULT_WAIT = 30.0
MAX_LIST = 100
MAX_OFFSET = 10_000
"""The list tool skips at most this many with ``offset``; deeper pages need the cursor."""

Kind = Literal["send", "decide", "cancel"]


@dataclass(frozen=True)
class EventTool:
    """An event exposed as a tool: how to call the engine for it."""

    name: str
    machine: str
    event: str
    kind: Kind
    """``send`` fires the event; ``decide`` is an approval or denial (the caller is recorded
    as the approver); ``cancel`` goes through the engine's cancel, which reaches a running
    step so it can stop and keep partial results."""
    approve: bool
    summary: str
    """The event's own description (what firing it means)."""
    payload_required: tuple[str, ...]
    tool: types.Tool


@dataclass(frozen=True)
class Catalogue:
    """Everything one caller may call, by tool name."""

    fixed: tuple[types.Tool, ...]
    events: Mapping[str, EventTool]

    def tools(self) -> list[types.Tool]:
        return [*self.fixed, *(e.tool for e in self.events.values())]

    def event_tool(self, machine: str, event: str) -> EventTool | None:
        return self.events.get(tool_name(machine, event))


def tool_name(machine: str, event: str) -> str:
    return f"{machine}{SEP}{event}"


class HasTypes(Protocol):
    """Where the workflow types come from: an :class:`~statewright.access.Access` (or an
    engine)."""

    @property
    def types(self) -> list[WorkflowType]: ...


def build_catalogue(source: HasTypes, principal: Principal) -> Catalogue:
    """The tools ``principal`` may call on the workflow types of ``source``."""
    wtypes = sorted(source.types, key=lambda t: t.name)
    fixed = [_get_state_tool(), _list_tool(wtypes), _wait_tool()]
    if not principal.read_only:
        fixed.insert(2, _start_tool(wtypes))
        fixed.append(_post_input_tool())
    if bulk.offered(principal):  # operators and admins only
        fixed.append(bulk.tool(wtypes, principal))
    events: dict[str, EventTool] = {}
    for wtype in wtypes:
        for event in wtype.machine.events.values():
            if not principal.may_fire(event):
                continue  # approval events without the approver role never get this far
            spec = _event_tool(wtype, event)
            if spec is not None and spec.name not in events:
                events[spec.name] = spec
    return Catalogue(tuple(fixed), events)


# -- fixed tools -------------------------------------------------------------------------------

_WORKFLOW_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "description": "The workflow's id.",
}
_EXPECTED_VERSION = {
    "type": "integer",
    "minimum": 1,
    "description": "Optional: the workflow's version as you last read it (get_workflow_state). "
    "If it has moved on since, nothing is done and you get a version_conflict error: "
    "re-read the state before deciding again.",
}


_IDEMPOTENCY_KEY = {
    "type": "string",
    "pattern": r"^[!-~]{1,255}$",
    "description": "Optional: a key of your choosing for this request (1-255 printable ASCII "
    "characters, no spaces), new for each new request. Pass the same key when retrying after "
    "an error whose outcome is unknown (outcome_unknown, a timeout, a lost connection): if "
    "the first call was applied, nothing is done again and the result says replayed: true. "
    "The same key with a different request is refused (idempotency_key_reused).",
}
_IF_ALLOWED = {
    "type": "boolean",
    "default": False,
    "description": "Optional: true to be told (applied: false, with the state and why) "
    "rather than refused with an error when the workflow's state does not allow this event "
    "now, e.g. it already moved past it. Nothing changes either way.",
}
RETRY_NOTE = (
    " Optional idempotency_key: pass the same key when retrying after an error whose outcome "
    "is unknown, so it is never done twice."
)
_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$"


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _get_state_tool() -> types.Tool:
    return types.Tool(
        name=GET_STATE,
        title="Get a workflow's state",
        description=(
            "Read a workflow as it is now: its state and what that means, the actions you may "
            "take now (allowed_actions: the tool names to call), what it is waiting for, a "
            "short summary of its data, the steps already completed with their results, and "
            "the last transitions. Call it first, and again whenever you are unsure: it is "
            "all you need to continue a workflow, e.g. after a restart."
        ),
        input_schema=_object({"workflow_id": _WORKFLOW_ID}, ["workflow_id"]),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


def _list_tool(wtypes: list[WorkflowType]) -> types.Tool:
    props: dict[str, Any] = {
        "type": {
            "type": "string",
            "enum": [t.name for t in wtypes],
            "description": "Only workflows of this type.",
        },
        "state": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "Only in this state.",
        },
        "terminal": {
            "type": "boolean",
            "description": "true: only finished workflows; false: only unfinished ones.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 20},
        "cursor": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_CURSOR,
            "description": "For the next page: next_cursor from the previous result (with the "
            "same filters).",
        },
        "offset": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_OFFSET,
            "default": 0,
            "description": "Skip this many (to page further, use cursor).",
        },
    }
    declared = sorted({a for t in wtypes for a in t.search_attributes})
    if (search := arguments.search_property(declared)) is not None:
        props["search"] = search
    return types.Tool(
        name=LIST,
        title="List workflows",
        description=(
            "List the workflows you can see, oldest in their state first, each with its state "
            "and the actions you may take on it now. A page at a time: when next_cursor is "
            "not null, pass it as cursor for the next page."
        ),
        input_schema=_object(props, []),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


def _start_tool(wtypes: list[WorkflowType]) -> types.Tool:
    lines = [
        f"- {t.name}: {t.machine.description or '(no description)'}"
        # A type's input schema (a start that fails it is refused with the schema's errors).
        + ("" if t.input_schema is None else f" Input schema: {_compact(t.input_schema)}")
        for t in wtypes
    ]
    props: dict[str, Any] = {
        "type": {
            "type": "string",
            "enum": [t.name for t in wtypes],
            "description": "The workflow type (machine) to start.",
        },
        "input": {
            "type": "object",
            "description": "The workflow's initial data (its context).",
            "default": {},
        },
        "id": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$",
            "description": "Optional id of your choosing. Starting an id that exists returns "
            "that workflow unchanged (created: false), so a retried start is safe.",
        },
        "idempotency_key": {
            **_IDEMPOTENCY_KEY,
            "description": str(_IDEMPOTENCY_KEY["description"])
            + " Without an id, the key names the workflow, so a retried start creates "
            "nothing new.",
        },
    }
    return types.Tool(
        name=START,
        title="Start a workflow",
        description="Start a workflow in its type's initial state."
        + RETRY_NOTE
        + " Types:\n"
        + "\n".join(lines),
        input_schema=_object(props, ["type"]),
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
    )


def _compact(schema: Any) -> str:
    return json.dumps(plain(schema), separators=(",", ":"), sort_keys=True)


def _post_input_tool() -> types.Tool:
    props: dict[str, Any] = {
        "workflow_id": _WORKFLOW_ID,
        "name": {
            "type": "string",
            "pattern": _NAME_PATTERN,
            "description": "The input's name (what the waiting step asks for).",
        },
        "payload": {"type": "object", "description": "The input's data, a JSON object."},
        "idempotency_key": _IDEMPOTENCY_KEY,
    }
    return types.Tool(
        name=POST_INPUT,
        title="Post an input to a workflow",
        description=(
            "Post an input (a name and a JSON object) into a workflow's inbox, for a step that "
            "waits for it (e.g. a document, a reply, a human's answer). It moves nothing by "
            "itself: the workflow's worker takes it. Returns the input's id and the workflow's "
            "state. Refused for a finished workflow (workflow_finished), and when no step of the "
            "workflow would ever take it (input_not_expected)." + RETRY_NOTE
        ),
        input_schema=_object(props, ["workflow_id", "name", "payload"]),
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False
        ),
    )


def _wait_tool() -> types.Tool:
    props: dict[str, Any] = {
        "workflow_id": _WORKFLOW_ID,
        "states": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Return once the workflow is in one of these states (or finished). "
            "Without it (and without after_version): once nothing runs automatically any "
            "more, i.e. the workflow waits for an event or is finished.",
        },
        "after_version": {
            "type": "integer",
            "minimum": 0,
            "description": "Return once the workflow's version is past this one (it moved "
            "since you read it), or it is finished. With states, either ends the wait.",
        },
        "timeout": {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_WAIT,
            "default": DEFAULT_WAIT,
            "description": "Seconds to wait at most; then the state is returned as it is, "
            "with timed_out: true (never an error).",
        },
    }
    return types.Tool(
        name=WAIT,
        title="Wait for a workflow",
        description=(
            "Wait while workers run a workflow's automatic steps, reporting each state change "
            "and step progress as MCP progress notifications; returns the workflow's state "
            "(as get_workflow_state does) with reached, timed_out and waited (seconds): "
            "at the timeout the state as it is, never an error. Changes nothing."
        ),
        input_schema=_object(props, ["workflow_id"]),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


# -- event tools -------------------------------------------------------------------------------


def _event_tool(wtype: WorkflowType, event: Event) -> EventTool | None:
    machine = wtype.machine
    name = tool_name(machine.name, event.name)
    if not TOOL_NAME.match(name):
        return None  # not expressible as an MCP tool name; HTTP and the CLI still fire it
    if event.approval and event.name in (wtype.approve_event, wtype.deny_event):
        kind: Kind = "decide"
        props: dict[str, Any] = {
            "workflow_id": _workflow_id_for(machine),
            "comment": {
                "type": "string",
                "minLength": 1,
                "maxLength": 10_000,
                "description": "Why.",
            },
            "expected_version": _EXPECTED_VERSION,
            "idempotency_key": _IDEMPOTENCY_KEY,
        }
        schema = _object(props, ["workflow_id"])
    else:
        kind = "cancel" if event.name == wtype.cancel_event else "send"
        payload = _payload_schema(event)
        props = {
            "workflow_id": _workflow_id_for(machine),
            "payload": payload,
            "expected_version": _EXPECTED_VERSION,
            "idempotency_key": _IDEMPOTENCY_KEY,
        }
        props["if_allowed"] = _IF_ALLOWED  # (send and cancel: not a decision)
        required = ["workflow_id"]
        if payload.get("required"):
            required.append("payload")
        schema = _object(props, required)
    description = _describe(machine, event)
    if kind == "decide":
        description += " You are recorded as the approver."
    elif kind == "cancel":
        description += (
            " If a worker is running a step, the cancel is delivered to it first (it may save "
            "partial results) and the workflow moves on shortly after."
        )
    description += RETRY_NOTE
    tool = types.Tool(
        name=name,
        title=f"{machine.name}: {event.name}",
        description=description,
        input_schema=schema,
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False
        ),
    )
    return EventTool(
        name=name,
        machine=machine.name,
        event=event.name,
        kind=kind,
        approve=event.name == wtype.approve_event,
        summary=event.description.strip(),
        payload_required=tuple(
            str(r) for r in schema["properties"].get("payload", {}).get("required", ())
        ),
        tool=tool,
    )


def _workflow_id_for(machine: Machine) -> dict[str, Any]:
    return {**_WORKFLOW_ID, "description": f"The {machine.name} workflow to act on."}


def _payload_schema(event: Event) -> dict[str, Any]:
    if event.payload_schema is None:
        return {"type": "object", "description": "No fields are needed: omit it or pass {}."}
    schema: dict[str, Any] = plain(event.payload_schema)
    schema.setdefault("description", f"The data the {event.name!r} event carries.")
    return schema


def _describe(machine: Machine, event: Event) -> str:
    """The event's own description plus where it fires from and leads to."""
    moves: list[str] = []
    for t in machine.transitions:
        if t.event != event.name:
            continue
        move = f"{' or '.join(t.sources)} -> {t.target}"
        if t.guard is not None:
            move += f" if {t.guard.expr if t.guard.expr is not None else t.guard.name}"
        moves.append(move)
    text = event.description.strip() or f"Fire {event.name!r}."
    if not text.endswith("."):
        text += "."
    return (
        f"[{machine.name}] {text} Fires from: {'; '.join(moves) or 'nowhere'}. "
        "Only legal when get_workflow_state lists this tool in allowed_actions; otherwise it "
        "is refused with an error naming the current state and changes nothing."
    )
