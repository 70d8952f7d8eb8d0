"""Edge labels shared by the diagram renderers."""

from __future__ import annotations

from statewright.definition.machine import State, Transition

__all__ = ["edge_label", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``86400.0`` -> ``"86400s"``, ``0.5`` -> ``"0.5s"``."""
    value = float(seconds)
    return f"{int(value)}s" if value.is_integer() else f"{value!r}s"


def edge_label(source: State, t: Transition) -> str:
    """``event [guard] (after Ns)``: the guard text, and the timer that fires it, if any."""
    label = t.event
    if t.guard is not None:
        label += f" [{t.guard.expr if t.guard.expr is not None else t.guard.name}]"
    delays = [format_seconds(s) for s, e in sorted(source.after.items()) if e == t.event]
    if delays:
        label += f" (after {', '.join(delays)})"
    return label
