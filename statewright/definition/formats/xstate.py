"""Import and export a flat subset of XState (v5) machine JSON.

The mapping, chosen so an XState interpreter running the export behaves like the machine:

- ``id`` is the machine name, ``initial`` the initial state; each state is a key of
  ``states``; a terminal state has ``type: "final"``; ``description`` is kept.
- ``on: {EVENT: "target"}`` for one unguarded edge, else ``on: {EVENT: [{target, guard?,
  description?}, ...]}`` in priority order. ``guard`` is our guard text: an expression, or
  the name of a Python guard (XState resolves string guards by name too). On import
  ``cond`` (XState v4) is read as ``guard``, and a transition without ``target`` is a
  self-transition.
- Our ``after: {seconds: event}`` fires a declared event; XState's ``after`` fires
  transitions. So the export keeps the event in ``on`` (it can still be sent explicitly) and
  writes ``after: {ms: [<the same edges>]}`` with each edge tagged
  ``meta: {"statewright": {"event": <name>}}``; the import reads the tag back. An ``after``
  entry without the tag (a foreign machine) becomes a synthesized event named
  ``xstate.after.<ms>.<state>`` with those edges.
- What XState has no place for rides in ``meta.statewright``: the machine ``version`` and
  full event declarations (roles, payload schema, approval) at the root, ``stuck_after`` on
  states. Without them events are declared bare, in order of appearance.
- A transition with several sources is written once per source, so a round trip keeps
  behaviour but not that grouping.

- A transition's ``assign`` is written as ``actions: [{"type": "xstate.assign",
  "assignment": {key: "<expression>"}}]`` (our expression text; a Python action by
  ``{"type": <name>}``). On import, an ``xstate.assign`` action whose values are expression
  strings or constants (numbers, strings, booleans, null, lists of them) becomes the
  transition's ``assign``; a named action is taken from ``actions=`` (Python actions by
  name) when given there.
- An event's ``assign`` rides in the event declarations in ``meta.statewright``.

Not supported (DefinitionError, naming the state and event): nested or parallel states,
history states, ``invoke``, ``always``, named delays, multiple targets, wildcard events,
targets other than a sibling key or ``#<id>.<key>``, ``entry`` and ``exit`` actions (a
state's work is its handler), actions other than ``assign`` (side effects run as steps of
a handler, not on an edge), an assign with functions or objects, and more than one assign
per transition. Nothing is dropped silently. ``tags`` carry no behaviour and are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright.definition.formats.document import (
    assign_from_spec,
    assign_to_data,
    event_from_dict,
    event_to_dict,
    guard_from_spec,
    seconds_key,
)
from statewright.definition.machine import (
    Assign,
    AssignFn,
    Event,
    GuardFn,
    Machine,
    State,
    Transition,
)
from statewright.errors import DefinitionError, Problem

__all__ = ["from_xstate", "to_xstate"]

_META = "statewright"
_IGNORED = {"tags"}
_STATE_KEYS = {"type", "description", "on", "after", "meta", "entry", "exit"} | _IGNORED
_EDGE_KEYS = {"target", "guard", "cond", "description", "meta", "reenter", "internal", "actions"}
_ASSIGN = "xstate.assign"


def to_xstate(machine: Machine) -> dict[str, Any]:
    """The machine as XState v5 JSON (see the module docstring for the mapping)."""
    states: dict[str, Any] = {}
    for state in machine.states.values():
        node: dict[str, Any] = {}
        if state.terminal:
            node["type"] = "final"
        if state.description:
            node["description"] = state.description
        on = {e: _edges_out(machine, state.name, e) for e in machine.events_from(state.name)}
        if on:
            node["on"] = {
                e: edges[0]["target"] if edges == [{"target": edges[0]["target"]}] else edges
                for e, edges in on.items()
            }
        if state.after:
            node["after"] = {
                seconds_key(round(seconds * 1000, 6)): [
                    {**edge, "meta": {_META: {"event": event}}} for edge in on.get(event, [])
                ]
                for seconds, event in sorted(state.after.items())
            }
        ours: dict[str, Any] = {}
        if state.stuck_after is not None:
            ours["stuck_after"] = state.stuck_after
        if state.every:
            # XState has no recurring delays: ours ride along in the state's meta.
            ours["every"] = {seconds_key(k): v for k, v in sorted(state.every.items())}
        if ours:
            node["meta"] = {_META: ours}
        states[state.name] = node
    doc: dict[str, Any] = {"id": machine.name, "initial": machine.initial.name}
    if machine.description:
        doc["description"] = machine.description
    doc["meta"] = {
        _META: {
            "version": machine.version,
            "events": [event_to_dict(e) for e in machine.events.values()],
        }
    }
    doc["states"] = states
    return doc


def _edges_out(machine: Machine, state: str, event: str) -> list[dict[str, Any]]:
    out = []
    for t in machine.transitions_from(state, event):
        edge: dict[str, Any] = {"target": t.target}
        if t.guard is not None:
            edge["guard"] = t.guard.expr if t.guard.expr is not None else t.guard.name
        if t.assign is not None:
            edge["actions"] = [_assign_to_xstate(t.assign)]
        if t.description:
            edge["description"] = t.description
        out.append(edge)
    return out


def _assign_to_xstate(action: Assign) -> dict[str, Any]:
    data = assign_to_data(action)
    return {"type": data} if isinstance(data, str) else {"type": _ASSIGN, "assignment": data}


def from_xstate(
    doc: Mapping[str, Any],
    guards: Mapping[str, GuardFn] | None = None,
    actions: Mapping[str, AssignFn] | None = None,
) -> Machine:
    """Build a machine from flat XState JSON; raises :class:`DefinitionError` listing problems.

    Args:
        doc: an XState machine config (v5, or v4 with ``cond``).
        guards: Python guards by name, as for
            :func:`~statewright.definition.formats.from_dict`.
        actions: Python assign actions by name (``fn(context, payload) -> patch``), for
            named actions on transitions.
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("states"), Mapping):
        raise DefinitionError("an XState machine must be an object with a 'states' object")
    reader = _Reader(doc, dict(guards or {}), dict(actions or {}))
    reader.read()
    try:
        machine = Machine.build(
            reader.name,
            version=reader.meta.get("version", 1),
            description=doc.get("description", ""),
            states=reader.states,
            events=reader.declared_events(),
            transitions=reader.transitions,
        )
    except DefinitionError as exc:
        raise DefinitionError(reader.problems + exc.problems, machine=reader.name) from None
    if reader.problems:
        raise DefinitionError(reader.problems, machine=reader.name)
    return machine


