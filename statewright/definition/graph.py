"""Pure graph helpers over a machine's states and transitions (no guards evaluated).

They take plain sequences, not a :class:`Machine`, so validation can use them before a
machine exists. Edges naming unknown states are ignored here; validation reports those.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from statewright.definition.model import State, Transition

__all__ = ["Edge", "can_reach", "can_reach_terminal", "edges", "reachable", "successors"]

Edge = tuple[str, str, str]
"""``(source, event, target)``."""


def edges(transitions: Iterable[Transition]) -> list[Edge]:
    """Every ``(source, event, target)`` edge, one per source, in declaration order."""
    return [(s, t.event, t.target) for t in transitions for s in t.sources]


def successors(states: Iterable[str], transitions: Iterable[Transition]) -> dict[str, list[str]]:
    """Adjacency list restricted to the given states: ``state -> [target, ...]``."""
    out: dict[str, list[str]] = {s: [] for s in states}
    for source, _event, target in edges(transitions):
        if source in out and target in out and target not in out[source]:
            out[source].append(target)
    return out


def _closure(start: Iterable[str], adjacency: Mapping[str, Sequence[str]]) -> set[str]:
    seen = set(start)
    queue = deque(seen)
    while queue:
        for nxt in adjacency.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def reachable(
    states: Sequence[State], transitions: Iterable[Transition], start: Iterable[str] = ()
) -> set[str]:
    """States reachable from ``start`` (default: the initial states), ``start`` included."""
    names = [s.name for s in states]
    begin = list(start) or [s.name for s in states if s.initial]
    return _closure([b for b in begin if b in names], successors(names, transitions))


def can_reach_terminal(states: Sequence[State], transitions: Iterable[Transition]) -> set[str]:
    """States from which some terminal state is reachable (terminal states included)."""
    return can_reach([s.name for s in states], transitions, [s.name for s in states if s.terminal])


def can_reach(
    names: Sequence[str], transitions: Iterable[Transition], goals: Iterable[str]
) -> set[str]:
    """States (of ``names``) from which one of ``goals`` is reachable (``goals`` included)."""
    reverse: dict[str, list[str]] = {n: [] for n in names}
    for source, targets in successors(names, transitions).items():
        for target in targets:
            reverse[target].append(source)
    return _closure([g for g in goals if g in reverse], reverse)
