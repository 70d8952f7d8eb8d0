"""Machine <-> plain document (the dict behind the JSON and YAML formats).

The document shape is published as a JSON Schema (``machine.schema.json``, package data);
:func:`from_dict` validates against it before reading anything, so unknown or misspelt keys
are rejected with their path instead of being silently ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from statewright.definition.data import plain
from statewright.definition.guards import compile_expression
from statewright.definition.machine import (
    Assign,
    AssignFn,
    Event,
    Guard,
    GuardFn,
    Machine,
    State,
    Transition,
    assign_from_exprs,
)
from statewright.definition.model import Spawn
from statewright.errors import DefinitionError, Problem

__all__ = [
    "assign_from_spec",
    "assign_to_data",
    "check_document",
    "event_from_dict",
    "event_to_dict",
    "from_dict",
    "guard_from_spec",
    "machine_schema",
    "seconds_key",
    "to_dict",
]


@cache
def machine_schema() -> dict[str, Any]:
    """The JSON Schema of a machine document (a fresh parse, cached)."""
    from importlib import resources

    package = resources.files("statewright.definition.formats")
    text = package.joinpath("machine.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def check_document(data: Any) -> None:
    """Raise :class:`DefinitionError` listing every place ``data`` breaks the schema."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(machine_schema())
    errors = sorted(validator.iter_errors(plain(data)), key=lambda e: list(map(str, e.path)))
    if errors:
        name = data.get("name") if isinstance(data, Mapping) else None
        raise DefinitionError(
            [
                Problem("invalid_document", f"at {_pointer(e.absolute_path)}: {e.message}")
                for e in errors
            ],
            machine=name if isinstance(name, str) else None,
        )


def _pointer(path: Any) -> str:
    return "/" + "/".join(str(p) for p in path)


def to_dict(machine: Machine) -> dict[str, Any]:
    """The machine as a JSON/YAML-ready document (optional keys only when not default)."""
    # A machine with compound states is saved as declared: nested states, and transitions
    # from and to compound states (the compiled leaves and edges follow from them).
    tree = machine.tree
    states = machine.states.values() if tree is None else tree.states
    transitions = machine.transitions if tree is None else tree.transitions
    return {
        "name": machine.name,
        "version": machine.version,
        "description": machine.description,
        "states": [_state_to_dict(s) for s in states],
        "events": [event_to_dict(e) for e in machine.events.values()],
        # The edges a state's spawn makes follow from it (definition/joins.py).
        "transitions": [_transition_to_dict(t) for t in transitions if not t.spawned],
    }


def seconds_key(seconds: float) -> str:
    """A delay as a JSON object key: ``"86400"`` rather than ``"86400.0"`` when integral."""
    value = float(seconds)
    return str(int(value)) if value.is_integer() else repr(value)


def _state_to_dict(state: State) -> dict[str, Any]:
    out: dict[str, Any] = {"name": state.name}
    if state.initial:
        out["initial"] = True
    if state.terminal:
        out["terminal"] = True
    if state.after:
        out["after"] = {seconds_key(k): v for k, v in sorted(state.after.items())}
    if state.every:
        out["every"] = {seconds_key(k): v for k, v in sorted(state.every.items())}
    if state.stuck_after is not None:
        out["stuck_after"] = state.stuck_after
    if state.description:
        out["description"] = state.description
    if state.entry is not None:
        out["entry"] = assign_to_data(state.entry)
    if state.exit is not None:
        out["exit"] = assign_to_data(state.exit)
    if state.states:
        out["states"] = [_state_to_dict(c) for c in state.states]
    if state.spawn is not None:
        out["spawn"] = _spawn_to_dict(state.spawn)
    return out


def _spawn_to_dict(spawn: Spawn) -> dict[str, Any]:
    out: dict[str, Any] = {"type": spawn.type, "over": spawn.over}
    if spawn.cap is not None:
        out["cap"] = spawn.cap
    if spawn.join != "all":
        out["join"] = spawn.join
    if spawn.then is not None:
        out["then"] = spawn.then
    if spawn.input != "item":
        out["input"] = spawn.input
    return out


def event_to_dict(event: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"name": event.name}
    if event.description:
        out["description"] = event.description
    if event.roles:
        out["roles"] = list(event.roles)
    if event.payload_schema is not None:
        out["payload_schema"] = plain(event.payload_schema)
    if event.approval:
        out["approval"] = True
    if event.assign is not None:
        out["assign"] = assign_to_data(event.assign)
    return out


def assign_to_data(action: Assign) -> str | dict[str, str]:
    """An action as saved: its expression map, or a Python action's name (the loader needs
    that name in ``actions=``)."""
    return dict(action.exprs) if action.exprs is not None else action.name


def _transition_to_dict(t: Transition) -> dict[str, Any]:
    out: dict[str, Any] = {
        "event": t.event,
        "source": t.sources[0] if len(t.sources) == 1 else list(t.sources),
        "target": t.target,
    }
    if t.guard is not None:
        # An expression is saved as its text; a Python guard by its name (the loader
        # needs that name in ``guards=``).
        out["guard"] = t.guard.expr if t.guard.expr is not None else t.guard.name
    if t.assign is not None:
        out["assign"] = assign_to_data(t.assign)
    if t.description:
        out["description"] = t.description
    if t.compensate:
        out["compensate"] = True
    return out


