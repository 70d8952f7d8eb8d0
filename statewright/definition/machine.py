"""Machine definitions: states, events, guarded transitions. Pure data, no I/O.

A :class:`Machine` is built once (through :class:`MachineBuilder` or :meth:`Machine.build`),
validated once, and then only read. Everything here is a frozen dataclass; the parts (states,
events, transitions, guards, actions) are in :mod:`statewright.definition.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

from statewright.definition.compound import SEPARATOR, Tree, compile_tree, inside, is_nested
from statewright.definition.guards import compile_expression, compile_value
from statewright.definition.joins import with_spawn_edges
from statewright.definition.model import (
    WILDCARD,
    Assign,
    AssignFn,
    Event,
    Guard,
    GuardFn,
    State,
    Transition,
    expand_wildcards,
)
from statewright.definition.validate import validate
from statewright.errors import ActionFailed, DefinitionError, IllegalTransition, Problem

__all__ = [
    "WILDCARD",
    "Assign",
    "AssignFn",
    "Event",
    "Guard",
    "GuardFn",
    "Machine",
    "MachineBuilder",
    "State",
    "Transition",
    "assign_from_exprs",
    "expand_wildcards",
    "make_assign",
    "make_guard",
]


@dataclass(frozen=True)
class Machine:
    """A validated state machine definition. Build it with :class:`MachineBuilder`."""

    name: str
    version: int
    states: Mapping[str, State]
    events: Mapping[str, Event]
    transitions: tuple[Transition, ...]
    description: str = ""
    tree: Tree | None = None
    """The nesting as declared, for a machine with compound states (None: a flat machine).
    ``states`` and ``transitions`` are then the compiled leaves (named by path) and edges."""
    _by_source: Mapping[str, Mapping[str, tuple[Transition, ...]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        name: str,
        *,
        states: Iterable[State],
        events: Iterable[Event],
        transitions: Iterable[Transition],
        version: int = 1,
        description: str = "",
    ) -> Machine:
        """Build and validate a machine; raises :class:`DefinitionError` listing every problem."""
        state_list = list(states)
        # A state's declared children (Spawn) make its join's edges (definition/joins.py).
        event_list, transitions = with_spawn_edges(state_list, list(events), list(transitions))
        if is_nested(state_list):
            return cls._build_nested(
                name, version, description, state_list, event_list, transitions
            )
        transition_list = expand_wildcards(transitions, state_list)
        validate(name, version, state_list, event_list, transition_list)
        by_source: dict[str, dict[str, list[Transition]]] = {}
        for t in transition_list:
            for s in t.sources:
                by_source.setdefault(s, {}).setdefault(t.event, []).append(t)
        return cls(
            name=name,
            version=version,
            states=MappingProxyType({s.name: s for s in state_list}),
            events=MappingProxyType({e.name: e for e in event_list}),
            transitions=transition_list,
            description=description,
            _by_source=MappingProxyType(
                {
                    s: MappingProxyType({e: tuple(ts) for e, ts in evs.items()})
                    for s, evs in by_source.items()
                }
            ),
        )

    @classmethod
    def _build_nested(
        cls,
        name: str,
        version: int,
        description: str,
        states: list[State],
        events: list[Event],
        transitions: Iterable[Transition],
    ) -> Machine:
        """A machine with compound states, compiled into leaves (see
        :mod:`statewright.definition.compound`)."""
        done = compile_tree(states, list(transitions), (e.name for e in events))
        validate(
            name,
            version,
            done.leaves,
            events,
            done.transitions,
            declared=done.tree.transitions,
            found=done.problems,
        )
        return cls(
            name=name,
            version=version,
            states=MappingProxyType({s.name: s for s in done.leaves}),
            events=MappingProxyType({e.name: e for e in events}),
            transitions=done.transitions,
            description=description,
            tree=done.tree,
            _by_source=done.table,
        )

    # -- queries --------------------------------------------------------------------------

    @property
    def initial(self) -> State:
        return next(s for s in self.states.values() if s.initial)

    @property
    def terminal_states(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states.values() if s.terminal)

    def is_terminal(self, state: str) -> bool:
        return self.states[state].terminal

    def transitions_from(self, state: str, event: str) -> tuple[Transition, ...]:
        return self._by_source.get(state, {}).get(event, ())

    def events_from(self, state: str) -> tuple[str, ...]:
        """Every event with an edge out of ``state``, ignoring guards, in declaration order."""
        return tuple(self._by_source.get(state, {}))

    def can(self, state: str, event: str) -> bool:
        """Whether ``event`` has any edge out of ``state`` (guards not evaluated)."""
        return bool(self.transitions_from(state, event))

    def allowed_events(
        self,
        state: str,
        context: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """The next allowed actions: events whose edges out of ``state`` could fire now.

        An event counts when one of its edges is unguarded or its guard passes on ``context``
        (and ``payload``, empty by default). A guard that raises counts as not passing.
        """
        ctx = context or {}
        pl = payload or {}
        out: list[str] = []
        for event, ts in self._by_source.get(state, {}).items():
            for t in ts:
                if t.guard is None or _safe_guard(t.guard, ctx, pl):
                    out.append(event)
                    break
        return out

    def resolve(
        self,
        state: str,
        event: str,
        context: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> Transition:
        """The transition ``event`` takes from ``state``; raises :class:`IllegalTransition`.

        Validates the payload against the event's schema first (:class:`InvalidPayload`).
        """
        if state not in self.states:
            raise IllegalTransition(state, event, (), reason="unknown state")
        if event not in self.events:
            raise IllegalTransition(
                state, event, self.allowed_events(state, context), reason="unknown event"
            )
        candidates = self.transitions_from(state, event)
        if not candidates:
            reason = "terminal state" if self.states[state].terminal else None
            raise IllegalTransition(state, event, self.allowed_events(state, context), reason)
        # Legality first: an event that cannot happen here is IllegalTransition whatever
        # its payload, so callers learn the real problem.
        pl = {} if payload is None else payload
        self.events[event].validate_payload(pl)
        ctx = context or {}
        for t in candidates:
            if t.guard is None or _safe_guard(t.guard, ctx, pl):
                return t
        raise IllegalTransition(
            state,
            event,
            self.allowed_events(state, context),
            reason="no guard passed: " + ", ".join(t.guard.name for t in candidates if t.guard),
        )

    # -- nesting --------------------------------------------------------------------------

    @cached_property
    def has_state_actions(self) -> bool:
        """Whether any state (leaf or compound) has an ``entry`` or ``exit`` action."""
        nodes = [*self.states.values(), *(self.tree.compounds.values() if self.tree else ())]
        return any(s.entry is not None or s.exit is not None for s in nodes)

    def ancestors(self, state: str) -> tuple[str, ...]:
        """The compound states containing ``state`` (a leaf's path), innermost first; none in
        a flat machine."""
        return () if self.tree is None else self.tree.ancestors(state)

    def node(self, path: str) -> State:
        """A leaf (from :attr:`states`) or a compound state (from the tree) by path."""
        found = self.states.get(path)
        if found is None and self.tree is not None:
            found = self.tree.compounds.get(path)
        if found is None:
            raise KeyError(path)
        return found

    def crossing(
        self, source: str, transition: Transition
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The states taking ``transition`` from the leaf ``source`` leaves (innermost first)
        and enters (outermost first), XState's rule (``reenter: false``).

        An edge declared on the leaf itself that targets it leaves and enters nothing (an
        internal self-transition). An edge declared on state ``S`` whose declared target is
        ``S`` or inside it works within ``S``: it leaves the states below ``S`` and enters
        those below ``S`` down to its target leaf (so a compound's edge to its own child
        re-enters that child, and one to itself goes back to its initial leaf). Any other
        edge works within the innermost compound containing both ``S`` and its target: a
        child's edge to its parent leaves and re-enters the parent. In a flat machine: the
        source, then the target, unless they are the same.
        """
        declared_on, declared_target = self._origin(source, transition)
        if declared_target == declared_on == source:
            return (), ()
        if declared_target == declared_on or inside(declared_target, declared_on):
            domain = declared_on
        else:
            around = set(self.ancestors(declared_target))
            domain = next((p for p in self.ancestors(declared_on) if p in around), "")
        target = transition.target
        return (
            tuple(p for p in (source, *self.ancestors(source)) if inside(p, domain)),
            tuple(p for p in reversed((target, *self.ancestors(target))) if inside(p, domain)),
        )

    def _origin(self, source: str, transition: Transition) -> tuple[str, str]:
        """Where the edge taken from ``source`` is declared, and its declared target."""
        if self.tree is not None:
            edges = self._by_source.get(source, {}).get(transition.event, ())
            for i, edge in enumerate(edges):
                if edge is transition:
                    return self.tree.origins[(source, transition.event)][i]
        return source, transition.target

    # -- actions --------------------------------------------------------------------------

    def assigned(
        self,
        transition: Transition,
        context: Mapping[str, Any],
        payload: Mapping[str, Any],
        source: str | None = None,
    ) -> dict[str, Any] | None:
        """The context patch the actions of taking ``transition`` from the leaf ``source``
        make, or None when there are none. In order, each seeing the context as the ones
        before left it: the ``exit`` actions of the states it leaves (innermost first), the
        event's ``assign``, the transition's ``assign``, then the ``entry`` actions of the
        states it enters (outermost first). A self-transition leaves and enters nothing.
        ``source`` defaults to the transition's source when it has only one (with several and
        none given, no exit or entry action runs).

        Raises:
            ActionFailed: an action raised (an expression met a value of the wrong type) or
                did not return a mapping of string keys.
        """
        if source is None and len(transition.sources) == 1:
            source = transition.sources[0]
        leaving: tuple[str, ...] = ()
        entering: tuple[str, ...] = ()
        if source is not None and self.has_state_actions:
            leaving, entering = self.crossing(source, transition)
        actions: list[tuple[str, Assign]] = [
            (f"{a.name} (exit of {p!r})", a) for p in leaving if (a := self.node(p).exit)
        ]
        actions += [
            (a.name, a) for a in (self.events[transition.event].assign, transition.assign) if a
        ]
        actions += [
            (f"{a.name} (entry of {p!r})", a) for p in entering if (a := self.node(p).entry)
        ]
        return _run_actions(transition.event, actions, context, payload)

    def started(self, context: Mapping[str, Any]) -> dict[str, Any] | None:
        """The context patch of entering the initial leaf at a workflow's start: the
        ``entry`` actions of every state on its path, outermost first (None: there are
        none).

        Raises:
            ActionFailed: an action raised or returned something other than a patch.
        """
        leaf = self.initial.name
        path = (*reversed(self.ancestors(leaf)), leaf)
        actions = [(f"{a.name} (entry of {p!r})", a) for p in path if (a := self.node(p).entry)]
        return _run_actions("$start", actions, context, {})


def _run_actions(
    event: str,
    actions: Iterable[tuple[str, Assign]],
    context: Mapping[str, Any],
    payload: Mapping[str, Any],
) -> dict[str, Any] | None:
    patch: dict[str, Any] | None = None
    for label, action in actions:
        seen = {**context, **patch} if patch else context
        try:
            update = action(seen, payload)
        except Exception as exc:
            raise ActionFailed(event, label, _why(exc)) from exc
        patch = update if patch is None else {**patch, **update}
    return patch


def _why(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def _safe_guard(guard: Guard, context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
    # A guard that raises (missing key, wrong type) is a guard that did not pass: a bad
    # payload must not crash the engine, and the caller still gets IllegalTransition.
    try:
        return guard(context, payload)
    except Exception:
        return False


class MachineBuilder:
    """Explicit, chainable builder for a :class:`Machine`.

    Example:
        >>> m = (MachineBuilder("door")
        ...      .state("closed", initial=True).state("open").state("gone", terminal=True)
        ...      .event("open").event("close").event("remove")
        ...      .transition("open", "closed", "open")
        ...      .transition("close", "open", "closed")
        ...      .transition("remove", ["open", "closed"], "gone")
        ...      .build())
        >>> m.allowed_events("closed")
        ['open', 'remove']
    """

    def __init__(self, name: str, version: int = 1, description: str = "") -> None:
        self.name = name
        self.version = version
        self.description = description
        self._states: list[State] = []
        self._parents: list[str | None] = []
        self._events: list[Event] = []
        self._transitions: list[Transition] = []
        self._guards: dict[str, GuardFn] = {}
        self._actions: dict[str, AssignFn] = {}

    def state(
        self,
        name: str,
        *,
        parent: str | None = None,
        entry: str | Mapping[str, str] | AssignFn | Assign | None = None,
        exit: str | Mapping[str, str] | AssignFn | Assign | None = None,
        **kwargs: Any,
    ) -> MachineBuilder:
        """Declare a state (keywords as :class:`State`'s).

        ``parent`` (a compound state's path, declared before or after) nests it: a state with
        children is a compound state, and one child is marked ``initial``. ``entry`` and
        ``exit`` update the context on entering and leaving it, in the forms ``assign`` takes
        in :meth:`transition`.
        """
        state = State(
            name,
            entry=make_assign(entry, self._actions),
            exit=make_assign(exit, self._actions),
            **kwargs,
        )
        self._states.append(state)
        self._parents.append(parent)
        return self

    def event(
        self,
        name: str,
        description: str = "",
        *,
        roles: Iterable[str] = (),
        payload_schema: Mapping[str, Any] | None = None,
        approval: bool = False,
        assign: str | Mapping[str, str] | AssignFn | Assign | None = None,
    ) -> MachineBuilder:
        """Declare an event; ``assign`` updates the context on every transition it takes
        (see :meth:`transition`)."""
        action = make_assign(assign, self._actions)
        self._events.append(
            Event(name, description, tuple(roles), payload_schema, approval, action)
        )
        return self

    def guard(self, name: str, fn: GuardFn) -> MachineBuilder:
        """Register a named Python guard that transitions can refer to by name."""
        self._guards[name] = fn
        return self

    def action(self, name: str, fn: AssignFn) -> MachineBuilder:
        """Register a named Python action (``fn(context, payload) -> patch``) that events and
        transitions can refer to by name in ``assign=``."""
        self._actions[name] = fn
        return self

    def transition(
        self,
        event: str,
        source: str | Iterable[str],
        target: str,
        *,
        guard: str | GuardFn | Guard | None = None,
        description: str = "",
        assign: str | Mapping[str, str] | AssignFn | Assign | None = None,
        compensate: bool = False,
    ) -> MachineBuilder:
        """Add an edge. ``assign`` updates the context as it is taken: a map of safe
        expressions (``{"attempts": "(context.attempts or 0) + 1"}``), a function
        ``(context, payload) -> patch``, or the name of one registered with :meth:`action`.
        ``compensate``: a compensating edge (see :attr:`Transition.compensate`).
        """
        sources = (source,) if isinstance(source, str) else tuple(source)
        self._transitions.append(
            Transition(
                sources,
                event,
                target,
                make_guard(guard, self._guards),
                description,
                make_assign(assign, self._actions),
                compensate=compensate,
            )
        )
        return self

    def build(self) -> Machine:
        return Machine.build(
            self.name,
            states=self._tree(),
            events=self._events,
            transitions=self._transitions,
            version=self.version,
            description=self.description,
        )

    def _tree(self) -> list[State]:
        """The states declared with ``parent=`` attached under their parents."""
        if not any(self._parents):
            return list(self._states)

        def attach(state: State, path: str) -> State:
            children = [
                attach(child, f"{path}{SEPARATOR}{child.name}")
                for child, parent in zip(self._states, self._parents, strict=True)
                if parent == path
            ]
            return replace(state, states=(*state.states, *children)) if children else state

        top = [s for s, parent in zip(self._states, self._parents, strict=True) if parent is None]
        out = [attach(s, s.name) for s in top]
        known = set(_paths(out))
        lost = [p for p in self._parents if p is not None and p not in known]
        if lost:
            raise DefinitionError(
                [
                    Problem("unknown_parent_state", f"parent state {p!r} is not declared", p)
                    for p in dict.fromkeys(lost)
                ],
                machine=self.name,
            )
        return out


def _paths(states: Iterable[State], prefix: str = "") -> Iterable[str]:
    for s in states:
        yield prefix + s.name
        yield from _paths(s.states, f"{prefix}{s.name}{SEPARATOR}")


def make_guard(spec: str | GuardFn | Guard | None, named: Mapping[str, GuardFn]) -> Guard | None:
    """Turn a guard spec into a :class:`Guard`.

    A string names a registered guard when ``named`` has it; otherwise it is parsed as a safe
    expression over ``context`` and ``payload`` (see :mod:`statewright.definition.guards`).
    """
    if spec is None or isinstance(spec, Guard):
        return spec
    if isinstance(spec, str):
        if spec in named:
            return Guard(spec, named[spec])
        return Guard(spec, compile_expression(spec), expr=spec)
    return Guard(getattr(spec, "__name__", "guard"), spec)


def make_assign(
    spec: str | Mapping[str, str] | AssignFn | Assign | None, named: Mapping[str, AssignFn]
) -> Assign | None:
    """Turn an action spec into an :class:`Assign`: a registered action's name, a map of
    safe expressions (context key -> expression over ``context`` and ``payload``), or a
    Python function.

    Raises:
        DefinitionError: an unknown action name, an empty map, a key that is not a context
            key, or an expression outside the language (all problems at once).
    """
    if spec is None or isinstance(spec, Assign):
        return spec
    if isinstance(spec, str):
        if spec in named:
            return Assign(spec, named[spec])
        raise DefinitionError(
            f"action {spec!r} is not registered (register it with MachineBuilder.action, or "
            "pass actions={...} to the loader), and a single string is not an assign map"
        )
    if isinstance(spec, Mapping):
        return assign_from_exprs(spec)
    if callable(spec):
        return Assign(getattr(spec, "__name__", "assign"), spec)
    raise DefinitionError(f"assign must be a map of expressions or a function, got {spec!r}")


def assign_from_exprs(exprs: Mapping[str, Any]) -> Assign:
    """An :class:`Assign` from a map of context key -> safe expression text."""
    problems: list[Problem] = []
    compiled: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Any]] = {}
    if not exprs:
        problems.append(Problem("invalid_action", "an assign map needs at least one key"))
    for key, text in exprs.items():
        if not isinstance(key, str) or not key or key.startswith("$"):
            problems.append(
                Problem(
                    "invalid_action",
                    f"assign key {key!r}: a context key is a non-empty "
                    "string not starting with '$'",
                )
            )
            continue
        if not isinstance(text, str):
            problems.append(
                Problem(
                    "invalid_action",
                    f"assign {key!r}: the value must be an expression "
                    f'string (quote constants: "\'text\'", "0"), got {text!r}',
                )
            )
            continue
        try:
            compiled[key] = compile_value(text)
        except DefinitionError as exc:
            problems.extend(exc.problems)
    if problems:
        raise DefinitionError(problems)

    def assign(context: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value(context, payload) for key, value in compiled.items()}

    return Assign("assign(" + ", ".join(exprs) + ")", assign, exprs=dict(exprs))
