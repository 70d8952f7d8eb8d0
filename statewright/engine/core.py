"""The engine: the public front over the engine's parts.

:class:`Engine` builds one :class:`~statewright.engine.runtime.Runtime` (the store, the
registered types, the clock, the input limits, the observers, and
:class:`~statewright.engine.transitions.Transitions`, the one way a row changes) and forwards
each operation to the part that does it, a function of that runtime:

- :mod:`~statewright.engine.commands`: start, send, approve/deny, cancel, post an input;
- :mod:`~statewright.engine.operator` and :mod:`~statewright.engine.fork`: resolve a step,
  resume, move, patch the context, migrate, fork;
- :mod:`~statewright.engine.timers` and :mod:`~statewright.engine.schedules`: per-workflow
  timers and cron schedules;
- :mod:`~statewright.engine.reads` and :mod:`~statewright.engine.replay`: reads, stuck and
  parked workflows, replay and the check of a row against its log;
- :mod:`~statewright.engine.retention`: prune and import.

An operation is written once, in its part, with its signature and docstring; the engine names
it (``send = part(commands.send)``) and ``engine.send(...)`` is ``commands.send(runtime,
...)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from functools import partial
from types import MethodType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

from statewright.clock import Clock
from statewright.definition.machine import Machine
from statewright.engine import bulk as bulking
from statewright.engine import children, commands, operator, reads, retention, subscription_ops
from statewright.engine import fork as forking
from statewright.engine import replay as replaying
from statewright.engine import schedules as schedule_ops
from statewright.engine import timers as timer_ops
from statewright.engine.commands import (
    Posted,
    Started,
    check_idempotency_key,
    decision_payload,
    id_for_key,
)
from statewright.engine.hooks import Observers
from statewright.engine.operator import MAX_REASON, Migration
from statewright.engine.reads import ParkedTotal, Stuck, StuckTotal
from statewright.engine.registry import Registry
from statewright.engine.replay import Replayed
from statewright.engine.runtime import Runtime, Settings
from statewright.engine.transitions import FORK_EVENT, Dispatched, Transitions
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import StatewrightError
from statewright.jsonvalue import Limits
from statewright.store.protocol import FullStore as Store

P = ParamSpec("P")
R = TypeVar("R")


class part(Generic[P, R]):
    """An :class:`Engine` method that is a function of the engine's runtime.

    ``send = part(commands.send)`` makes ``engine.send(...)`` call ``commands.send(
    engine.runtime, ...)``, with that function's signature, types and docstring. The bound
    method is kept on the instance at first use, so later calls cost a plain attribute
    lookup. (Hand-written because 48 forwarding methods would re-spell every argument of
    every operation: the issue this module was split to remove.)
    """

    def __init__(self, fn: Callable[Concatenate[Runtime, P], R]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.name = fn.__name__

    def __set_name__(self, owner: type[object], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, engine: None, owner: type[object]) -> part[P, R]: ...

    @overload
    def __get__(self, engine: Engine, owner: type[object]) -> Callable[P, R]: ...

    def __get__(self, engine: Engine | None, owner: type[object]) -> part[P, R] | Callable[P, R]:
        if engine is None:
            return self
        bound = cast(Callable[P, R], MethodType(self.fn, engine.runtime))
        engine.__dict__[self.name] = bound
        return bound


class Engine:
    """Runs workflows of registered types on a store.

    Args:
        store: where everything is persisted (opened by :meth:`open` / ``async with``).
        types: workflow types to register.
        clock: time source; inject :class:`~statewright.clock.ManualClock` in tests.
        default_stuck_after: threshold for states that declare no ``stuck_after``.
        row_cache_size: recently seen rows kept to plan external events on without a read
            (a stale one costs a refused write and a re-read; 0 disables it).
        limits: the input policy: how deep and how large one JSON value (an input, payload,
            context patch, inbox payload, step result or progress report) may be; checked
            before anything is stored (:class:`~statewright.jsonvalue.Limits`, default 64
            levels and 256 KiB).
        allow_compatible_changes: accept (and record anew) a machine version whose definition
            only gained states, events or edges since the store recorded it; by default any
            change to a recorded version is refused at :meth:`open`.
    """

    def __init__(
        self,
        store: Store,
        types: Iterable[WorkflowType | Machine] = (),
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        default_stuck_after: float = 86400.0,
        row_cache_size: int = 4096,
        limits: Limits | None = None,
        allow_compatible_changes: bool = False,
    ) -> None:
        optional: dict[str, Any] = {"clock": clock, "rng": rng, "limits": limits}
        self.runtime = Runtime(
            store,
            Registry(types),
            settings=Settings(default_stuck_after, allow_compatible_changes),
            row_cache_size=row_cache_size,
            **{k: v for k, v in optional.items() if v is not None},
        )
        """The engine's parts, shared by everything that runs its workflows."""
        # A workflow this process ends has its live children cancelled (children.py).
        self.runtime.transitions.on_end = partial(children.ended, self.runtime)

    # -- what the parts share (read-only) ------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def clock(self) -> Clock:
        return self.runtime.clock

    @property
    def limits(self) -> Limits:
        return self.runtime.limits

    @property
    def observers(self) -> Observers:
        return self.runtime.observers

    @property
    def transitions(self) -> Transitions:
        return self.runtime.transitions

    @property
    def rng(self) -> random.Random:
        return self.runtime.rng

    @property
    def default_stuck_after(self) -> float:
        return self.runtime.settings.default_stuck_after

    # -- registry ------------------------------------------------------------------------------

    def register(self, *types: WorkflowType | Machine) -> None:
        """Register workflow types (see :meth:`Registry.register
        <statewright.engine.registry.Registry.register>`)."""
        self.runtime.registry.register(*types)

    @property
    def types(self) -> list[WorkflowType]:
        """The latest registered version of each type."""
        return self.runtime.registry.types

    def type_of(self, name: str, version: int | None = None) -> WorkflowType:
        """A type's latest version, or the one asked; raises UnknownWorkflowType."""
        return self.runtime.registry.type_of(name, version)

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the store, then check every registered machine version against the definition
        the store recorded for it (recording it the first time): a version whose definition
        changed is refused with :class:`DefinitionChanged` naming the machine, unless the
        change only adds and ``allow_compatible_changes`` is set (then the new one is
        recorded)."""
        rt = self.runtime
        await rt.store.open()
        try:
            await rt.registry.record(
                rt.store, rt.clock, allow_compatible=rt.settings.allow_compatible_changes
            )
        except BaseException:
            await rt.store.close()
            raise

    async def close(self) -> None:
        await children.settled(self.runtime)  # an ended parent's cascade, if one is running
        await self.runtime.store.close()

    async def __aenter__(self) -> Engine:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- commands (statewright.engine.commands) ------------------------------------------------

    start = part(commands.start)
    send = part(commands.send)
    approve = part(commands.approve)
    deny = part(commands.deny)
    decide = part(commands.decide)
    cancel = part(commands.cancel)
    post_input = part(commands.post_input)

    # -- operator actions (statewright.engine.operator, statewright.engine.fork) --------------

    resolve_step = part(operator.resolve_step)
    resume = part(operator.resume)
    move_to = part(operator.move_to)
    patch_context = part(operator.patch_context)
    migrate = part(operator.migrate)
    fork = part(forking.fork)
    bulk = part(bulking.bulk)

    # -- timers and schedules (statewright.engine.timers, statewright.engine.schedules) -------

    schedule = part(timer_ops.schedule)
    cancel_timer = part(timer_ops.cancel)
    timers = part(timer_ops.listing)
    schedule_start = part(schedule_ops.put)
    schedules = part(schedule_ops.listing)
    get_schedule = part(schedule_ops.get)
    unschedule = part(schedule_ops.remove)
    pause_schedule = part(schedule_ops.pause)
    resume_schedule = part(schedule_ops.resume)
    fire_schedules = part(schedule_ops.fire_due)

    # -- subscriptions (statewright.engine.subscription_ops) -----------------------------------

    subscribe = part(subscription_ops.subscribe)
    subscriptions = part(subscription_ops.listing)
    subscription = part(subscription_ops.get)
    unsubscribe = part(subscription_ops.remove)
    pause_subscription = part(subscription_ops.pause)
    resume_subscription = part(subscription_ops.resume)

    # -- reads (statewright.engine.reads, statewright.engine.replay) ---------------------------

    get = part(reads.get)
    history = part(reads.history)
    steps = part(reads.steps)
    search_attributes = part(reads.search_attributes)
    allowed_events = part(reads.allowed_events)
    list_workflows = part(reads.list_workflows)
    stuck_threshold = part(reads.stuck_threshold)
    is_stuck = part(reads.is_stuck)
    stuck_cutoffs = part(reads.stuck_cutoffs)
    stuck = part(reads.stuck)
    stuck_counts = part(reads.stuck_counts)
    unregistered_counts = part(reads.unregistered_counts)
    parked_counts = part(reads.parked_counts)
    parked_totals = part(reads.parked_totals)
    replay = part(replaying.replay)
    check = part(replaying.check)
    check_archived = part(replaying.check_archived)

    # -- retention (statewright.engine.retention) ----------------------------------------------

    prune = part(retention.prune)
    import_archive = part(retention.import_archive)


__all__ = [
    "FORK_EVENT",
    "MAX_REASON",
    "Dispatched",
    "Engine",
    "Migration",
    "ParkedTotal",
    "Posted",
    "Replayed",
    "Started",
    "StatewrightError",
    "Stuck",
    "StuckTotal",
    "check_idempotency_key",
    "decision_payload",
    "id_for_key",
    "part",
]
