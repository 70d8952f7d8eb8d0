"""Model-based tests of a workflow type: random legal events, real engine, invariants.

:func:`check_machine` lets hypothesis drive one workflow through a real engine (in-memory
SQLite, a :class:`~statewright.clock.ManualClock`, the real :class:`~statewright.Worker`)
and checks, after every step, that the log replays to the row, that refused events change
nothing, that terminal states are final, and your own invariants. A failure shrinks to a
short sequence of steps, shown in the error. :func:`check_cover` drives each sequence of the
:func:`~statewright.testing.transition_cover` through the engine. :func:`legal_events` is
the strategy of ``(event, payload)`` pairs a workflow could take now.

Needs ``hypothesis`` (the ``test`` extra); importing :mod:`statewright.testing` does not.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import hypothesis
from hypothesis import strategies as st

from statewright.clock import ManualClock
from statewright.definition.joins import CHILD_DONE, CHILD_FAILED
from statewright.definition.machine import Machine
from statewright.engine.children import settled
from statewright.engine.core import Engine
from statewright.engine.worker import Worker
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import IllegalTransition, InvalidPayload, WorkflowFinished
from statewright.store.sqlite import SQLiteStore
from statewright.testing.schema import from_schema
from statewright.types import WorkflowRow

__all__ = [
    "Invariant",
    "ModelCheckFailure",
    "check_machine",
    "legal_events",
    "payloads",
]

T = TypeVar("T")
Target = WorkflowType | Machine | Callable[[], WorkflowType | Machine]
"""What to test: a workflow type, a bare machine (no handlers), or a factory called once per
example (for handlers bound to fresh fakes)."""
Invariant = Callable[[WorkflowRow], object]
"""``invariant(row)``: raise AssertionError (or return False) when the row is wrong; may be
``async``."""
Payload = Mapping[str, Any]
Roles = Sequence[str] | None

WORKFLOW_ID = "model-check"
"""The id of the workflow each example drives."""
REFUSED = (IllegalTransition, WorkflowFinished)


class ModelCheckFailure(AssertionError):
    """A check failed; the message names the check and the steps that led there."""

    def __init__(self, message: str, steps: Sequence[str]) -> None:
        self.steps = list(steps)
        trail = "\n".join(f"  {i}. {s}" for i, s in enumerate(self.steps, 1))
        super().__init__(f"{message}\nsteps:\n{trail}")


# -- strategies ------------------------------------------------------------------------------


def payloads(machine: Machine, event: str) -> st.SearchStrategy[dict[str, Any]]:
    """Payloads that satisfy ``event``'s ``payload_schema`` (``{}`` when it has none)."""
    schema = machine.events[event].payload_schema
    if schema is None:
        return st.just({})
    return from_schema(schema).filter(lambda v: isinstance(v, dict))


def _guarded_only(machine: Machine, state: str, event: str) -> bool:
    return all(t.guard is not None for t in machine.transitions_from(state, event))


def _may_send(machine: Machine, event: str, roles: Roles) -> bool:
    if roles is None:
        return True
    allowed_roles = machine.events[event].roles
    return not allowed_roles or bool(set(allowed_roles) & set(roles))


def _candidates(machine: Machine, state: str, context: Payload, roles: Roles = None) -> list[str]:
    """Events that may fire now: allowed with an empty payload (guards evaluated), or every
    edge of which is guarded (a payload may make one pass); with ``roles``, only events one
    of them may fire."""
    allowed = set(machine.allowed_events(state, context))
    return [
        e
        for e in machine.events_from(state)
        if (e in allowed or _guarded_only(machine, state, e)) and _may_send(machine, e, roles)
    ]


def _refuses(machine: Machine, state: str, event: str, context: Payload) -> bool:
    """Whether ``event`` with an empty payload is an IllegalTransition now (not allowed,
    or no guard passes)."""
    try:
        machine.resolve(state, event, context, {})
    except IllegalTransition:
        return True
    except InvalidPayload:
        return False
    return False


def _takes(machine: Machine, state: str, event: str, context: Payload, payload: Payload) -> bool:
    try:
        machine.resolve(state, event, context, payload)
    except (IllegalTransition, InvalidPayload):
        return False
    return True


