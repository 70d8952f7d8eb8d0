"""Paths through a machine and a transition cover: pure graph walks, no guard evaluated.

A machine's declared graph can be enumerated: :func:`simple_paths` lists every way from the
initial state to an end without visiting a state twice, and :func:`transition_cover` builds a
small set of event sequences that together take every transition at least once (the
``statewright paths`` command prints both). Guards are **not** evaluated: a step names an
edge, and whether a real workflow can take it depends on its context and the payload (a test
that drives the sequence must supply payloads that make the guard pass;
:func:`statewright.testing.check_cover` searches for them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from statewright.definition.machine import Machine

__all__ = ["Cover", "Step", "edges_of", "format_path", "simple_paths", "transition_cover"]


class Step(NamedTuple):
    """One edge taken: ``source --event--> target``, under ``guard`` (its name) if any.

    Two guarded edges with the same source, event and target are different steps.
    """

    source: str
    event: str
    target: str
    guard: str | None = None

    def __str__(self) -> str:
        return f"{self.source} {_arrow(self)} {self.target}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "event": self.event,
            "target": self.target,
            "guard": self.guard,
        }


Path = tuple[Step, ...]
"""A sequence of steps, each starting where the previous one ended."""


def _arrow(step: Step) -> str:
    guard = f" [{step.guard}]" if step.guard is not None else ""
    return f"--{step.event}{guard}-->"


def format_path(path: Sequence[Step]) -> str:
    """``draft --submit--> review --approve--> approved`` (guards in brackets)."""
    if not path:
        return ""
    return " ".join([path[0].source, *(f"{_arrow(s)} {s.target}" for s in path)])


def edges_of(machine: Machine) -> list[Step]:
    """Every edge of the machine, one per source state (``"*"`` already expanded), in
    declaration order; duplicates (the same source, event, target and guard) once."""
    return list(
        dict.fromkeys(
            Step(source, t.event, t.target, t.guard.name if t.guard is not None else None)
            for t in machine.transitions
            for source in t.sources
        )
    )


def _outgoing(machine: Machine) -> dict[str, list[Step]]:
    out: dict[str, list[Step]] = {name: [] for name in machine.states}
    for step in edges_of(machine):
        out.setdefault(step.source, []).append(step)
    return out


def simple_paths(machine: Machine, *, max_length: int | None = None) -> list[Path]:
    """Every simple path (no state visited twice) from the initial state to a terminal state
    or a dead end (a state with no way out), in declaration order.

    Self-transitions and other edges back to a visited state never appear (they would repeat
    a state): :func:`transition_cover` takes those. With ``max_length``, only paths of at
    most that many steps are listed (longer ones are not cut short, they are left out). The
    number of simple paths can grow exponentially with the machine's size.
    """
    if max_length is not None and max_length < 0:
        raise ValueError("max_length must be >= 0")
    outgoing = _outgoing(machine)
    start = machine.initial.name
    found: list[Path] = []

    def walk(state: str, path: list[Step], seen: set[str]) -> None:
        ways = outgoing.get(state, [])
        if machine.states[state].terminal or not ways:
            found.append(tuple(path))
            return
        if max_length is not None and len(path) >= max_length:
            return
        for step in ways:
            if step.target in seen:
                continue
            seen.add(step.target)
            path.append(step)
            walk(step.target, path, seen)
            path.pop()
            seen.discard(step.target)

    walk(start, [], {start})
    return found


@dataclass(frozen=True)
class Cover:
    """Event sequences from the initial state that together take every edge at least once.

    Attributes:
        sequences: each a path from the initial state; each ends in a terminal state when
            one can be reached from where its last uncovered edge left it.
        unreachable: edges whose source cannot be reached from the initial state (never
            taken by any sequence; a validated machine has none).
    """

    machine: str
    sequences: tuple[Path, ...]
    unreachable: tuple[Step, ...] = ()

    def __iter__(self) -> Iterator[Path]:
        return iter(self.sequences)

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def covered(self) -> set[Step]:
        """Every edge some sequence takes."""
        return {step for seq in self.sequences for step in seq}

    def events(self) -> list[list[str]]:
        """Each sequence as its event names only."""
        return [[s.event for s in seq] for seq in self.sequences]

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "sequences": [[s.to_dict() for s in seq] for seq in self.sequences],
            "unreachable": [s.to_dict() for s in self.unreachable],
        }


def _nearest(
    start: str, outgoing: dict[str, list[Step]], wanted: Any, terminal: set[str]
) -> list[Step] | None:
    """The shortest path from ``start`` whose last step satisfies ``wanted(step)`` (BFS;
    ties broken by declaration order); None when there is none. Never passes through a
    terminal state (nothing leaves one)."""
    came: dict[str, list[Step]] = {start: []}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for step in outgoing.get(state, []):
            if wanted(step):
                return [*came[state], step]
        for step in outgoing.get(state, []):
            if step.target not in came and step.target not in terminal:
                came[step.target] = [*came[state], step]
                queue.append(step.target)
    return None


def transition_cover(machine: Machine) -> Cover:
    """A small set of event sequences that take every transition at least once.

    Greedy, shortest paths first: a sequence starts at the initial state, repeatedly walks
    the shortest way to the nearest edge not yet taken and takes it, and when no such edge
    is reachable any more (or it reached a terminal state) it finishes by the shortest way
    to a terminal state. Every edge counts, one per source state and guard: self-transitions,
    the edges ``"*"`` expanded to, several guarded edges for one event. Guards are not
    evaluated (see the module docstring); edges that cannot be reached from the initial state
    are listed in :attr:`Cover.unreachable` instead.
    """
    outgoing = _outgoing(machine)
    terminal = {s.name for s in machine.states.values() if s.terminal}
    start = machine.initial.name
    all_edges = edges_of(machine)
    reach = {start}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state in terminal:
            continue  # a terminal state is final: even an (invalid) edge out of it is dead
        for step in outgoing.get(state, []):
            if step.target not in reach:
                reach.add(step.target)
                queue.append(step.target)
    todo = {e for e in all_edges if e.source in reach and e.source not in terminal}
    sequences: list[Path] = []
    while todo:
        left = len(todo)
        state, seq = start, []
        while state not in terminal:
            leg = _nearest(state, outgoing, todo.__contains__, terminal)
            if leg is None:
                break
            seq += leg
            todo.difference_update(leg)
            state = leg[-1].target
        if state not in terminal:
            tail = _nearest(state, outgoing, lambda s: s.target in terminal, terminal)
            if tail:
                seq += tail
                todo.difference_update(tail)
        if len(todo) == left:  # no progress: what is left cannot be reached (defensive)
            break
        sequences.append(tuple(seq))
    unreachable = tuple(
        e for e in all_edges if e in todo or e.source not in reach or e.source in terminal
    )
    return Cover(machine.name, tuple(sequences), unreachable)
