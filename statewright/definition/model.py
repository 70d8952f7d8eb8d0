"""The parts of a machine definition: states, events, transitions, guards and actions.

Pure data, no I/O, and a leaf of ``definition/``: the guard language
(:mod:`~statewright.definition.guards`), the graph checks (:mod:`~statewright.definition.graph`,
:mod:`~statewright.definition.validate`) and the :class:`~statewright.definition.machine.Machine`
built from these all import it, and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

from statewright.errors import InvalidPayload

GuardFn = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
"""A guard: ``guard(context, payload) -> bool``."""
AssignFn = Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, Any]]
"""An action: ``assign(context, payload) -> patch`` (top-level context keys to set)."""


@dataclass(frozen=True)
class Guard:
    """A named predicate over the workflow context and the event payload.

    ``expr`` is set when the guard came from a safe expression string (and so can be saved as
    data); ``fn`` is what is evaluated.
    """

    name: str
    fn: GuardFn
    expr: str | None = None

    def __call__(self, context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
        return bool(self.fn(context, payload))

    def __eq__(self, other: object) -> bool:
        # An expression guard is data: the same text means the same predicate, even when
        # compiled twice (e.g. after a save/load round trip). A Python guard is its function.
        if not isinstance(other, Guard):
            return NotImplemented
        if self.expr is not None or other.expr is not None:
            return (self.name, self.expr) == (other.name, other.expr)
        return self.name == other.name and self.fn == other.fn

    def __hash__(self) -> int:
        return hash((self.name, self.expr))


@dataclass(frozen=True)
class Assign:
    """A context update made by a transition, XState's ``assign``: pure, and applied in the
    transition's own transaction.

    It computes a patch (top-level context keys to set) from the context *before* the
    transition and the event's payload; the patch is merged into the context and stored in the
    log with the transition, so replay rebuilds the same context without running it again.

    ``exprs`` is set when the action is a map of safe expressions (the guard language, see
    :mod:`statewright.definition.guards`), e.g. ``{"failed_attempts":
    "(context.failed_attempts or 0) + 1", "shipment_id": "payload.shipment_id"}``; such an
    action is data and is saved as such. A Python action is a function and is saved by name.
    """

    name: str
    fn: AssignFn
    exprs: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.exprs is not None:
            object.__setattr__(self, "exprs", MappingProxyType(dict(self.exprs)))

    def __call__(self, context: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
        patch = self.fn(context, payload)
        if not isinstance(patch, Mapping):
            raise TypeError(f"it returned a {type(patch).__name__}, not a mapping of keys")
        bad = [k for k in patch if not isinstance(k, str)]
        if bad:
            raise TypeError(f"context keys must be strings, got {bad[0]!r}")
        return dict(patch)

    def __eq__(self, other: object) -> bool:
        # Like Guard: an expression map is data (equal when the texts are); a Python action
        # is its function.
        if not isinstance(other, Assign):
            return NotImplemented
        if self.exprs is not None or other.exprs is not None:
            return (self.name, _frozen(self.exprs)) == (other.name, _frozen(other.exprs))
        return self.name == other.name and self.fn == other.fn

    def __hash__(self) -> int:
        return hash((self.name, _frozen(self.exprs)))


def _frozen(exprs: Mapping[str, str] | None) -> tuple[tuple[str, str], ...] | None:
    return None if exprs is None else tuple(sorted(exprs.items()))


@dataclass(frozen=True)
class Spawn:
    """Child workflows a state starts, declared with it (see :attr:`State.spawn`).

    Attributes:
        type: the children's workflow type.
        over: the context key of the list the children are started for, one per element,
            keyed by its index; the element is the child's context under ``input``.
        cap: at most this many children running at once (None: all at once).
        join: when the state is left for ``then``: once ``"all"`` children have ended, on
            the first (``"any"``), or once so many (an int) have.
        then: the state the join moves to (None: the machine's own edges on ``child_done``
            and ``child_failed`` decide).
        input: the key of the element in a child's context.
    """

    type: str
    over: str
    cap: int | None = None
    join: str | int = "all"
    then: str | None = None
    input: str = "item"


@dataclass(frozen=True)
class State:
    """One state.

    Attributes:
        name: unique name.
        initial: the state a new workflow starts in (exactly one per machine).
        terminal: no outgoing transitions; a workflow here is finished for good.
        after: durable timers, XState-style: seconds spent in this state -> event to fire.
            Used for approval timeouts, reminders and wake-ups.
        every: recurring durable timers: every so many seconds in this state -> event to
            fire. Armed on entering the state like ``after``; a firing that keeps the
            workflow in the state (a self-transition) re-arms it for the next interval
            after now (missed intervals are skipped, never fired in a burst), and a firing
            a guard refuses is logged as a rejection and re-armed. Leaving the state
            clears it.
        stuck_after: seconds after which a workflow in this state counts as stuck.
        description: free text for docs and dashboards.
        states: child states, making this a *compound* state (XState's nested states). A
            workflow is never in a compound state itself but in one of its leaves, stored
            as the dotted path (``active.shipping``). One child is marked ``initial``:
            entering the compound enters it. Transitions, timers and ``stuck_after``
            declared on a compound apply anywhere inside it.
        entry: a context update made on entering this state (after the transition's own
            ``assign``); see :class:`Assign`.
        exit: a context update made on leaving this state (before the transition's
            ``assign``).
        spawn: child workflows this state starts, one per element of a context list, and
            the join that leaves it (:class:`Spawn`): the state's handler and its edges on
            ``child_done``/``child_failed`` are made from it.
    """

    name: str
    initial: bool = False
    terminal: bool = False
    after: Mapping[float, str] = field(default_factory=dict)
    stuck_after: float | None = None
    description: str = ""
    every: Mapping[float, str] = field(default_factory=dict)
    states: tuple[State, ...] = ()
    entry: Assign | None = None
    exit: Assign | None = None
    spawn: Spawn | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "after", MappingProxyType(dict(self.after)))
        object.__setattr__(self, "every", MappingProxyType(dict(self.every)))
        object.__setattr__(self, "states", tuple(self.states))

    def __hash__(self) -> int:
        # The timer maps are read-only views (not hashable themselves): hash their items.
        return hash(
            (
                self.name,
                self.initial,
                self.terminal,
                tuple(sorted(self.after.items())),
                self.stuck_after,
                self.description,
                tuple(sorted(self.every.items())),
                self.states,
                self.entry,
                self.exit,
                self.spawn,
            )
        )

    @property
    def compound(self) -> bool:
        """Whether this state has child states."""
        return bool(self.states)


@dataclass(frozen=True)
class Event:
    """One event type.

    Attributes:
        name: unique name.
        description: what firing it means (shown to people and to LLMs).
        roles: which roles may fire it; empty means any role. Enforced by the HTTP/MCP layers.
        payload_schema: a JSON Schema the payload must satisfy, or None for any object.
        approval: marks an approval decision (never offered to an agent).
        assign: a context update made by every transition on this event (before the
            transition's own ``assign``, which sees its result).
    """

    name: str
    description: str = ""
    roles: tuple[str, ...] = ()
    payload_schema: Mapping[str, Any] | None = None
    approval: bool = False
    assign: Assign | None = None

    @cached_property
    def _validator(self) -> Any:
        # Built once per event, not per payload: this sits on every transition's path.
        # jsonschema is a pure-Python validator: no I/O, fine for this layer.
        import jsonschema

        from statewright.definition.data import plain

        return jsonschema.Draft202012Validator(plain(self.payload_schema))

    def validate_payload(self, payload: Any) -> None:
        """Raise :class:`InvalidPayload` unless ``payload`` fits this event."""
        if not isinstance(payload, Mapping):
            got = type(payload).__name__
            raise InvalidPayload(self.name, f"expected a JSON object, got {got}")
        if self.payload_schema is None:
            return
        import jsonschema

        from statewright.definition.data import plain

        # plain(): jsonschema only treats real dicts as JSON objects, not MappingProxyType.
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(plain(payload)))
        if error is not None:
            path = "/".join(str(p) for p in error.absolute_path)
            raise InvalidPayload(self.name, error.message, path)


@dataclass(frozen=True)
class Transition:
    """An edge: from any of ``sources`` on ``event`` to ``target`` when ``guard`` passes.

    Several transitions may share (source, event): the first whose guard passes wins, in
    declaration order; at most one of them may be unguarded, and it must come last. Guards see
    the context before any action; ``assign`` (see :class:`Assign`) updates it on the way.
    """

    sources: tuple[str, ...]
    event: str
    target: str
    guard: Guard | None = None
    description: str = ""
    assign: Assign | None = None
    spawned: bool = False
    """Made from a state's :class:`Spawn` (its join), not declared: not saved in files."""
    compensate: bool = False
    """A compensating transition: before it is written, the worker runs the compensations of
    the workflow's completed steps, in reverse order (see
    :mod:`statewright.engine.compensation`)."""

    @property
    def is_self(self) -> bool:
        return self.sources == (self.target,)


WILDCARD = "*"
"""As a transition's source: every state that is not terminal."""


def expand_wildcards(
    transitions: Iterable[Transition], states: Iterable[State]
) -> tuple[Transition, ...]:
    """Transitions with the source ``*`` replaced by every non-terminal state (in declaration
    order, after any named with it). The expanded edges are checked like any other: an
    unguarded one next to an explicit unguarded edge of the same state and event is an
    ``ambiguous_transition`` naming that state."""
    live = [s.name for s in states if not s.terminal]
    out: list[Transition] = []
    for t in transitions:
        if WILDCARD in t.sources:
            named = [s for s in t.sources if s != WILDCARD]
            t = replace(t, sources=tuple(dict.fromkeys([*named, *live])))
        out.append(t)
    return tuple(out)