def _draw_legal(
    draw: Callable[[st.SearchStrategy[Any]], Any],
    machine: Machine,
    state: str,
    context: Payload,
    roles: Roles = None,
    tries: int = 3,
    skip: frozenset[str] = frozenset(),
) -> tuple[str, dict[str, Any]] | None:
    events = [e for e in _candidates(machine, state, context, roles) if e not in skip]
    if not events:
        return None
    first = draw(st.sampled_from(events))
    for event in [first, *(e for e in events if e != first)]:
        for _ in range(tries):
            payload = draw(payloads(machine, event))
            if _takes(machine, state, event, context, payload):
                return event, payload
    return None


def legal_events(
    machine: Machine,
    state: str,
    context: Payload | None = None,
    *,
    roles: Sequence[str] | None = None,
) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """``(event, payload)`` pairs that ``machine`` takes from ``state`` with ``context``:
    the event is allowed (its guards evaluated on the context and the payload) and the
    payload fits the event's schema; with ``roles``, only events one of these roles may
    fire (an event that names no roles is anyone's). Shrinks towards the first event
    declared."""
    ctx = dict(context or {})

    @st.composite
    def pairs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
        found = _draw_legal(draw, machine, state, ctx, roles)
        hypothesis.assume(found is not None)
        assert found is not None
        return found

    return pairs()


# -- running ----------------------------------------------------------------------------------


def _child_events(kids: Sequence[WorkflowType]) -> frozenset[str]:
    """The events children of these types send their parent as they end."""
    names = {CHILD_DONE, CHILD_FAILED}
    for kid in kids:
        names |= set(kid.parent_events.values())
    return frozenset(names) if kids else frozenset()


def _sendable(model: _Model, row: WorkflowRow) -> bool:
    events = _candidates(model.machine, row.state, row.context, model.roles)
    return any(e not in model.own_events for e in events)


def _run_sync(fn: Callable[[], T]) -> T:
    """``fn()``, in another thread when this one runs an event loop (an async test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        in_loop = False
    else:
        in_loop = True
    if not in_loop:  # (outside the except block: a failure must not chain to this error)
        return fn()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def _as_type(target: WorkflowType | Machine) -> WorkflowType:
    return target if isinstance(target, WorkflowType) else WorkflowType(target)


def _make(target: Target) -> WorkflowType:
    if isinstance(target, WorkflowType | Machine):
        return _as_type(target)
    made = target()
    if not isinstance(made, WorkflowType | Machine):
        raise TypeError(f"the factory returned {type(made).__name__}, not a WorkflowType")
    return _as_type(made)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def _snapshot(row: WorkflowRow) -> tuple[Any, ...]:
    return (row.state, row.version, _text(row.context), row.terminal, row.next_due_at)


@dataclass
class _Model:
    """One example: a fresh engine, one workflow, and the steps taken so far."""

    wtype: WorkflowType
    engine: Engine
    clock: ManualClock
    worker: Worker
    invariants: Sequence[Invariant]
    max_settle_rounds: int
    roles: Roles
    steps: list[str] = field(default_factory=list)
    own_events: frozenset[str] = frozenset()
    """Events the workflow's children send it (never sent by the model)."""

    @property
    def machine(self) -> Machine:
        return self.wtype.machine

    def fail(self, message: str) -> ModelCheckFailure:
        return ModelCheckFailure(message, self.steps)

    async def row(self) -> WorkflowRow:
        return await self.engine.get(WORKFLOW_ID)

    async def tree(self, workflow_id: str = WORKFLOW_ID) -> list[WorkflowRow]:
        """The workflow's descendants (its children, theirs...), parents first."""
        out: list[WorkflowRow] = []
        for child in await self.engine.store.children(workflow_id, limit=10_000):
            out += [child, *await self.tree(child.id)]
        return out

    async def verify(self, row: WorkflowRow) -> None:
        """The checks made after every step."""
        await self.engine.check(WORKFLOW_ID)  # ReplayMismatch if replay differs from the row
        await settled(self.engine.runtime)  # an ended parent's cascade to its children
        for child in await self.tree():
            await self.engine.check(child.id)
            if row.terminal and self.wtype.children_on_end == "cancel" and not child.terminal:
                parent = await self.engine.get(child.parent or WORKFLOW_ID)
                if parent.terminal and child.cancel is None:
                    raise AssertionError(
                        f"child {child.id!r} is live in {child.state!r} after its parent "
                        f"ended in {parent.state!r}: orphaned"
                    )
        if row.state not in self.machine.states:
            raise AssertionError(f"the workflow is in {row.state!r}, not a state of the machine")
        if row.terminal != self.machine.is_terminal(row.state):
            raise AssertionError(f"row.terminal is {row.terminal} in state {row.state!r}")
        for invariant in self.invariants:
            result = invariant(row)
            if inspect.isawaitable(result):
                result = await result
            if result is False:
                name = getattr(invariant, "__name__", repr(invariant))
                raise AssertionError(f"invariant {name} returned False on {row!r}")

    async def refused(self, row: WorkflowRow, event: str, payload: Payload) -> None:
        """``event`` must be refused and change nothing."""
        try:
            after = (await self.engine.send(WORKFLOW_ID, event, payload, actor="model")).row
        except REFUSED:
            pass
        else:
            raise AssertionError(
                f"{event!r} should be refused in {row.state!r} but took the workflow to "
                f"{after.state!r}"
            )
        now = await self.row()
        if _snapshot(now) != _snapshot(row):
            raise AssertionError(f"the refused {event!r} changed the workflow: {now!r}")
        if len(await self.engine.history(WORKFLOW_ID)) != row.version:
            raise AssertionError(f"the refused {event!r} added to the log")

    async def send(self, row: WorkflowRow, event: str, payload: Payload) -> WorkflowRow:
        expected = self.machine.resolve(row.state, event, row.context, payload).target
        self.steps.append(f"send {event} {_text(payload)}   # {row.state} -> {expected}")
        sent = await self.engine.send(WORKFLOW_ID, event, payload, actor="model")
        after = sent.row
        if after.state != expected or after.version != row.version + 1:
            raise AssertionError(
                f"{event!r} from {row.state!r} went to {after.state!r} (v{after.version}), "
                f"the machine says {expected!r} (v{row.version + 1})"
            )
        return after

    async def settle(self, row: WorkflowRow) -> WorkflowRow:
        try:
            await self.worker.run_until_idle(max_rounds=self.max_settle_rounds)
        except RuntimeError as exc:
            raise AssertionError(f"handlers did not settle: {exc}") from None
        after = await self.row()
        trail = [
            f"{t.from_state} --{t.event}--> {t.to_state}"
            for t in await self.engine.history(WORKFLOW_ID, after_version=row.version)
        ]
        self.steps[-1] += f"   # {'; '.join(trail) or 'nothing happened'}"
        return after


