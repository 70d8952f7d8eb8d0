"""Compound (nested) states compiled into the flat machine the runtime runs.

A compound state contains states, one of them ``initial``. A workflow is only ever in a
*leaf*, stored under its full dotted path (``active.shipping``), so the store, the log,
replay, handlers, views and metrics need no translation. Compiling a tree of states means:

- **leaves** become the machine's states, named by path; the machine's start is the initial
  leaf reached from the initial top-level state (initial child after initial child); a leaf
  with no ``stuck_after`` of its own inherits its nearest ancestor's;
- a **transition declared on a compound** applies from every non-terminal leaf inside it;
  for one leaf and event, the edges declared deepest are tried first (the leaf's own, then
  its parent's, ...), each level in declaration order, XState's rule. An unguarded edge at
  one level hides the levels above it for that leaf (a child overriding its parent), while
  within one level the flat rule holds (at most one unguarded edge, and it comes last);
  a wildcard source (``*``) counts as declared on each leaf;
- a transition's **target** that is a compound resolves to its initial leaf, recursively.

Timers on a compound (``after``/``every``) are armed by the engine while the workflow is
anywhere inside it (see :func:`entered` and :func:`exited`); entry and exit actions run in
the order :meth:`~statewright.definition.machine.Machine.assigned` describes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from statewright.definition.model import WILDCARD, State, Transition
from statewright.errors import Problem

__all__ = [
    "CODES",
    "SEPARATOR",
    "Compiled",
    "Tree",
    "compile_tree",
    "inside",
    "is_nested",
    "timer_key",
]

SEPARATOR = "."
"""Joins a state's name to its parent's path: ``active.shipping``."""


CODES = (
    "no_initial_child",
    "multiple_initial_children",
    "terminal_compound_state",
    "unknown_parent_state",
)
"""The problem codes of nesting, beyond the flat checks' (``invalid_state_name``,
``duplicate_state`` and the timer codes are reported for compound states too, naming them).
``unknown_parent_state`` is :class:`~statewright.definition.machine.MachineBuilder`'s."""


def is_nested(states: Iterable[State]) -> bool:
    """Whether any of ``states`` is compound (then names are paths and dots are reserved)."""
    return any(s.states for s in states)


def timer_key(compound: str, kind: str, seconds: float) -> str:
    """The key of a compound's timer, unique per workflow: ``state:active:after:30``."""
    value = float(seconds)
    text = str(int(value)) if value.is_integer() else repr(value)
    return f"state:{compound}:{kind}:{text}"


