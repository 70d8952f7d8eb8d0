"""Waits that free the worker: ``run.sleep`` and ``run.wait_input`` suspend the workflow.

A handler that waits does not hold a worker slot and a lease for the wait. It raises
:class:`Suspended` (from :func:`sleep` or :func:`wait_input`); the worker writes the
suspension like going idle (the lease released, the state kept) with the wake time as the
workflow's next due time, and when the time comes, or an input is posted, **the handler runs
again from its start**. Its completed steps return their stored results, and the inputs it
had taken are taken again (a suspension consumes none: the inbox is the durable record, and
they are consumed once, with the transition that ends the run that returns one).

A wait's deadline is durable: the first call records it as a ledger step named by the
state's *visit* (``$wait.v<version>.<n>``, ``$sleep.v<version>.<n>``; ``n`` the ordinal of
such calls in the handler run), so a re-run, on this worker or another after a crash, finds
the same deadline; a later visit of the same state (a new version) waits again. The ``$``
prefix is reserved: a user's step may not start with it.

This asks of a handler what steps already ask: it is deterministic up to its waits (the same
steps and waits in the same order on every run of one visit), and what it does outside steps
can happen again. What a suspended run registered for its transition (``run.emit``,
``run.transaction``) is dropped with it (the re-run registers it again); the timers it
scheduled are armed, like going idle (a timer's key makes that idempotent; ``after=`` is
counted from each run, so a deadline that must not move goes ``at=`` a time kept in a step).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from statewright.engine.changes import Defer
from statewright.engine.wakeup import listen
from statewright.errors import InvalidInput
from statewright.types import Lease, TimerSpec, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)


class Run(Protocol):
    """What a wait uses of :class:`~statewright.engine.steps.Run` (which imports this)."""

    rt: Runtime
    workflow: WorkflowRow
    taken: list[int]
    waits: int

    @property
    def id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def scheduled(self) -> tuple[TimerSpec, ...]: ...
    @property
    def cancelled_timers(self) -> tuple[str, ...]: ...
    def now(self) -> float: ...
    async def next_input(self, name: str | None = None) -> Any: ...
    async def check_cancel(self) -> None: ...
    async def engine_step(self, name: str, action: Callable[[Any], Any]) -> Any: ...


RESERVED_PREFIX = "$"
"""Steps the engine names for a run (a wait's deadline) start with it; a user's may not."""


class Suspended(BaseException):
    """Raised by a wait that cannot return yet: the worker suspends the workflow.

    A ``BaseException``, like :class:`asyncio.CancelledError`, so that a handler's ``except
    Exception`` does not swallow it: let it propagate. It is not a failure (not logged,
    counted or traced as one, and no retry attempt).

    Attributes:
        until: when the workflow is due again (epoch seconds); None: only an input wakes it.
        waits_for: ``"sleep"`` or ``"input"``.
        input_name: the input's name for a wait of one name (None: any input).
        taken: the inputs the run had taken (not ones to wake it for: it takes them again).
    """

    def __init__(
        self,
        until: float | None,
        waits_for: str,
        input_name: str | None = None,
        taken: tuple[int, ...] = (),
    ) -> None:
        super().__init__(until, waits_for, input_name)
        self.until = until
        self.waits_for = waits_for
        self.input_name = input_name
        self.taken = taken


def defer(run: Run, lease: Lease | None, exc: Suspended) -> Defer:
    """The write of a suspension: the state kept, the lease released, due at ``exc.until``
    (or now, for a wait whose input was posted while the run held the lease), no input
    consumed, the run's timers armed; its messages and transactional steps dropped."""
    log.info(
        "handler suspended",
        extra={
            "action": "handler_suspended",
            "workflow_id": run.id,
            "state": run.state,
            "waits_for": exc.waits_for,
            "until": exc.until,
        },
    )
    wake = (exc.input_name, exc.taken) if exc.waits_for == "input" else None
    return Defer(
        attempts=0,
        next_due_at=exc.until,
        lease=lease,
        add_timers=run.scheduled,
        cancel_timer_keys=run.cancelled_timers,
        wake_input=wake,
    )


def _name(run: Run, kind: str) -> str:
    """The ledger name of this run's next wait (the visit, then the wait's ordinal)."""
    n = run.waits
    run.waits = n + 1
    return f"{RESERVED_PREFIX}{kind}.v{run.workflow.version}.{n}"


async def deadline(run: Run, kind: str, seconds: float) -> float:
    """The wait's durable deadline: recorded by its first call (now + ``seconds``), read back
    by every later run of the handler in this visit."""
    name = _name(run, kind)
    at = run.now() + seconds

    def record(_key: Any) -> float:
        return at

    stored = await run.engine_step(name, record)
    return float(stored)


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidInput(f"{what} must be a non-negative number of seconds, not {value!r}")
    return float(value)


async def sleep(run: Run, seconds: float) -> None:
    """:meth:`Run.sleep`: return once the durable deadline has passed, else suspend."""
    seconds = _seconds(seconds, "a sleep")
    if seconds == 0:
        run.waits += 1  # the ordinal still counts it: a later wait keeps its name
        return
    until = await deadline(run, "sleep", seconds)
    if run.now() >= until:
        return
    raise Suspended(until, "sleep")


async def wait_input(
    run: Run,
    name: str | None,
    timeout: float | None,
    hold: float,
    poll_interval: float,
) -> Any:
    """:meth:`Run.wait_input`: the oldest input, None past the durable deadline; else wait
    up to ``hold`` seconds here, then suspend."""
    limit = None if timeout is None else _seconds(timeout, "a wait's timeout")
    hold = _seconds(hold, "a wait's hold")
    item = await run.next_input(name)
    if item is not None:
        run.waits += 1
        return item
    if limit == 0:
        run.waits += 1
        await run.check_cancel()
        return None
    until = None if limit is None else await deadline(run, "wait", limit)
    if until is None:
        run.waits += 1
    if hold > 0:
        item = await _hold(run, name, until, hold, poll_interval)
        if item is not None:
            return item
    else:
        await run.check_cancel()
    if until is not None and run.now() >= until:
        return None
    raise Suspended(until, "input", name, tuple(run.taken))


async def _hold(
    run: Run, name: str | None, until: float | None, hold: float, poll_interval: float
) -> Any:
    """Wait here (holding the slot) up to ``hold`` seconds or the deadline, for an input;
    woken by the store when one is posted, polling every ``poll_interval`` seconds."""
    store = run.rt.store
    if until is not None:
        hold = min(hold, until - run.now())
    end = time.monotonic() + hold
    while True:
        remaining = end - time.monotonic()
        waiter = await listen(store, min(remaining, poll_interval))
        try:
            item = await run.next_input(name)
            if item is not None:
                return item
            await run.check_cancel()
            if remaining <= 0:
                return None
            await waiter
        finally:
            waiter.cancel()