async def _example(
    data: st.DataObject,
    target: Target,
    inputs: st.SearchStrategy[Payload],
    invariants: Sequence[Invariant],
    max_steps: int,
    max_settle_rounds: int,
    roles: Roles,
    children: Sequence[Target] = (),
) -> None:
    wtype = _make(target)
    kids = [_make(c) for c in children]
    clock = ManualClock()
    engine = Engine(SQLiteStore(":memory:"), [wtype, *kids], clock=clock)
    async with engine:
        worker = Worker(engine, threads=1)
        model = _Model(wtype, engine, clock, worker, invariants, max_settle_rounds, roles)
        model.own_events = _child_events(kids)
        try:
            await _drive(model, data, inputs, max_steps)
        except ModelCheckFailure:
            raise
        except Exception as exc:
            raise model.fail(f"{type(exc).__name__}: {exc}") from exc
        finally:
            worker.executor.shutdown(wait=True, cancel_futures=True)


async def _drive(
    model: _Model, data: st.DataObject, inputs: st.SearchStrategy[Payload], max_steps: int
) -> None:
    machine = model.machine
    start_input = data.draw(inputs, label="input")
    model.steps.append(f"start {_text(start_input)}   # in {machine.initial.name}")
    started = await model.engine.start(model.wtype.name, start_input, workflow_id=WORKFLOW_ID)
    row = started.row
    await model.verify(row)
    for step in range(max_steps):
        if row.terminal:
            break
        # One event that is not allowed now must be refused. Taken in turn, not drawn: a
        # draw would be one more choice for the shrinker to work through at every step.
        illegal = [e for e in machine.events if _refuses(machine, row.state, e, row.context)]
        if illegal:
            await model.refused(row, illegal[step % len(illegal)], {})
        now = model.clock.now()
        due = row.next_due_at
        kinds = []
        if due is not None and due <= now:
            kinds.append("run handlers")
        if _sendable(model, row):
            kinds.append("send")
        if due is not None and due > now:
            kinds.append("wait")
        if not kinds:
            return  # nothing due, nothing allowed: it waits for an operator
        kind = data.draw(st.sampled_from(kinds), label="step")
        if kind == "send":
            found = _draw_legal(
                data.draw, machine, row.state, row.context, model.roles, skip=model.own_events
            )
            if found is None:
                continue
            row = await model.send(row, *found)
        elif kind == "run handlers":
            model.steps.append(f"run handlers in {row.state}")
            row = await model.settle(row)
        else:
            assert due is not None
            model.clock.advance(due - now)
            model.steps.append(f"wait {due - now:g}s in {row.state}")
            row = await model.settle(row)
        await model.verify(row)
    if row.terminal:
        # Terminal states are final: every event is refused and changes nothing.
        for event in machine.events:
            await model.refused(row, event, {})


