"""Graphviz DOT export."""

from __future__ import annotations

from statewright.definition.machine import Machine
from statewright.definition.render.labels import edge_label

__all__ = ["to_dot"]


def _quote(text: str) -> str:
    # DOT quoted strings: escape backslash (else it starts an escape such as \N or \l),
    # double quote, and line breaks.
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", "").replace("\n", "\\n") + '"'


def to_dot(machine: Machine, current: str | None = None) -> str:
    """The machine as a Graphviz digraph (deterministic).

    A point marks the start, terminal states are double circles, ``current`` (a state name)
    is filled, and each edge is labelled ``event [guard] (after Ns)``.
    """
    start = "__start__"
    while start in machine.states:
        start += "_"
    lines = [
        f"digraph {_quote(machine.name)} {{",
        "    rankdir=LR;",
        '    node [shape=ellipse, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        f'    {_quote(start)} [shape=point, label=""];',
    ]
    for name, state in machine.states.items():
        attrs = ["shape=doublecircle"] if state.terminal else []
        if name == current:
            attrs += ["style=filled", 'fillcolor="#fde68a"', "penwidth=2"]
        if state.description:
            attrs.append(f"tooltip={_quote(state.description)}")
        lines.append(f"    {_quote(name)}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append(f"    {_quote(start)} -> {_quote(machine.initial.name)};")
    for t in machine.transitions:
        for source in t.sources:
            label = _quote(edge_label(machine.states[source], t))
            lines.append(f"    {_quote(source)} -> {_quote(t.target)} [label={label}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
