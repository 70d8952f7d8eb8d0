"""The timers of compound states: armed on entering one, kept inside it, dropped on leaving.

A workflow is stored in a leaf (``active.shipping``); the timers declared on a compound
state (``active``'s ``after``/``every``) run while it is anywhere inside it. They are built
on the timer primitives every store has, so no store knows about nesting: each is a *keyed*
timer (:func:`~statewright.definition.compound.timer_key`, e.g. ``state:active:after:30``)
marked ``keep``, so a move between leaves inside the compound (which clears the leaf's own
timers) leaves it pending; the move that leaves the compound deletes it by key; reaching a
terminal state deletes every timer, kept ones included, as always.
"""

from __future__ import annotations

from statewright.definition.compound import timer_key
from statewright.definition.machine import Machine
from statewright.types import TimerSpec

__all__ = ["compound_keys", "compound_timers"]


def compound_keys(machine: Machine, compound: str) -> tuple[str, ...]:
    """The keys of the timers a compound state arms."""
    state = machine.node(compound)
    return tuple(timer_key(compound, "after", secs) for secs in sorted(state.after)) + tuple(
        timer_key(compound, "every", secs) for secs in sorted(state.every)
    )


def compound_timers(
    machine: Machine, source: str | None, target: str, now: float
) -> tuple[tuple[TimerSpec, ...], tuple[str, ...]]:
    """For a move from leaf ``source`` (None: from nowhere, a start or a fork) to leaf
    ``target``: the compound timers to arm (those of the compounds it enters) and the keys of
    those to delete (of the compounds it leaves). Nothing for a flat machine, a move inside
    the same leaf, or a terminal target (which clears every timer)."""
    if machine.tree is None or source == target or machine.states[target].terminal:
        return (), ()
    if source is None or source not in machine.states:
        left: tuple[str, ...] = ()
        entered = tuple(reversed(machine.ancestors(target)))
    else:
        leaving, entering = machine.crossing(source, target)
        left = tuple(p for p in leaving if p in machine.tree.compounds)
        entered = tuple(p for p in entering if p in machine.tree.compounds)
    arm: list[TimerSpec] = []
    for path in entered:
        state = machine.node(path)
        arm += [
            TimerSpec(now + secs, ev, key=timer_key(path, "after", secs), keep=True)
            for secs, ev in sorted(state.after.items())
        ]
        arm += [
            TimerSpec(
                now + secs, ev, key=timer_key(path, "every", secs), every=float(secs), keep=True
            )
            for secs, ev in sorted(state.every.items())
        ]
    drop = tuple(key for path in left for key in compound_keys(machine, path))
    return tuple(arm), drop


def stays_inside(machine: Machine, key: str | None, target: str) -> bool:
    """Whether a compound timer (by key) belongs to a compound that contains ``target``: a
    recurring one that fired is then re-armed although the workflow moved between leaves."""
    if key is None or machine.tree is None:
        return False
    return any(key in compound_keys(machine, p) for p in machine.ancestors(target))
