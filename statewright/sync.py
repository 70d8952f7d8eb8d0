"""A plain synchronous entry for scripts: every async Engine method, called without await.

Derived from the async API (one implementation, no twin methods): each call runs the
coroutine on one private event loop that lives as long as the wrapper. Each operation is
named once here (``send = blocking(Engine.send)``) and keeps the engine's parameters, types and
docstring, so a type checker checks a script's calls as it checks ``await engine.send(...)``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

from statewright.clock import Clock
from statewright.definition.machine import Machine
from statewright.engine.core import Engine, part
from statewright.engine.worker import Worker
from statewright.engine.workflow_type import WorkflowType
from statewright.store.protocol import Store

P = ParamSpec("P")
R = TypeVar("R")


class blocking(Generic[P, R]):
    """An async :class:`Engine` operation, called on a :class:`SyncEngine` without ``await``.

    ``send = blocking(Engine.send)`` makes ``eng.send(...)`` run ``eng.engine.send(...)`` to
    completion on the wrapper's loop and return its result: the same parameters and types
    (``Engine.send``'s, less the ``Coroutine``). The engine's method is looked up at each
    call, as the engine has it then.
    """

    def __init__(self, operation: part[P, Coroutine[Any, Any, R]]) -> None:
        self.operation = operation
        self.__doc__ = operation.__doc__
        self.name = operation.name

    def __set_name__(self, owner: type[object], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, wrapper: None, owner: type[object]) -> blocking[P, R]: ...

    @overload
    def __get__(self, wrapper: SyncEngine, owner: type[object]) -> Callable[P, R]: ...

    def __get__(
        self, wrapper: SyncEngine | None, owner: type[object]
    ) -> blocking[P, R] | Callable[P, R]:
        if wrapper is None:
            return self
        method = cast(Callable[P, Coroutine[Any, Any, R]], getattr(wrapper.engine, self.name))
        runner = wrapper._runner

        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return runner.run(method(*args, **kwargs))

        return call


class forwarded(Generic[P, R]):
    """A synchronous :class:`Engine` operation, the same on a :class:`SyncEngine`."""

    def __init__(self, operation: part[P, R]) -> None:
        self.__doc__ = operation.__doc__
        self.name = operation.name

    def __set_name__(self, owner: type[object], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, wrapper: None, owner: type[object]) -> forwarded[P, R]: ...

    @overload
    def __get__(self, wrapper: SyncEngine, owner: type[object]) -> Callable[P, R]: ...

    def __get__(
        self, wrapper: SyncEngine | None, owner: type[object]
    ) -> forwarded[P, R] | Callable[P, R]:
        if wrapper is None:
            return self
        return cast(Callable[P, R], getattr(wrapper.engine, self.name))


class SyncEngine:
    """Wraps an :class:`~statewright.engine.Engine`; use as a context manager.

    Every operation of the engine is here, without ``await``; anything else of the engine is
    ``eng.engine``'s.

    Example:
        >>> from statewright import Engine, SQLiteStore
        >>> from statewright.definition.builtin import agent_task_machine
        >>> with SyncEngine(Engine(SQLiteStore(":memory:"), [agent_task_machine()])) as eng:
        ...     wf = eng.start("agent_task", {"goal": "triage"}, workflow_id="t1")
        ...     eng.send("t1", "start").row.state
        'running'
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._runner = asyncio.Runner()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run any coroutine on this wrapper's loop."""
        return self._runner.run(coro)

    def run_until_idle(self, **worker_options: Any) -> int:
        """Run a worker until nothing is due; returns how many workflows it processed."""
        return int(self.run(Worker(self.engine, **worker_options).run_until_idle()))

    def open(self) -> None:
        """:meth:`Engine.open <statewright.engine.Engine.open>`, blocking."""
        self.run(self.engine.open())

    def close(self) -> None:
        """:meth:`Engine.close <statewright.engine.Engine.close>`, blocking."""
        self.run(self.engine.close())

    def __enter__(self) -> SyncEngine:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            self._runner.close()

    # -- what the engine shares, and its registry ----------------------------------------------

    @property
    def store(self) -> Store:
        return self.engine.store

    @property
    def clock(self) -> Clock:
        return self.engine.clock

    @property
    def types(self) -> list[WorkflowType]:
        return self.engine.types

    def register(self, *types: WorkflowType | Machine) -> None:
        self.engine.register(*types)

    def type_of(self, name: str, version: int | None = None) -> WorkflowType:
        return self.engine.type_of(name, version)

    # -- commands ------------------------------------------------------------------------------

    start = blocking(Engine.start)
    send = blocking(Engine.send)
    approve = blocking(Engine.approve)
    deny = blocking(Engine.deny)
    decide = blocking(Engine.decide)
    cancel = blocking(Engine.cancel)
    bulk = blocking(Engine.bulk)
    post_input = blocking(Engine.post_input)

    # -- operator actions ----------------------------------------------------------------------

    resolve_step = blocking(Engine.resolve_step)
    resume = blocking(Engine.resume)
    move_to = blocking(Engine.move_to)
    patch_context = blocking(Engine.patch_context)
    migrate = blocking(Engine.migrate)
    fork = blocking(Engine.fork)

    # -- timers and schedules ------------------------------------------------------------------

    schedule = blocking(Engine.schedule)
    cancel_timer = blocking(Engine.cancel_timer)
    timers = blocking(Engine.timers)
    schedule_start = blocking(Engine.schedule_start)
    schedules = blocking(Engine.schedules)
    get_schedule = blocking(Engine.get_schedule)
    unschedule = blocking(Engine.unschedule)
    pause_schedule = blocking(Engine.pause_schedule)
    resume_schedule = blocking(Engine.resume_schedule)
    fire_schedules = blocking(Engine.fire_schedules)
    subscribe = blocking(Engine.subscribe)
    subscriptions = blocking(Engine.subscriptions)
    subscription = blocking(Engine.subscription)
    unsubscribe = blocking(Engine.unsubscribe)
    pause_subscription = blocking(Engine.pause_subscription)
    resume_subscription = blocking(Engine.resume_subscription)

    # -- reads ---------------------------------------------------------------------------------

    get = blocking(Engine.get)
    history = blocking(Engine.history)
    steps = blocking(Engine.steps)
    search_attributes = blocking(Engine.search_attributes)
    allowed_events = blocking(Engine.allowed_events)
    list_workflows = blocking(Engine.list_workflows)
    stuck_threshold = forwarded(Engine.stuck_threshold)
    is_stuck = forwarded(Engine.is_stuck)
    stuck_cutoffs = forwarded(Engine.stuck_cutoffs)
    stuck = blocking(Engine.stuck)
    stuck_counts = blocking(Engine.stuck_counts)
    unregistered_counts = blocking(Engine.unregistered_counts)
    parked_counts = blocking(Engine.parked_counts)
    parked_totals = blocking(Engine.parked_totals)
    replay = blocking(Engine.replay)
    check = blocking(Engine.check)
    check_archived = forwarded(Engine.check_archived)

    # -- retention -----------------------------------------------------------------------------

    prune = blocking(Engine.prune)
    import_archive = blocking(Engine.import_archive)