@dataclass(frozen=True)
class Tree:
    """The nesting of a compound machine, as declared (kept for files and diagrams).

    Attributes:
        states: the top-level states as declared (compound ones with their children).
        transitions: the transitions as declared (sources and targets may be compounds;
            wildcards expanded).
        compounds: every compound state by path, in declaration order (depth first).
        parents: each nested state's (leaf or compound) parent path, by path.
    """

    states: tuple[State, ...]
    transitions: tuple[Transition, ...]
    compounds: Mapping[str, State]
    parents: Mapping[str, str]
    origins: Mapping[tuple[str, str], tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """Per (leaf, event), for each edge tried there (in order): the state it is declared on
    and its target as declared (both may be compound), which decide what it leaves and
    enters (see :meth:`~statewright.definition.machine.Machine.crossing`)."""

    def ancestors(self, path: str) -> tuple[str, ...]:
        """The compounds containing ``path``, innermost first."""
        return _ancestors(path, self.parents)


@dataclass(frozen=True)
class Compiled:
    """A tree of states compiled into a flat machine (see the module docstring)."""

    tree: Tree
    leaves: tuple[State, ...]
    transitions: tuple[Transition, ...]
    """One compiled edge per declared one that is still tried somewhere: its sources the
    leaves it applies from, its target a leaf."""
    table: Mapping[str, Mapping[str, tuple[Transition, ...]]]
    """leaf -> event -> the edges to try, in order."""
    problems: tuple[Problem, ...]


def compile_tree(
    states: Sequence[State], transitions: Sequence[Transition], events: Iterable[str]
) -> Compiled:
    """Compile a machine with compound states (unknown names are kept as they are, for the
    validation to report)."""
    problems: list[Problem] = []
    leaves: list[tuple[State, tuple[str, ...]]] = []  # (leaf renamed, its ancestors)
    compounds: dict[str, State] = {}
    parents: dict[str, str] = {}
    _walk(states, None, (), leaves, compounds, parents, problems)
    start = {_resolve(s.name, compounds) for s in states if s.initial}
    leaf_states = tuple(
        replace(leaf, initial=leaf.name in start, stuck_after=_stuck_after(leaf, up, compounds))
        for leaf, up in leaves
    )
    live = [s.name for s in leaf_states if not s.terminal]
    declared = tuple(_expand(t, live) for t in transitions)
    # Per (leaf, event): (depth of the declaring state above the leaf, declaration index).
    tried: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for index, t in enumerate(declared):
        for source in t.sources:
            if source in compounds:
                depth = source.count(SEPARATOR)
                for leaf in _leaves_under(source, live):
                    level = leaf.count(SEPARATOR) - depth
                    tried.setdefault(leaf, {}).setdefault(t.event, []).append((level, index))
            else:
                tried.setdefault(source, {}).setdefault(t.event, []).append((0, index))
    order: dict[str, dict[str, list[int]]] = {}
    origins: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
    sources: dict[int, list[str]] = {}
    for leaf, by_event in tried.items():
        chain = (leaf, *_ancestors(leaf, parents))
        for event, entries in by_event.items():
            kept: list[int] = []
            closed: int | None = None  # the level of the first unguarded edge
            for level, index in sorted(entries):
                if closed is not None and level > closed:
                    break  # hidden by a deeper unguarded edge (a child overriding its parent)
                if index in kept:
                    continue  # one edge naming both a state and a compound around it
                kept.append(index)
                origins[(leaf, event)] = (
                    *origins.get((leaf, event), ()),
                    (chain[min(level, len(chain) - 1)], declared[index].target),
                )
                if leaf not in sources.setdefault(index, []):
                    sources[index].append(leaf)
                if declared[index].guard is None and closed is None:
                    closed = level
            order.setdefault(leaf, {})[event] = kept
    _check_hidden(declared, compounds, live, sources, problems)
    flat = {
        i: replace(
            declared[i], sources=tuple(sources[i]), target=_resolve(declared[i].target, compounds)
        )
        for i in sorted(sources)
    }
    table = MappingProxyType(
        {
            leaf: MappingProxyType({e: tuple(flat[i] for i in ix) for e, ix in evs.items()})
            for leaf, evs in order.items()
        }
    )
    _check_compound_timers(compounds, table, live, set(events), problems)
    tree = Tree(
        tuple(states),
        declared,
        MappingProxyType(compounds),
        MappingProxyType(parents),
        MappingProxyType(origins),
    )
    return Compiled(tree, leaf_states, tuple(flat.values()), table, tuple(problems))


def _ancestors(path: str, parents: Mapping[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    parent = parents.get(path)
    while parent is not None:
        out.append(parent)
        parent = parents.get(parent)
    return tuple(out)


def inside(path: str, domain: str) -> bool:
    """Whether ``path`` is strictly below ``domain`` ("" is the root, above everything)."""
    return not domain or path.startswith(domain + SEPARATOR)


def _stuck_after(leaf: State, up: Sequence[str], compounds: Mapping[str, State]) -> float | None:
    if leaf.stuck_after is not None:
        return leaf.stuck_after
    return next(
        (compounds[a].stuck_after for a in up if compounds[a].stuck_after is not None), None
    )


def _walk(
    states: Sequence[State],
    parent: str | None,
    up: tuple[str, ...],
    leaves: list[tuple[State, tuple[str, ...]]],
    compounds: dict[str, State],
    parents: dict[str, str],
    problems: list[Problem],
) -> None:
    for s in states:
        name = s.name
        if isinstance(name, str) and SEPARATOR in name:
            problems.append(
                Problem(
                    "invalid_state_name",
                    f"state name {name!r}: '.' joins nested state names in a machine with "
                    "compound states (name the child, not its path)",
                    state=name,
                )
            )
        path = name if parent is None else f"{parent}{SEPARATOR}{name}"
        # (Two leaves of one path are reported by the flat checks.)
        if path in compounds or (s.states and any(leaf.name == path for leaf, _ in leaves)):
            msg = f"state {path!r} is declared more than once"
            problems.append(Problem("duplicate_state", msg, state=path))
        if parent is not None:
            parents[path] = parent
        if not s.states:
            leaves.append((replace(s, name=path), up))
            continue
        compounds[path] = s
        if s.terminal:
            msg = f"compound state {path!r} cannot be terminal (mark one of its leaves)"
            problems.append(Problem("terminal_compound_state", msg, state=path))
        initial = [c.name for c in s.states if c.initial]
        if not initial:
            msg = f"compound state {path!r} has no initial child (mark one initial=True)"
            problems.append(Problem("no_initial_child", msg, state=path))
        elif len(initial) > 1:
            names = ", ".join(map(repr, initial))
            msg = f"compound state {path!r} has {len(initial)} initial children: {names}"
            problems.append(Problem("multiple_initial_children", msg, state=path))
        _walk(s.states, path, (path, *up), leaves, compounds, parents, problems)


def _resolve(target: str, compounds: Mapping[str, State]) -> str:
    """A target path as the leaf it enters: a compound's initial child, recursively (its
    first child when none is marked: that problem is reported already)."""
    while target in compounds:
        children = compounds[target].states
        first = next((c for c in children if c.initial), children[0])
        target = f"{target}{SEPARATOR}{first.name}"
    return target


def _expand(t: Transition, live: Sequence[str]) -> Transition:
    if WILDCARD not in t.sources:
        return t
    named = [s for s in t.sources if s != WILDCARD]
    return replace(t, sources=tuple(dict.fromkeys([*named, *live])))


def _leaves_under(compound: str, live: Sequence[str]) -> list[str]:
    """The non-terminal leaves inside ``compound``."""
    prefix = compound + SEPARATOR
    return [leaf for leaf in live if leaf.startswith(prefix)]


def _check_hidden(
    declared: Sequence[Transition],
    compounds: Mapping[str, State],
    live: Sequence[str],
    sources: Mapping[int, list[str]],
    problems: list[Problem],
) -> None:
    # An edge on a compound state that every state inside it overrides (an unguarded edge on
    # the same event declared deeper, or by a wildcard) can never fire: like a flat edge
    # behind an unguarded one, it is reported rather than kept as dead code.
    for index, t in enumerate(declared):
        taken = set(sources.get(index, ()))
        for source in t.sources:
            inner = _leaves_under(source, live) if source in compounds else []
            if inner and taken.isdisjoint(inner):
                msg = (
                    f"transition on {t.event!r} from {source!r} to {t.target!r} can never "
                    f"fire: every state inside {source!r} has an unguarded transition on "
                    f"{t.event!r} of its own, which is tried first"
                )
                problems.append(Problem("shadowed_transition", msg, source, t.event))


def _check_compound_timers(
    compounds: Mapping[str, State],
    table: Mapping[str, Mapping[str, tuple[Transition, ...]]],
    live: Sequence[str],
    events: set[str],
    problems: list[Problem],
) -> None:
    # A compound's timer fires wherever the workflow is inside it: the event must lead out
    # of every leaf there (declared on the compound, or on each leaf).
    for path, s in compounds.items():
        for kind, timers in (("after", s.after), ("every", s.every)):
            for seconds, ev in timers.items():
                if not _positive(seconds):
                    code = "invalid_after_delay" if kind == "after" else "invalid_every_interval"
                    msg = (
                        f"state {path!r}: {kind!r} delay for {ev!r} must be > 0 s, got {seconds!r}"
                    )
                    problems.append(Problem(code, msg, path, ev))
                if ev not in events:
                    msg = f"state {path!r}: {kind!r} fires unknown event {ev!r}"
                    problems.append(Problem(f"{kind}_unknown_event", msg, path, ev))
                    continue
                missing = [
                    leaf for leaf in _leaves_under(path, live) if ev not in table.get(leaf, {})
                ]
                if missing:
                    msg = (
                        f"state {path!r}: {kind!r} fires {ev!r} but no transition on it "
                        f"leaves {missing[0]!r}"
                    )
                    problems.append(Problem(f"{kind}_event_not_from_state", msg, path, ev))


def _positive(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0
