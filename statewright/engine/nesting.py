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

__all__ = ["compound_keys", "compound_timers", "entering_path", "stays_inside"]


def compound_keys(machine: Machine, compound: str) -> tuple[str, ...]:
    """The keys of the timers a compound state arms."""
    state = machine.node(compound)
    return tuple(timer_key(compound, "after", secs) for secs in sorted(state.after)) + tuple(
        timer_key(compound, "every", secs) for secs in sorted(state.every)
    )


def compound_timers(
    machine: Machine, leaving: tuple[str, ...], entering: tuple[str, ...], now: float
) -> tuple[tuple[TimerSpec, ...], tuple[str, ...]]:
    """For a move that leaves and enters the given states (see
    :meth:`~statewright.definition.machine.Machine.crossing`): the compound timers to arm
    (those of the compounds it enters, anew when it re-enters one) and the keys of those to
    delete (of the compounds it leaves for good). Nothing for a flat machine."""
    tree = machine.tree
    if tree is None:
        return (), ()
    arm: list[TimerSpec] = []
    for path in entering:
        state = tree.compounds.get(path)
        if state is None:
            continue
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
    drop = tuple(
        key
        for path in leaving
        if path in tree.compounds and path not in entering
        for key in compound_keys(machine, path)
    )
    return tuple(arm), drop


def entering_path(machine: Machine, leaf: str) -> tuple[str, ...]:
    """The states a start (or a fork) into ``leaf`` enters, outermost first."""
    return (*reversed(machine.ancestors(leaf)), leaf)


def stays_inside(
    machine: Machine, key: str | None, target: str, entering: tuple[str, ...]
) -> bool:
    """Whether a compound timer (by key) belongs to a compound that contains ``target`` and
    is not entered anew: a recurring one that fired is then re-armed although the workflow
    moved between leaves."""
    if key is None or machine.tree is None:
        return False
    return any(
        key in compound_keys(machine, p) for p in machine.ancestors(target) if p not in entering
    )
