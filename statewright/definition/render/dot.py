"""Graphviz DOT export."""

from __future__ import annotations

from statewright.definition.compound import SEPARATOR
from statewright.definition.machine import Machine, State
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
    is filled, and each edge is labelled ``event [guard] (after Ns)``. Compound states are
    clusters (``subgraph cluster_active``) around their children, labelled by name; an edge
    declared on a compound state is drawn from its cluster's border (``ltail``), one to a
    compound state to its cluster's (``lhead``).
    """
    if machine.tree is not None:
        return _nested(machine, current)
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


def _nested(machine: Machine, current: str | None) -> str:
    tree = machine.tree
    assert tree is not None
    start = "__start__"
    while start in machine.states:
        start += "_"
    lines = [
        f"digraph {_quote(machine.name)} {{",
        "    rankdir=LR;",
        "    compound=true;",
        '    node [shape=ellipse, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        f'    {_quote(start)} [shape=point, label=""];',
    ]

    def block(states: tuple[State, ...], prefix: str, indent: str) -> None:
        for s in states:
            path = prefix + s.name
            if s.states:
                lines.append(f"{indent}subgraph {_quote('cluster_' + path)} {{")
                lines.append(f"{indent}    label={_quote(s.name)}; style=rounded;")
                if s.description:
                    lines.append(f"{indent}    tooltip={_quote(s.description)};")
                block(s.states, path + SEPARATOR, indent + "    ")
                lines.append(f"{indent}}}")
                continue
            attrs = [f"label={_quote(s.name)}"] if prefix else []
            if s.terminal:
                attrs.append("shape=doublecircle")
            if path == current:
                attrs += ["style=filled", 'fillcolor="#fde68a"', "penwidth=2"]
            if s.description:
                attrs.append(f"tooltip={_quote(s.description)}")
            lines.append(
                f"{indent}{_quote(path)}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";"
            )

    block(tree.states, "", "    ")
    lines.append(f"    {_quote(start)} -> {_quote(machine.initial.name)};")
    for t in tree.transitions:
        for source in t.sources:
            attrs = [f"label={_quote(edge_label(machine.node(source), t))}"]
            tail = _entered(machine, source)
            head = _entered(machine, t.target)
            if tail != source:
                attrs.append(f"ltail={_quote('cluster_' + source)}")
            if head != t.target:
                attrs.append(f"lhead={_quote('cluster_' + t.target)}")
            lines.append(f"    {_quote(tail)} -> {_quote(head)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _entered(machine: Machine, path: str) -> str:
    """The leaf a node is drawn from or to: itself, or a compound's initial leaf."""
    while machine.tree is not None and path in machine.tree.compounds:
        children = machine.tree.compounds[path].states
        path = f"{path}{SEPARATOR}{next((c for c in children if c.initial), children[0]).name}"
    return path