def from_dict(
    data: Mapping[str, Any],
    guards: Mapping[str, GuardFn] | None = None,
    actions: Mapping[str, AssignFn] | None = None,
) -> Machine:
    """Build (and validate) a machine from a document.

    Args:
        data: a document shaped like ``machine.schema.json``.
        guards: Python guards by name. A transition's ``guard`` string names one of these if
            present (registered names take precedence), else it is parsed as an expression.
        actions: Python actions by name, for an ``assign`` given as a string (an ``assign``
            map of expressions needs nothing).

    Raises:
        DefinitionError: the document breaks the schema, names a guard that is neither
            registered nor a valid expression, or describes an invalid machine; all
            problems are listed at once.
    """
    check_document(data)
    named = dict(guards or {})
    acts = dict(actions or {})
    problems: list[Problem] = []
    states = [_state_from_dict(s, acts, problems) for s in data["states"]]
    events = [event_from_dict(e, acts, problems) for e in data["events"]]
    transitions = [
        _transition_from_dict(i, t, named, problems, acts)
        for i, t in enumerate(data["transitions"])
    ]
    try:
        machine = Machine.build(
            data["name"],
            version=data.get("version", 1),
            description=data.get("description", ""),
            states=states,
            events=events,
            transitions=transitions,
        )
    except DefinitionError as exc:
        raise DefinitionError(problems + exc.problems, machine=data["name"]) from None
    if problems:
        raise DefinitionError(problems, machine=data["name"])
    return machine


def _state_from_dict(
    s: Mapping[str, Any], actions: Mapping[str, AssignFn], problems: list[Problem]
) -> State:
    where = f"state {s['name']!r}"
    entry, exit_ = s.get("entry"), s.get("exit")
    return State(
        name=s["name"],
        initial=s.get("initial", False),
        terminal=s.get("terminal", False),
        after={float(k): v for k, v in (s.get("after") or {}).items()},
        stuck_after=s.get("stuck_after"),
        description=s.get("description", ""),
        every={float(k): v for k, v in (s.get("every") or {}).items()},
        states=tuple(_state_from_dict(c, actions, problems) for c in s.get("states") or ()),
        entry=None
        if entry is None
        else assign_from_spec(f"{where} entry", None, entry, actions, problems, s["name"]),
        exit=None
        if exit_ is None
        else assign_from_spec(f"{where} exit", None, exit_, actions, problems, s["name"]),
        spawn=None if s.get("spawn") is None else Spawn(**s["spawn"]),
    )


def event_from_dict(
    e: Mapping[str, Any],
    actions: Mapping[str, AssignFn] | None = None,
    problems: list[Problem] | None = None,
) -> Event:
    spec = e.get("assign")
    where = f"event {e['name']!r}"
    found = [] if problems is None else problems
    action = None if spec is None else assign_from_spec(where, e["name"], spec, actions, found)
    if problems is None and found:
        raise DefinitionError(found)
    return Event(
        name=e["name"],
        description=e.get("description", ""),
        roles=tuple(e.get("roles", ())),
        payload_schema=e.get("payload_schema"),
        approval=e.get("approval", False),
        assign=action,
    )


def _transition_from_dict(
    index: int,
    t: Mapping[str, Any],
    named: Mapping[str, GuardFn],
    problems: list[Problem],
    actions: Mapping[str, AssignFn] | None = None,
) -> Transition:
    source = t["source"]
    sources = (source,) if isinstance(source, str) else tuple(source)
    spec = t.get("guard")
    where = f"transitions/{index}"
    guard = None if spec is None else guard_from_spec(where, t["event"], spec, named, problems)
    act = t.get("assign")
    action = None if act is None else assign_from_spec(where, t["event"], act, actions, problems)
    return Transition(
        sources,
        t["event"],
        t["target"],
        guard,
        t.get("description", ""),
        action,
        compensate=t.get("compensate", False),
    )


def assign_from_spec(
    where: str,
    event: str | None,
    spec: Any,
    actions: Mapping[str, AssignFn] | None,
    problems: list[Problem],
    state: str | None = None,
) -> Assign | None:
    """A registered action by name, or an expression map compiled; else problems are added
    (naming ``where``, and the event or ``state`` it belongs to) and None is returned, so the
    caller can keep checking the rest."""
    at = where if event is None else f"{where} (event {event!r})"
    if isinstance(spec, str):
        if actions and spec in actions:
            return Assign(spec, actions[spec])
        problems.append(
            Problem(
                "missing_action",
                f"{at}: action {spec!r} is not registered "
                f"(pass actions={{{spec!r}: fn}}); in a file, assign is a map of context key "
                "-> expression",
                state,
                event,
            )
        )
        return None
    if isinstance(spec, Mapping):
        try:
            return assign_from_exprs(spec)
        except DefinitionError as exc:
            problems.extend(
                Problem(p.code, f"{at}: {p.message}", state, event) for p in exc.problems
            )
            return None
    problems.append(
        Problem("invalid_action", f"{at}: assign must be a map or a name", state, event)
    )
    return None


def guard_from_spec(
    where: str, event: str, spec: str, named: Mapping[str, GuardFn], problems: list[Problem]
) -> Guard:
    """A registered guard by name, else a compiled expression; else a ``missing_guard`` problem.

    On a problem it returns a never-passing placeholder so the caller can keep checking the
    rest of the definition and report everything at once.
    """
    if spec in named:
        return Guard(spec, named[spec])
    try:
        return Guard(spec, compile_expression(spec), expr=spec)
    except DefinitionError as exc:
        problems.append(
            Problem(
                "missing_guard",
                f"{where} (event {event!r}): guard {spec!r} is not registered "
                f"(pass guards={{{spec!r}: fn}}) and is not a valid expression: "
                f"{exc.problems[0].message}",
                event=event,
            )
        )
        return Guard(spec, _never)


def _never(context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    return False
