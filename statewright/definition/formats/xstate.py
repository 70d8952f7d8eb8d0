"""Import and export a subset of XState (v5) machine JSON, nested states included.

The mapping, chosen so an XState interpreter running the export behaves like the machine:

- ``id`` is the machine name, ``initial`` the initial state; each state is a key of
  ``states``; a terminal state has ``type: "final"``; ``description`` is kept.
- **Nested states**: a state with ``states`` (and ``initial``, naming one of them) is a
  compound state, imported as such (see :mod:`statewright.definition.compound`); the
  workflow is in a leaf, named by its path (``red.walk``). A target is a sibling's key
  (``"b"``, or ``"b.child"``), a child's (``".child"``), or ``"#<machine id>.<path>"``; the
  export writes the last form for nested states.
- A leaf state nothing leads out of (no edge or timer on it or on a state around it) and
  not ``final`` is imported as terminal: XState lets the machine rest there for good, which
  is what a terminal state is here.
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
  full event declarations (roles, payload schema, approval) at the root, ``stuck_after`` and
  ``every`` on states. Without them events are declared bare, in order of appearance.
- A transition with several sources is written once per source, so a round trip keeps
  behaviour but not that grouping.

- A transition's ``assign`` is written as ``actions: [{"type": "xstate.assign",
  "assignment": {key: "<expression>"}}]`` (our expression text; a Python action by
  ``{"type": <name>}``). On import, an ``xstate.assign`` action whose values are expression
  strings or constants (numbers, strings, booleans, null, lists of them) becomes the
  transition's ``assign``; a named action is taken from ``actions=`` (Python actions by
  name) when given there. A state's ``entry`` and ``exit`` actions are read and written the
  same way, as its entry and exit assigns.
- An event's ``assign`` rides in the event declarations in ``meta.statewright``.

Not supported (DefinitionError, naming the state and event): parallel states (run
concurrent work as child workflows), history states, ``invoke``, ``always``, ``onDone``,
named delays, multiple targets, wildcard events, targets by a state's own ``id``, root-level
``on``, a transition without a target on a compound state, actions other than ``assign``
(side effects run as steps of a handler, not on an edge), an assign with functions or
objects, and more than one assign per transition or per entry/exit. Nothing is dropped
silently. ``tags`` carry no behaviour and are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
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
_STATE_KEYS = {
    "type",
    "description",
    "on",
    "after",
    "meta",
    "entry",
    "exit",
    "states",
    "initial",
} | _IGNORED
_PARALLEL = "{what} are not supported: run concurrent work as child workflows started from a state"
_EDGE_KEYS = {"target", "guard", "cond", "description", "meta", "reenter", "internal", "actions"}
_ASSIGN = "xstate.assign"


def to_xstate(machine: Machine) -> dict[str, Any]:
    """The machine as XState v5 JSON (see the module docstring for the mapping)."""
    tree = machine.tree
    if tree is None:
        states = {s.name: _node(machine, s, s.name) for s in machine.states.values()}
        initial = machine.initial.name
    else:
        states = {s.name: _node(machine, s, s.name) for s in tree.states}
        initial = next(s.name for s in tree.states if s.initial)
    doc: dict[str, Any] = {"id": machine.name, "initial": initial}
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


def _node(machine: Machine, state: State, path: str) -> dict[str, Any]:
    """One state node (with its children, for a compound state)."""
    node: dict[str, Any] = {}
    if state.terminal:
        node["type"] = "final"
    if state.description:
        node["description"] = state.description
    on = _edges_declared(machine, path)
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
    for key, action in (("entry", state.entry), ("exit", state.exit)):
        if action is not None:
            node[key] = [_assign_to_xstate(action)]
    ours: dict[str, Any] = {}
    if state.stuck_after is not None:
        ours["stuck_after"] = state.stuck_after
    if state.every:
        # XState has no recurring delays: ours ride along in the state's meta.
        ours["every"] = {seconds_key(k): v for k, v in sorted(state.every.items())}
    if ours:
        node["meta"] = {_META: ours}
    if state.states:
        node["initial"] = next(c.name for c in state.states if c.initial)
        node["states"] = {c.name: _node(machine, c, f"{path}.{c.name}") for c in state.states}
    return node


def _edges_declared(machine: Machine, path: str) -> dict[str, list[dict[str, Any]]]:
    """The edges declared on ``path`` by event, in priority order. A flat machine's targets
    are sibling keys; a nested machine's are ``#<id>.<path>`` unless both ends are top-level."""
    if machine.tree is None:
        declared = [
            t for e in machine.events_from(path) for t in machine.transitions_from(path, e)
        ]
    else:
        declared = [t for t in machine.tree.transitions if path in t.sources]
    out: dict[str, list[dict[str, Any]]] = {}
    for t in declared:
        plain = "." not in path and "." not in t.target
        edge: dict[str, Any] = {"target": t.target if plain else f"#{machine.name}.{t.target}"}
        if t.guard is not None:
            edge["guard"] = t.guard.expr if t.guard.expr is not None else t.guard.name
        if t.assign is not None:
            edge["actions"] = [_assign_to_xstate(t.assign)]
        if t.description:
            edge["description"] = t.description
        out.setdefault(t.event, []).append(edge)
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
            self.fail(_PARALLEL.format(what="parallel machines"))
        for key in ("invoke", "always", "on", "after"):
            if key in self.doc:
                self.fail(f"root-level {key!r} is not supported (declare it on the states)")
        initial = self.doc.get("initial")
        self.states = [
            self.read_state(name, node if isinstance(node, Mapping) else {}, None, name == initial)
            for name, node in self.doc["states"].items()
        ]
        self.states = [self.dead_ends(s, "") for s in self.states]

    def read_state(
        self, name: str, node: Mapping[str, Any], parent: str | None, initial: bool
    ) -> State:
        path = name if parent is None else f"{parent}.{name}"
        kind = node.get("type", "atomic")
        if kind == "history":
            self.fail(f"state {path!r}: history states are not supported", state=path)
        elif kind == "parallel":
            self.fail(_PARALLEL.format(what=f"state {path!r}: parallel states"), state=path)
        for key in sorted(set(node) - _STATE_KEYS):
            self.fail(f"state {path!r}: {key!r} is not supported", state=path)
        children = node.get("states") or {}
        if not isinstance(children, Mapping):
            self.fail(f"state {path!r}: 'states' must be an object", state=path)
            children = {}
        first = node.get("initial")
        if children and first not in children:
            self.fail(f"state {path!r}: its 'initial' must name one of its states", state=path)
        ours = _ours(node)
        after: dict[float, str] = {}
        for event, config in (node.get("on") or {}).items():
            self.read_edges(path, event, config, compound=bool(children))
        for delay, config in (node.get("after") or {}).items():
            try:
                ms = float(delay)
            except ValueError:
                self.fail(f"state {path!r}: named delay {delay!r} is not supported", state=path)
                continue
            after[ms / 1000] = self.read_timer(path, str(delay), config, bool(children))
        where = f"state {path!r}"
        return State(
            name,
            initial=initial,
            terminal=kind == "final",
            after=after,
            stuck_after=ours.get("stuck_after"),
            description=node.get("description", ""),
            every={float(k): v for k, v in (ours.get("every") or {}).items()},
            states=tuple(
                self.read_state(c, n if isinstance(n, Mapping) else {}, path, c == first)
                for c, n in children.items()
            ),
            entry=self.assign(f"{where} entry", path, None, node.get("entry")),
            exit=self.assign(f"{where} exit", path, None, node.get("exit")),
        )

    def dead_ends(self, state: State, prefix: str) -> State:
        """``state`` with every leaf nothing leads out of (no edge or timer on it or around
        it) marked terminal: XState lets a machine rest there for good without ``final``,
        and such a state is what statewright calls terminal."""
        path = prefix + state.name
        if state.states:
            kids = tuple(self.dead_ends(c, path + ".") for c in state.states)
            return replace(state, states=kids)
        around = {path, *(path[:i] for i, ch in enumerate(path) if ch == ".")}
        if state.terminal or any(s in around for t in self.transitions for s in t.sources):
            return state
        return replace(state, terminal=True)

    def read_timer(self, state: str, delay: str, config: Any, compound: bool) -> str:
        edges = _as_list(config)
        tags = {self.tag(e) for e in edges if isinstance(e, Mapping)} - {None}
        if len(tags) == 1 and all(isinstance(e, Mapping) and self.tag(e) for e in edges):
            return str(tags.pop())  # our own export: the edges are already in "on"
        event = f"xstate.after.{delay}.{state}"
        self.events.setdefault(
            event,
            Event(event, f"Fired by an XState 'after' timer: {delay} ms in state {state!r}."),
        )
        self.read_edges(state, event, config, compound)
        return event

    @staticmethod
    def tag(edge: Mapping[str, Any]) -> str | None:
        event = _ours(edge).get("event")
        return event if isinstance(event, str) else None

    def read_edges(self, state: str, event: str, config: Any, compound: bool = False) -> None:
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
            if spec.get("target") is None and compound:
                self.fail(
                    f"state {state!r}, event {event!r}: a transition without a target on a "
                    "compound state is not supported (give it a target)",
                    state,
                    event,
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
            action = self.assign(
                f"state {state!r}, event {event!r}", state, event, spec.get("actions")
            )
            self.transitions.append(
                Transition((state,), event, target, guard, spec.get("description", ""), action)
            )

    def assign(self, where: str, state: str, event: str | None, config: Any) -> Assign | None:
        """A transition's XState ``actions`` (or a state's ``entry``/``exit``) as an assign,
        or problems naming what is not supported (never a silent drop)."""
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
            self.fail(f"{where}: more than one assign action", state, event)
        return found[0] if found else None

    def assign_map(
        self, where: str, state: str, event: str | None, item: Mapping[str, Any]
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
        return assign_from_spec(where, event, exprs, self.actions, self.problems, state)

    def target(self, state: str, event: str, target: Any) -> str:
        """A target as a path: a sibling's key (``"b"``, ``"b.child"``), a child's
        (``".child"``), or the machine's id and a path (``"#<id>.a.b"``)."""
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
        if target.startswith(".") and len(target) > 1:
            return state + target
        if target.startswith(("#", ".")):
            self.fail(
                f"state {state!r}, event {event!r}: target {target!r} is not supported "
                f"(use a sibling's key, '.<child>', or '#{self.name}.<path>')",
                state,
                event,
            )
            return state
        parent, _, _ = state.rpartition(".")
        return f"{parent}.{target}" if parent else target

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