class _Reader:
    def __init__(
        self, doc: Mapping[str, Any], guards: dict[str, GuardFn], actions: dict[str, AssignFn]
    ) -> None:
        self.doc = doc
        self.guards = guards
        self.actions = actions
        self.name: str = doc.get("id") or "machine"
        self.meta = _ours(doc)
        self.problems: list[Problem] = []
        self.states: list[State] = []
        self.transitions: list[Transition] = []
        self.events: dict[str, Event] = {}

    def fail(self, message: str, state: str | None = None, event: str | None = None) -> None:
        self.problems.append(Problem("xstate_unsupported", message, state, event))

    def read(self) -> None:
        if self.doc.get("type") == "parallel":
            self.fail("parallel machines are not supported")
        for key in ("invoke", "always", "on", "after"):
            if key in self.doc:
                self.fail(f"root-level {key!r} is not supported (only flat states)")
        for name, node in self.doc["states"].items():
            self.read_state(name, node if isinstance(node, Mapping) else {})

    def read_state(self, name: str, node: Mapping[str, Any]) -> None:
        kind = node.get("type", "atomic")
        if "states" in node or kind in ("compound", "parallel") or "initial" in node:
            self.fail(
                f"state {name!r} is nested or parallel: not supported (only flat machines)",
                state=name,
            )
        elif kind == "history":
            self.fail(f"state {name!r} is a history state: not supported", state=name)
        for key in sorted(set(node) - _STATE_KEYS - {"states", "initial"}):
            self.fail(f"state {name!r}: {key!r} is not supported", state=name)
        for key in ("entry", "exit"):
            if node.get(key):
                self.fail(
                    f"state {name!r}: {key!r} actions are not supported (a state's work is its "
                    "handler; put context updates in the assign of the transitions into it)",
                    state=name,
                )
        ours = _ours(node)
        after: dict[float, str] = {}
        for event, config in (node.get("on") or {}).items():
            self.read_edges(name, event, config)
        for delay, config in (node.get("after") or {}).items():
            try:
                ms = float(delay)
            except ValueError:
                self.fail(f"state {name!r}: named delay {delay!r} is not supported", state=name)
                continue
            after[ms / 1000] = self.read_timer(name, str(delay), config)
        self.states.append(
            State(
                name,
                initial=name == self.doc.get("initial"),
                terminal=kind == "final",
                after=after,
                stuck_after=ours.get("stuck_after"),
                description=node.get("description", ""),
                every={float(k): v for k, v in (ours.get("every") or {}).items()},
            )
        )

    def read_timer(self, state: str, delay: str, config: Any) -> str:
        edges = _as_list(config)
        tags = {self.tag(e) for e in edges if isinstance(e, Mapping)} - {None}
        if len(tags) == 1 and all(isinstance(e, Mapping) and self.tag(e) for e in edges):
            return str(tags.pop())  # our own export: the edges are already in "on"
        event = f"xstate.after.{delay}.{state}"
        self.events.setdefault(
            event,
            Event(event, f"Fired by an XState 'after' timer: {delay} ms in state {state!r}."),
        )
        self.read_edges(state, event, config)
        return event

    @staticmethod
    def tag(edge: Mapping[str, Any]) -> str | None:
        event = _ours(edge).get("event")
        return event if isinstance(event, str) else None

    def read_edges(self, state: str, event: str, config: Any) -> None:
        if event in ("*", "") or event.startswith("done.") or event.startswith("error."):
            self.fail(f"state {state!r}: event {event!r} is not supported", state, event)
            return
        self.events.setdefault(event, Event(event))
        for edge in _as_list(config):
            spec: Any = {"target": edge} if isinstance(edge, str) or edge is None else edge
            if not isinstance(spec, Mapping):
                self.fail(f"state {state!r}: bad transition {edge!r}", state, event)
                continue
            for key in sorted(set(spec) - _EDGE_KEYS - _IGNORED):
                self.fail(
                    f"state {state!r}, event {event!r}: {key!r} is not supported", state, event
                )
            target = self.target(state, event, spec.get("target"))
            guard_text = spec.get("guard", spec.get("cond"))
            if isinstance(guard_text, Mapping):  # v5 {type: "name"} guard objects
                guard_text = guard_text.get("type")
            guard = None
            if guard_text is not None:
                guard = guard_from_spec(
                    f"state {state!r}", event, str(guard_text), self.guards, self.problems
                )
            action = self.assign(state, event, spec.get("actions"))
            self.transitions.append(
                Transition((state,), event, target, guard, spec.get("description", ""), action)
            )

    def assign(self, state: str, event: str, config: Any) -> Assign | None:
        """A transition's XState ``actions`` as its assign, or problems naming what is not
        supported (never a silent drop)."""
        where = f"state {state!r}, event {event!r}"
        found: list[Assign | None] = []
        for item in [] if config is None else _as_list(config):
            kind = (
                item
                if isinstance(item, str)
                else item.get("type")
                if isinstance(item, Mapping)
                else None
            )
            if kind == _ASSIGN and isinstance(item, Mapping):
                found.append(self.assign_map(where, state, event, item))
            elif isinstance(kind, str) and kind in self.actions:
                found.append(Assign(kind, self.actions[kind]))
            else:
                self.fail(
                    f"{where}: action {kind or item!r} is not supported (only "
                    f"{_ASSIGN!r} with expressions, or a Python action passed as actions=...; "
                    "side effects run as steps of a state's handler)",
                    state,
                    event,
                )
        if len(found) > 1:
            self.fail(f"{where}: more than one assign action on a transition", state, event)
        return found[0] if found else None

    def assign_map(
        self, where: str, state: str, event: str, item: Mapping[str, Any]
    ) -> Assign | None:
        assignment = item.get("assignment", (item.get("params") or {}).get("assignment"))
        if not isinstance(assignment, Mapping) or not assignment:
            self.fail(
                f"{where}: an {_ASSIGN!r} action needs an 'assignment' object of context key -> "
                "expression (functions cannot be imported)",
                state,
                event,
            )
            return None
        exprs: dict[str, str] = {}
        for key, value in assignment.items():
            text = value if isinstance(value, str) else _literal(value)
            if text is None:
                self.fail(
                    f"{where}: assign {key!r} = {value!r} cannot be expressed (use an "
                    "expression string over context and payload, or a constant)",
                    state,
                    event,
                )
                return None
            exprs[key] = text
        return assign_from_spec(where, event, exprs, self.actions, self.problems)

    def target(self, state: str, event: str, target: Any) -> str:
        if target is None:
            return state  # targetless: stays in the state, i.e. a self-transition
        if isinstance(target, list) and len(target) == 1:
            target = target[0]
        if not isinstance(target, str):
            self.fail(
                f"state {state!r}, event {event!r}: multiple targets are not supported",
                state,
                event,
            )
            return state
        prefix = f"#{self.name}."
        if target.startswith(prefix):
            return target[len(prefix) :]
        if target.startswith(("#", ".")):
            self.fail(
                f"state {state!r}, event {event!r}: target {target!r} is not supported "
                "(use a sibling state key)",
                state,
                event,
            )
            return state
        return target

    def declared_events(self) -> list[Event]:
        declared = [
            event_from_dict(e, self.actions, self.problems) for e in self.meta.get("events") or ()
        ]
        names = {e.name for e in declared}
        return declared + [e for name, e in self.events.items() if name not in names]


def _ours(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node["meta"]["statewright"]``, or an empty mapping."""
    meta = node.get("meta")
    ours = meta.get(_META) if isinstance(meta, Mapping) else None
    return ours if isinstance(ours, Mapping) else {}


def _literal(value: Any) -> str | None:
    """A JSON constant as expression text, or None when the language has no literal for it
    (objects; the guard language has lists, numbers, strings, booleans and None)."""
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    if isinstance(value, list):
        items = [_literal(v) for v in value]
        return None if any(i is None for i in items) else "[" + ", ".join(map(str, items)) + "]"
    return None


def _as_list(config: Any) -> list[Any]:
    return list(config) if isinstance(config, list) else [config]
