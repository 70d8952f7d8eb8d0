"""A workflow type: a machine plus the code and policies that run it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from statewright.definition.graph import can_reach
from statewright.definition.joins import CHILD_DONE, CHILD_FAILED, FAILED_STATES
from statewright.definition.machine import Machine
from statewright.definition.model import Spawn
from statewright.engine.budgets import Budget, budget_problems
from statewright.engine.compensation_names import callable_name
from statewright.engine.fanout import fan_out
from statewright.engine.input_schema import compile_schema, schema_problems
from statewright.engine.limits import limit_problems
from statewright.engine.retry import RetryPolicy
from statewright.engine.search import search_problems
from statewright.errors import DefinitionError, Problem
from statewright.redaction import path_problem
from statewright.types import TimerSpec, TypeLimit, WorkflowRow


@dataclass(frozen=True)
class Next:
    """What a handler returns: the event to fire, its payload, and context changes."""

    event: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    context: Mapping[str, Any] | None = None
    """Shallow update merged into the workflow context in the same transaction."""


HandlerResult = Next | str | None
Handler = Callable[[Any], Awaitable[HandlerResult] | HandlerResult]
"""A state handler: gets a :class:`~statewright.engine.steps.Run`, returns the next event (or
None to stay idle).

An ``async def`` handler runs on the worker's event loop; any other callable runs in the
worker's thread pool and gets a :class:`~statewright.engine.syncrun.SyncRun` (same methods,
blocking). Its argument is typed ``Any`` here because it is one of those two: and so that this
record of a type does not depend on the runtime that runs it (``steps`` reads the type)."""

NOTICE_PREFIX = "child:"
"""The parent's timer key for a child's end: ``child:<key>``."""

DEFAULT_DEADLINE = 900.0
"""Seconds a handler may run by default before it is stopped (15 minutes)."""


@dataclass(frozen=True)
class Applied:
    """Reconcile verdict: the external system did apply the step; here is its result."""

    result: Any = None


@dataclass(frozen=True)
class NotApplied:
    """Reconcile verdict: the external system never applied the step; it is safe to run."""


Reconciled = Applied | NotApplied | None
"""``None`` means the external system could not tell."""
Reconciler = Callable[[str], Awaitable[Reconciled] | Reconciled]
"""``reconcile(key) -> Applied(result) | NotApplied() | None``.

``key`` is the step's :class:`~statewright.engine.steps.StepKey` (a ``str``,
``workflow_id:step``) carrying the *asking* claim's fencing token: a service that records it as
the highest token seen for the key refuses the late call of the claim whose outcome is asked,
which may still be in flight."""

SummaryHook = Callable[
    [Mapping[str, Any]], "str | Mapping[str, Any] | tuple[str, Mapping[str, Any]]"
]
"""A type's ``summary``: ``fn(context)`` returns a short text ("Payment of 149.99 EUR captured;
waiting for the warehouse"), a small JSON object, or both as ``(text, object)``. It gets the
context without its redacted keys; it must be quick, pure and synchronous."""

RecoveryAction = Literal["rerun", "retry", "fail", "leave"]
"""What recovery does with a workflow whose worker died mid-state.

