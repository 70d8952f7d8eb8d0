"""Edge labels shared by the diagram renderers."""

from __future__ import annotations

from statewright.definition.machine import State, Transition

__all__ = ["edge_label", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``86400.0`` -> ``"86400s"``, ``0.5`` -> ``"0.5s"``."""
    value = float(seconds)
    return f"{int(value)}s" if value.is_integer() else f"{value!r}s"


def edge_label(source: State, t: Transition) -> str:
    """``event [guard] (after Ns) / keys``: the guard text, the timer that fires it, and the
    context keys the transition's ``assign`` sets, if any; ``(compensates)`` after the event
    of a compensating transition."""
    label = t.event + (" (compensates)" if t.compensate else "")
    if t.guard is not None:
        label += f" [{t.guard.expr if t.guard.expr is not None else t.guard.name}]"
    delays = [format_seconds(s) for s, e in sorted(source.after.items()) if e == t.event]
    if delays:
        label += f" (after {', '.join(delays)})"
    periods = [format_seconds(s) for s, e in sorted(source.every.items()) if e == t.event]
    if periods:
        label += f" (every {', '.join(periods)})"
    keys = [
        k
        for a in (t.assign,)
        if a is not None
        for k in (a.exprs if a.exprs is not None else [a.name])
    ]
    if keys:
        label += f" / {', '.join(keys)}"  # UML's "event [guard] / action"
    return label
