"""Joining child workflows in the parent's machine: the action that records each child's
end, the guards of the edge that leaves once enough have ended, and the edges a state's
declared :class:`~statewright.definition.model.Spawn` makes.

Pure data and functions, like the rest of ``definition/``: the engine starts the children and
sends each end to the parent (:mod:`statewright.engine.children`); these read what it sends,
``{"child", "key", "state", "result"}`` on ``child_done`` or ``child_failed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from statewright.definition.model import (
    WILDCARD,
    Assign,
    Event,
    Guard,
    Spawn,
    State,
    Transition,
)
from statewright.errors import DefinitionError, Problem

CHILD_DONE = "child_done"
"""The event a child's end sends its parent by default."""
CHILD_FAILED = "child_failed"
"""The event sent instead when the child ended in one of :data:`FAILED_STATES`."""
CHILD_EVENTS = (CHILD_DONE, CHILD_FAILED)
FAILED_STATES = frozenset({"failed", "cancelled", "canceled"})
"""Terminal states whose end is a failure by default (``WorkflowType.parent_events``
overrides per state)."""
GATHERED = "children"
"""The context key :func:`gather` records children's ends under."""


def gather(into: str = GATHERED) -> Assign:
    """An action for the edges on ``child_done``/``child_failed``: records the child's end in
    ``context[into][key]`` as ``{"state", "result"}``."""

    def record(context: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
        ended = dict(context.get(into) or {})
        ended[str(payload["key"])] = {"state": payload["state"], "result": payload.get("result")}
        return {into: ended}

    return Assign(f"gather_{into}", record)


def _ended_after(context: Mapping[str, Any], payload: Mapping[str, Any], into: str) -> int:
    """How many children have ended once the one ``payload`` reports is counted."""
    ended = context.get(into) or {}
    return len(ended) + (0 if str(payload.get("key")) in ended else 1)


def _expected(context: Mapping[str, Any], over: str | int) -> int:
    if isinstance(over, int):
        return over
    value = context.get(over)
    return len(value) if isinstance(value, Sequence | Mapping) else int(value or 0)


def all_done(over: str | int, into: str = GATHERED) -> Guard:
    """A guard: the child this event reports is the last of ``over`` to end (``over``: a
    context key holding the list the children were started for, or their number)."""
    return Guard(
        f"all_{over}_done",
        lambda c, p: _ended_after(c, p, into) >= _expected(c, over),
    )


def n_done(n: int, into: str = GATHERED, *, succeeded: bool = False) -> Guard:
    """A guard: with this event, ``n`` children have ended (``succeeded``: ended by
    ``child_done``, the failed ones not counted)."""

    def enough(context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
        if not succeeded:
            return _ended_after(context, payload, into) >= n
        ended = context.get(into) or {}
        ok = sum(1 for e in ended.values() if e.get("state") not in FAILED_STATES)
        mine = str(payload.get("key")) not in ended and payload.get("state") not in FAILED_STATES
        return ok + int(mine) >= n

    return Guard(f"{n}_done" if not succeeded else f"{n}_succeeded", enough)


def any_done(into: str = GATHERED) -> Guard:
    """A guard: any child's end (the first one reported)."""
    return n_done(1, into)


def join_guard(spawn: Spawn) -> Guard:
    """The guard of a :class:`Spawn`'s join."""
    if spawn.join == "all":
        return all_done(spawn.over)
    if spawn.join == "any":
        return any_done()
    return n_done(int(spawn.join))


def _spawning(states: Iterable[State], up: str = "") -> Iterable[tuple[str, Spawn]]:
    """``(path, spawn)`` of every state that declares one, nested ones by their path."""
    for s in states:
        path = f"{up}.{s.name}" if up else s.name
        if s.spawn is not None:
            yield path, s.spawn
        yield from _spawning(s.states, path)


def spawning_states(states: Iterable[State]) -> dict[str, Spawn]:
    """The states that declare a :class:`Spawn`, by path."""
    return dict(_spawning(states))


def with_spawn_edges(
    states: Sequence[State], events: Sequence[Event], transitions: Sequence[Transition]
) -> tuple[list[Event], list[Transition]]:
    """The machine's events and edges with those its states' :class:`Spawn` make: for each
    child event, the join's edge to ``then`` (when given) and the self-transition that
    records the end (and so runs the state's handler again, which starts the next child).
    None for an event the machine declares edges on from that state itself (they decide).
    The child events are declared when they are not."""
    spawns = spawning_states(states)
    if not spawns:
        return list(events), list(transitions)
    problems = [p for path, spawn in spawns.items() for p in _spawn_problems(path, spawn)]
    problems += [
        Problem("spawn_on_end", f"state {path!r} is {why} and cannot start children", path)
        for path, why in _not_live(states)
    ]
    if problems:
        raise DefinitionError(problems)
    declared = {(src, t.event) for t in transitions for src in t.sources}
    made: list[Transition] = []
    for path, spawn in spawns.items():
        record = gather()
        for event in CHILD_EVENTS:
            if (path, event) in declared or (WILDCARD, event) in declared:
                continue  # the machine's own edges on it decide
            if spawn.then is not None:
                made.append(
                    Transition(
                        (path,), event, spawn.then, join_guard(spawn), assign=record, spawned=True
                    )
                )
            made.append(Transition((path,), event, path, assign=record, spawned=True))
    named = {e.name for e in events}
    more = [Event(e, roles=()) for e in CHILD_EVENTS if e not in named]
    return [*events, *more], [*transitions, *made]


def _spawn_problems(path: str, spawn: Spawn) -> list[Problem]:
    out = []
    if not spawn.type or not spawn.over:
        out.append(
            Problem("invalid_spawn", f"state {path!r}: a spawn names a type and a list", path)
        )
    if spawn.cap is not None and (not isinstance(spawn.cap, int) or spawn.cap < 1):
        out.append(Problem("invalid_spawn", f"state {path!r}: cap must be at least 1", path))
    join = spawn.join
    if not (join in ("all", "any") or (type(join) is int and join >= 1)):
        text = f"state {path!r}: join must be 'all', 'any' or a number of children, not {join!r}"
        out.append(Problem("invalid_spawn", text, path))
    return out


def _not_live(states: Iterable[State], up: str = "") -> Iterable[tuple[str, str]]:
    """States that declare children but cannot run them: terminal, or compound."""
    for s in states:
        path = f"{up}.{s.name}" if up else s.name
        if s.spawn is not None and (s.terminal or s.states):
            yield path, "terminal" if s.terminal else "a compound state (declare it on a leaf)"
        yield from _not_live(s.states, path)
