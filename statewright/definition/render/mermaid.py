"""Mermaid ``stateDiagram-v2`` export."""

from __future__ import annotations

import re

from statewright.definition.machine import Machine
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
    shown through a quoted label.
    """
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
