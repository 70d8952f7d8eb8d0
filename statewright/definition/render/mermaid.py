"""Mermaid ``stateDiagram-v2`` export."""

from __future__ import annotations

import re

from statewright.definition.compound import SEPARATOR
from statewright.definition.machine import Machine, State
from statewright.definition.render.labels import edge_label

__all__ = ["to_mermaid"]

_PLAIN_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Words the stateDiagram grammar reads as keywords; such state names get an alias id.
_KEYWORDS = {
    "state",
    "note",
    "direction",
    "class",
    "classDef",
    "end",
    "as",
    "left",
    "right",
    "of",
    "over",
    "click",
    "style",
}
_ENTITIES = {
    "#": "#35;",
    ";": "#59;",
    '"': "#quot;",
    "<": "#lt;",
    ">": "#gt;",
    "\n": " ",
    "\r": " ",
}


def _escape(text: str) -> str:
    return "".join(_ENTITIES.get(ch, ch) for ch in text)


def _ids(machine: Machine) -> dict[str, str]:
    ids: dict[str, str] = {}
    taken = {n for n in machine.states if _PLAIN_ID.fullmatch(n) and n not in _KEYWORDS}
    for i, name in enumerate(machine.states):
        if name in taken:
            ids[name] = name
            continue
        alias = f"s{i}"
        while alias in taken:
            alias += "_"
        taken.add(alias)
        ids[name] = alias
    return ids


def to_mermaid(machine: Machine, current: str | None = None) -> str:
    """The machine as a Mermaid state diagram (deterministic).

    ``[*] --> initial``, ``terminal --> [*]``, one line per edge labelled
    ``event [guard] (after Ns)``; ``current`` (a state name) is highlighted with the
    ``current`` class. State names that are not plain identifiers get an alias id and are
    shown through a quoted label. Compound states are composite states (``state active {
    ... }`` with their own ``[*] -->`` initial child), their children labelled by name; an
    edge declared on a compound state starts from its box.
    """
    if machine.tree is not None:
        return _nested(machine, current)
    ids = _ids(machine)
    lines = ["stateDiagram-v2"]
    for name, state in machine.states.items():
        if ids[name] != name:
            lines.append(f'    state "{_escape(name)}" as {ids[name]}')
        if state.description:
            lines.append(f"    {ids[name]} : {_escape(state.description)}")
    lines.append(f"    [*] --> {ids[machine.initial.name]}")
    for t in machine.transitions:
        for source in t.sources:
            label = _escape(edge_label(machine.states[source], t))
            lines.append(f"    {ids[source]} --> {ids[t.target]} : {label}")
    lines += [f"    {ids[name]} --> [*]" for name in machine.terminal_states]
    if current is not None and current in machine.states:
        lines.append("    classDef current fill:#fde68a,stroke:#b45309,stroke-width:3px")
        lines.append(f"    class {ids[current]} current")
    return "\n".join(lines) + "\n"


def _nested(machine: Machine, current: str | None) -> str:
    tree = machine.tree
    assert tree is not None
    nodes = [*tree.compounds, *machine.states]
    taken = {n for n in nodes if _PLAIN_ID.fullmatch(n) and n not in _KEYWORDS}
    ids: dict[str, str] = {}
    for i, path in enumerate(nodes):
        alias = path if path in taken else f"s{i}"
        while path not in taken and alias in taken:
            alias += "_"
        taken.add(alias)
        ids[path] = alias
    # Each edge is written in the scope of the innermost compound holding both its ends (so
    # an edge between siblings stays inside their box), the others at the top.
    scoped: dict[str, list[str]] = {}
    for t in tree.transitions:
        for source in t.sources:
            label = _escape(edge_label(machine.node(source), t))
            scope = _scope(machine, source, t.target)
            scoped.setdefault(scope, []).append(f"{ids[source]} --> {ids[t.target]} : {label}")
    lines = ["stateDiagram-v2"]

    def block(states: tuple[State, ...], prefix: str, indent: str) -> None:
        for s in states:
            path = prefix + s.name
            if ids[path] != s.name:
                lines.append(f'{indent}state "{_escape(s.name)}" as {ids[path]}')
            elif not s.states:
                lines.append(f"{indent}{ids[path]}")
            if s.description:
                lines.append(f"{indent}{ids[path]} : {_escape(s.description)}")
            if not s.states:
                continue
            lines.append(f"{indent}state {ids[path]} {{")
            block(s.states, path + SEPARATOR, indent + "    ")
            first = next((c for c in s.states if c.initial), s.states[0])
            lines.append(f"{indent}    [*] --> {ids[path + SEPARATOR + first.name]}")
            lines.extend(f"{indent}    {edge}" for edge in scoped.get(path, ()))
            lines.append(f"{indent}}}")

    block(tree.states, "", "    ")
    top = next((s for s in tree.states if s.initial), tree.states[0])
    lines.append(f"    [*] --> {ids[top.name]}")
    lines += [f"    {edge}" for edge in scoped.get("", ())]
    lines += [f"    {ids[name]} --> [*]" for name in machine.terminal_states]
    if current is not None and current in machine.states:
        lines.append("    classDef current fill:#fde68a,stroke:#b45309,stroke-width:3px")
        lines.append(f"    class {ids[current]} current")
    return "\n".join(lines) + "\n"


def _scope(machine: Machine, source: str, target: str) -> str:
    """The innermost compound containing both ends of an edge ("" for the top)."""
    tree = machine.tree
    assert tree is not None
    around = set(tree.ancestors(target))
    return next((p for p in tree.ancestors(source) if p in around), "")