DEFAULT_SETTINGS = hypothesis.settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
"""What :func:`check_machine` runs with unless given ``settings``."""


def check_machine(
    target: Target,
    *,
    invariants: Iterable[Invariant] = (),
    inputs: Payload | st.SearchStrategy[Payload] | None = None,
    max_steps: int = 30,
    settings: hypothesis.settings | None = None,
    max_settle_rounds: int = 50,
    roles: Sequence[str] | None = None,
    children: Iterable[Target] = (),
) -> None:
    """Fire random legal events at a workflow type and check it after every step.

    Each example starts one workflow (with ``inputs``, a context or a strategy of them) on a
    fresh in-memory engine with a :class:`~statewright.clock.ManualClock`, then takes up to
    ``max_steps`` steps, each one of:

    - **send** a legal event (:func:`legal_events`: allowed now, guards evaluated, payload
      drawn from its schema; with ``roles``, only events those roles may fire, e.g.
      ``roles=["approver"]`` leaves the system's events to the handlers and timers); the
      row must move to the target the machine names;
    - **run handlers**, when the workflow is due: the real worker runs them until nothing is
      due (more than ``max_settle_rounds`` rounds fails: a loop of transitions);
    - **wait**, when a timer or a retry is due later: the clock jumps to it, and the worker
      runs what fell due.

    So external events race the handlers, and timers fire at any point. Before each step an
    event that cannot be taken now is sent and must be refused with IllegalTransition,
    changing nothing; in a terminal state every event must be. After each step: replaying
    the log gives the row (``Engine.check``), and each invariant holds (``invariant(row)``
    raises AssertionError or returns False otherwise).

    ``children``: the types of the child workflows it starts (``Run.start_child``). They
    run on the same engine, moved by their handlers when the worker runs; the events they
    send the parent as they end (``child_done``, ``child_failed`` and their
    ``parent_events``) come from them alone, never from the model. After every step every
    workflow of the tree must replay to its row too, and once the parent has ended (with
    ``children_on_end="cancel"``) no child of an ended parent may be left live: orphaned.

    Raises :class:`ModelCheckFailure` (an AssertionError) for the simplest failing example
    hypothesis finds, listing its steps. Works from sync and async tests alike (the engine
    runs in its own event loop). ``settings``: hypothesis settings (default
    :data:`DEFAULT_SETTINGS`: 100 examples, no example database); the deadline is always off.
    """
    if isinstance(inputs, st.SearchStrategy):
        input_strategy: st.SearchStrategy[Payload] = inputs
    else:
        input_strategy = st.just(dict(inputs or {}))
    checks = list(invariants)
    kids = list(children)
    base = settings or DEFAULT_SETTINGS
    # No "explain" phase: it traces coverage (slow) to name lines of the engine.
    phases = [p for p in base.phases if p is not hypothesis.Phase.explain]
    chosen = hypothesis.settings(base, deadline=None, phases=phases)
    if not isinstance(target, WorkflowType | Machine) and not callable(target):
        raise TypeError("check_machine needs a WorkflowType, a Machine or a factory of one")

    @chosen
    @hypothesis.given(data=st.data())
    def explore(data: st.DataObject) -> None:
        asyncio.run(
            _example(
                data, target, input_strategy, checks, max_steps, max_settle_rounds, roles, kids
            )
        )

    _run_sync(explore)
