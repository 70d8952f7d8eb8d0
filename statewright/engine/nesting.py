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

from dataclasses import dataclass

from statewright.definition.compound import timer_key
from statewright.definition.machine import Machine, State, Transition
from statewright.types import TimerSpec, quick_init

__all__ = [
    "Move",
    "compound_keys",
    "compound_timers",
    "entering_path",
    "left_by_migration",
    "moving",
    "start_timers",
    "state_timers",
    "stays_inside",
]


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


def left_by_migration(
    old: Machine | None, state: str, arm: tuple[TimerSpec, ...]
) -> tuple[str, ...]:
    """The keys of the compound timers a migration out of ``state`` of the ``old`` machine
    version drops: those of the compound states around it there, unless armed again."""
    if old is None or old.tree is None or state not in old.states:
        return ()
    armed = {t.key for t in arm}
    return tuple(
        key
        for path in old.ancestors(state)
        for key in compound_keys(old, path)
        if key not in armed
    )


def state_timers(state: State, now: float) -> tuple[TimerSpec, ...]:
    """The timers entering ``state`` arms (``State.after``, and ``State.every`` recurring)."""
    once = tuple(TimerSpec(now + secs, ev) for secs, ev in sorted(state.after.items()))
    return once + tuple(
        TimerSpec(now + secs, ev, every=float(secs)) for secs, ev in sorted(state.every.items())
    )


@quick_init
@dataclass(frozen=True)
class Move:
    """What a transition does to timers (see :func:`moving`)."""

    staying: bool
    """It stays in its leaf without leaving it (an internal self-transition)."""
    arm: tuple[TimerSpec, ...]
    """The timers of the states it enters: the leaf's, and compound states' (keyed)."""
    drop_keys: tuple[str, ...]
    """The keys of the compound states' timers it leaves for good."""
    entering: tuple[str, ...]
    target: str
    machine: Machine

    def rearms(self, key: str | None) -> bool:
        """Whether a recurring timer (by key) that fired is re-armed: the move stays in its
        leaf, or its compound state contains the target and is not entered anew."""
        return self.staying or stays_inside(self.machine, key, self.target, self.entering)


def moving(
    machine: Machine,
    source: str,
    t: Transition,
    now: float,
    *,
    migrating: bool = False,
    old: Machine | None = None,
) -> Move:
    """The timer changes of taking ``t`` from the leaf ``source``. A migration enters its
    target anew (``old``: the version it leaves, when known, whose compound timers go)."""
    if machine.tree is None and (old is None or old.tree is None):
        # A flat machine (every transition of most workflows, on the hot path): its source
        # is left and its target entered unless they are one state; no compound timers.
        staying = t.target == source and not migrating
        target = machine.states[t.target]
        arm = () if staying else state_timers(target, now)
        return Move(staying, arm, (), () if staying else (t.target,), t.target, machine)
    if machine.tree is None:
        # A flat machine (the hot path): a move to another state enters it, nothing else.
        staying = t.target == source and not migrating
        arm = () if staying else state_timers(machine.states[t.target], now)
        return Move(staying, arm, (), (), t.target, machine)
    leaving, entering = (
        ((), entering_path(machine, t.target)) if migrating else machine.crossing(source, t)
    )
    staying = t.target == source and not entering
    target = machine.states[t.target]
    arm = () if staying else state_timers(target, now)
    nested, drop = compound_timers(machine, leaving, entering, now)
    if target.terminal:
        nested = ()  # a terminal state clears every timer, and arms none
    if migrating:
        drop += left_by_migration(old, source, nested)
    return Move(staying, arm + nested, drop, entering, t.target, machine)


def start_timers(machine: Machine, leaf: str, now: float) -> tuple[TimerSpec, ...]:
    """The timers a workflow created in ``leaf`` (a start, a fork) arms: the leaf's, and
    those of every compound state around it."""
    path = entering_path(machine, leaf)
    return state_timers(machine.states[leaf], now) + compound_timers(machine, (), path, now)[0]