``rerun``: run the state's handler again (steps are idempotent; interrupted ones reconcile).
``retry``: count it as a transient failure (backoff, budget). ``fail``: a fatal failure.
``leave``: release it and wait for an external event.
"""


@dataclass(frozen=True)
class WorkflowType:
    """Binds a :class:`Machine` to handlers and policies.

    Attributes:
        machine: the definition (its name is the type name).
        handlers: state name -> handler run by workers while a workflow is in that state.
        retry: the retry policy for transient errors raised by handlers.
        on_transient: event fired on a transient error when the state has an edge for it
            (payload: attempt, max_attempts, error, retry_after); otherwise the handler is
            re-run in place after the backoff.
        retry_event: event the backoff timer fires when ``on_transient`` led to a waiting
            state (e.g. retrying -> running).
        on_fatal: event fired on a fatal error (or an exhausted budget) when allowed;
            otherwise the workflow is parked with its error and shows up as stuck.
        approve_event / deny_event: what ``approve`` and ``deny`` fire.
        cancel_event: what :meth:`Engine.cancel` fires (payload ``{"reason": ...}``), at once
            on an idle workflow, or through the running handler (with the partial results it
            saved); None: the type cannot be cancelled.
        reconcilers: step name -> reconcile hook for steps whose outcome is unknown (found
            executing after a crash, or whose action raised after it may have reached the
            other side). See :meth:`~statewright.engine.steps.Run.step`.
        recovery: state name -> :data:`RecoveryAction` for a worker that died; default rerun.
        step_outcome_unknown: event fired when a step's outcome stays unknown (no reconcile
            verdict, not safe to repeat), when the state has an edge for it (payload:
            ``key``, ``error``); otherwise (the default) the workflow is **parked** for an
            operator: it stays in its state, leased by nobody, with ``parked`` set to
            ``"step_outcome_unknown"`` and the key in ``last_error``, until
            ``Engine.resolve_step`` (or an event) moves it on.
        deadline: seconds a handler may run (default 15 minutes); past it the handler is
            stopped and the run counts as a transient failure whose outcome is unknown (its
            unfinished steps are reconciled before any retry). The lease is never renewed
            past the deadline plus the worker's grace.
        deadlines: state name -> deadline for that state's handler.
        summary: the workflow's summary for people and agents (:data:`SummaryHook`), shown
            by the MCP ``get_workflow_state``, the HTTP workflow views and the dashboard in
            place of the default (the context's top-level keys, cut short, without the
            redacted ones and those starting with ``_``). A hook that raises, or returns
            something too large or not JSON, is logged and the default shown instead.
        redact: context keys (top-level names or dotted paths, ``"customer.card.number"``)
            never shown to agents (MCP), in summaries, or over HTTP to callers without the
            operator or admin role: removed from the context, step results, event payloads
            and context patches, and their values masked inside error messages and other
            texts (see :mod:`statewright.redaction`).
        max_concurrent: at most this many workflows of the type leased (running) at once,
            across every worker process (:mod:`statewright.engine.limits`); None: no limit.
        max_per_second: at most this many claims of the type per second on average, across
            every worker (a token bucket in the store); None: no limit.
        burst: how many claims ``max_per_second`` allows at once after a quiet spell
            (default: one second's worth, at least 1).
        runs_here: whether ``handlers`` are all the handlers the type has, so that this
            process can tell which states have work (:meth:`has_work`). Default: yes when
            at least one handler is bound; a type registered with none (a bare Machine, a
            definition file) is one whose handlers live in the workers, and every state it
            enters is due for them to decide. True for a type that has no handler anywhere
            (events and timers alone move it): its writes skip that claim.
        result: what a child of this type reports to its parent when it ends
            (``fn(context) -> JSON``, in the ``result`` of the parent's event); None: its
            final context. See :mod:`statewright.engine.children`.
        parent_events: terminal state -> the event a child of this type that ends there
            sends its parent; by default ``child_failed`` for ``failed``/``cancelled`` and
            ``child_done`` for any other.
        children_on_end: what a workflow of this type that ends does to its live children:
            ``"cancel"`` them (the default), or ``"abandon"`` them (they run on, and their
            ends reach nobody).
        compensations: the functions steps name in ``run.step(..., compensate=fn)``, found by
            any process that runs them after a crash: a list (each known by its
            ``module:qualname``) or a map name -> function (needed for a lambda or a local
            function). Others are found by import of their ``module:qualname``.
        compensate_on: besides a transition marked ``compensate``, what else runs the
            compensations of the completed steps first: ``"cancel"`` (the cancel event) and
            ``"fatal"`` (the ``on_fatal`` event). Default: neither.
        budgets: limits on what the type's model calls spend (tokens, cost, calls; per
            workflow or per visit of a state), each with the event fired instead of calling
            the model again once it is reached (:mod:`statewright.engine.budgets`).
        input_schema: a JSON Schema (Draft 2020-12) the input of every start must satisfy
            (the workflow's initial context); a start that fails it is refused with the
            schema's errors and writes nothing (:mod:`statewright.engine.input_schema`).
            None: any JSON object.
        search_attributes: top-level context keys indexed so workflows of the type can be
            listed by their value (``list --where order_number=A-1``): at most 16, each a
            name; see :mod:`statewright.engine.search` for which values are indexed.
    """

    machine: Machine
    handlers: Mapping[str, Handler] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_transient: str | None = "error_transient"
    retry_event: str = "retry"
    on_fatal: str | None = "fatal_error"
    approve_event: str = "approval_granted"
    deny_event: str = "approval_denied"
    cancel_event: str | None = "cancel"
    reconcilers: Mapping[str, Reconciler] = field(default_factory=dict)
    recovery: Mapping[str, RecoveryAction] = field(default_factory=dict)
    step_outcome_unknown: str | None = None
    deadline: float = DEFAULT_DEADLINE
    deadlines: Mapping[str, float] = field(default_factory=dict)
    summary: SummaryHook | None = None
    redact: tuple[str, ...] = ()
    max_concurrent: int | None = None
    max_per_second: float | None = None
    burst: float | None = None
    runs_here: bool | None = None
    result: Callable[[Mapping[str, Any]], Any] | None = None
    parent_events: Mapping[str, str] = field(default_factory=dict)
    children_on_end: Literal["cancel", "abandon"] = "cancel"
    compensations: Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]] = ()
    compensate_on: tuple[Literal["cancel", "fatal"], ...] = ()
    budgets: Sequence[Budget] = ()
    input_schema: Mapping[str, Any] | None = None
    search_attributes: tuple[str, ...] = ()
    input_validator: Any = field(init=False, repr=False, compare=False)
    """``input_schema`` compiled once (None without one: a start checks nothing)."""
    _decides: bool = field(init=False, repr=False, compare=False)
    """``runs_here`` resolved (read by every write that enters a state)."""
    compensators: Mapping[str, Callable[..., Any]] = field(init=False, repr=False, compare=False)
    """``compensations`` by name."""
    compensates: bool = field(init=False, repr=False, compare=False)
    """Whether anything of the type may compensate (the worker's one check when not)."""
    compensating_events: frozenset[str] = field(init=False, repr=False, compare=False)
    """The events that compensate by ``compensate_on`` (the cancel event, ``on_fatal``)."""

    def __post_init__(self) -> None:
        if isinstance(self.redact, list):
            object.__setattr__(self, "redact", tuple(self.redact))
        decides = bool(self.handlers) if self.runs_here is None else self.runs_here
        object.__setattr__(self, "_decides", decides)
        compensators, problems = _compensators(self.compensations)
        if isinstance(self.compensate_on, list | str):
            on = (
                (self.compensate_on,)
                if isinstance(self.compensate_on, str)
                else self.compensate_on
            )
            object.__setattr__(self, "compensate_on", tuple(on))
        problems += [
            Problem("invalid_compensate_on", f"compensate_on: {o!r} is not 'cancel' or 'fatal'")
            for o in self.compensate_on
            if o not in ("cancel", "fatal")
        ]
        object.__setattr__(self, "compensators", compensators)
        edges = any(t.compensate for t in self.machine.transitions)
        object.__setattr__(self, "compensates", edges or bool(self.compensate_on))
        by_policy = {"cancel": self.cancel_event, "fatal": self.on_fatal}
        events = {by_policy.get(o) for o in self.compensate_on} - {None}
        object.__setattr__(self, "compensating_events", frozenset(e for e in events if e))
        # A state that declares its children (Spawn) gets the handler that starts them, unless
        # one is bound; after ``decides``: a type registered without handlers still is one
        # whose other handlers live elsewhere.
        spawned = {
            name: _spawner(state.spawn)
            for name, state in self.machine.states.items()
            if state.spawn is not None and name not in self.handlers
        }
        if spawned:
            object.__setattr__(self, "handlers", {**self.handlers, **spawned})
        problems += [
            Problem("unknown_handler_state", f"handler bound to {_unknown(self.machine, s)}", s)
            for s in self.handlers
            if s not in self.machine.states
        ]
        problems += [
            Problem("handler_on_terminal", f"terminal state {s!r} cannot have a handler", state=s)
            for s in self.handlers
            if s in self.machine.states and self.machine.states[s].terminal
        ]
        problems += [
            Problem("unknown_recovery_state", f"recovery for unknown state {s!r}", state=s)
            for s in self.recovery
            if s not in self.machine.states
        ]
        problems += [
            Problem("unknown_deadline_state", f"deadline for unknown state {s!r}", state=s)
            for s in self.deadlines
            if s not in self.machine.states
        ]
        problems += [
            Problem("invalid_deadline", f"deadline of {s!r} must be positive, not {d!r}", state=s)
            for s, d in [("*", self.deadline), *self.deadlines.items()]
            if not isinstance(d, int | float) or not d > 0
        ]
        if isinstance(self.redact, str):
            problems.append(
                Problem("invalid_redact", "redact must be a tuple of key paths, not a string")
            )
        else:
            problems += [
                Problem("invalid_redact", why)
                for why in map(path_problem, self.redact)
                if why is not None
            ]
        if self.summary is not None and not callable(self.summary):
            problems.append(
                Problem("invalid_summary", "summary must be a function of the context")
            )
        if self.budgets:
            if isinstance(self.budgets, list | set | frozenset | Iterator):
                object.__setattr__(self, "budgets", tuple(self.budgets))
            problems += budget_problems(self.machine, self.budgets)
        problems += limit_problems(self.max_concurrent, self.max_per_second, self.burst)
        if isinstance(self.search_attributes, list):
            object.__setattr__(self, "search_attributes", tuple(self.search_attributes))
        problems += search_problems(self.search_attributes)
        schema_wrong = schema_problems(self.input_schema)
        problems += schema_wrong
        validator = None if schema_wrong else compile_schema(self.input_schema)
        object.__setattr__(self, "input_validator", validator)
        if self.runs_here is not None and not isinstance(self.runs_here, bool):
            problems.append(Problem("invalid_runs_here", "runs_here must be True, False or None"))
        event = self.step_outcome_unknown
        if event is not None and event not in self.machine.events:
            problems.append(
                Problem("unknown_event", f"step_outcome_unknown event {event!r} is not declared")
            )
        if problems:
            raise DefinitionError(problems, self.machine.name)

    @property
    def name(self) -> str:
        return self.machine.name

    @property
    def limit(self) -> TypeLimit | None:
        """The type's claim limits, or None when it has none (the fast claim)."""
        if self.max_concurrent is None and self.max_per_second is None:
            return None
        return TypeLimit(self.max_concurrent, self.max_per_second, self.burst)

    @property
    def version(self) -> int:
        return self.machine.version

    @property
    def knows_handlers(self) -> bool:
        """Whether this process can tell which states have work (see ``runs_here``)."""
        return self._decides

    def has_work(self, state: str) -> bool:
        """Whether a workflow entering ``state`` (not a terminal one) is due for a worker.

        Decided alike whichever process writes the row: with the type's handlers, due when
        the state has one. A type registered with no handler at all (a bare Machine, a
        definition file: a client, ``statewright --app machine.yaml serve``) is one this
        process does not run (unless ``runs_here``), so it cannot tell which states have
        work: every state it enters is due, and the worker that claims the row decides (it
        runs the state's handler, or finds none and lets the row go until its next timer,
        input or event). See :func:`~statewright.engine.transitions.run_at_for`.
        """
        return state in self.handlers or not self._decides

    def takes_inputs(self, state: str) -> bool:
        """Whether an input posted to a workflow in ``state`` may ever be read: some state
        with a handler is ``state`` or reachable from it (an input waits in the inbox for the
        handler that takes it). Always True when this process cannot tell (see
        :meth:`has_work`)."""
        return not self._decides or state in self._input_states

    @cached_property
    def _input_states(self) -> frozenset[str]:
        """The states from which a state with a handler is reachable (computed once)."""
        machine = self.machine
        names = list(machine.states)
        return frozenset(can_reach(names, machine.transitions, self.handlers))

    def child_result(self, context: Mapping[str, Any]) -> Any:
        """What a child of this type reports to its parent as it ends (``result``; default
        its final context). Raises what the hook raises."""
        return dict(context) if self.result is None else self.result(context)

    def notice(
        self, row: WorkflowRow, final: str, payload: Mapping[str, Any], at: float
    ) -> TimerSpec:
        """The timer a child of this type arms on its parent as it ends (``row`` entering the
        terminal state ``final``), with ``payload`` added to the notice's own (``result``,
        say): see :mod:`statewright.engine.children` and
        :attr:`~statewright.types.TransitionWrite.notice`."""
        assert row.parent_key is not None
        event = self.parent_events.get(final) or (
            CHILD_FAILED if final in FAILED_STATES else CHILD_DONE
        )
        full = {"child": row.id, "key": row.parent_key, "state": final, **payload}
        return TimerSpec(at, event, full, key=NOTICE_PREFIX + row.parent_key, keep=True)

    def recovery_for(self, state: str) -> RecoveryAction:
        return self.recovery.get(state, "rerun")

    def deadline_for(self, state: str) -> float:
        """Seconds ``state``'s handler may run."""
        return self.deadlines.get(state, self.deadline)


def _unknown(machine: Machine, state: str) -> str:
    """How a handler's state that the machine cannot be in is named in the error."""
    if machine.tree is not None and state in machine.tree.compounds:
        return (
            f"compound state {state!r}: a workflow is never in it, only in a state inside it "
            "(bind the handler to those, by path)"
        )
    return f"unknown state {state!r}"


def _compensators(
    given: Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]],
) -> tuple[dict[str, Callable[..., Any]], list[Problem]]:
    """A type's ``compensations`` by name, and what is wrong with them."""
    items = list(given.items()) if isinstance(given, Mapping) else [(None, f) for f in given]
    out: dict[str, Callable[..., Any]] = {}
    problems: list[Problem] = []
    for name, fn in items:
        name = name if name is not None else (callable_name(fn) if callable(fn) else None)
        if not callable(fn) or not isinstance(name, str) or not name:
            problems.append(
                Problem(
                    "invalid_compensation",
                    f"compensation {fn!r} needs a name: pass compensations as a map "
                    "name -> function for a lambda or a local function",
                )
            )
        else:
            out[name] = fn
    return out, problems


def _spawner(spawn: Spawn) -> Handler:
    """The handler of a state that declares its children: :func:`~.fanout.fan_out`."""
    key = spawn.input
    return fan_out(spawn.type, spawn.over, cap=spawn.cap, input=lambda item: {key: item})
