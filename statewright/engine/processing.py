"""One claimed workflow in a worker: fire its due timer, or run its handler; what follows
(the next event, a retry, a cancel, parking...) is decided by
:mod:`statewright.engine.outcome` and written by :mod:`statewright.engine.settle`.

Every write here carries the claim's lease (:attr:`Slot.lease`): once another worker has
taken the workflow over, the store refuses it (:class:`~statewright.errors.LeaseLost`) and
the slot just ends, writing nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from statewright.engine import budgets, tracecontext
from statewright.engine.cancel import pending
from statewright.engine.looplag import user_code
from statewright.engine.outcome import cancel_outcome
from statewright.engine.outcome_kinds import Claim, Ended, FireTimer, LetGo, Release
from statewright.engine.settle import settle
from statewright.engine.steps import Run, is_async
from statewright.engine.suspend import Suspended
from statewright.engine.syncrun import SyncRun
from statewright.engine.timers import rearmed as rearmed_timer
from statewright.engine.timers import timer_actor
from statewright.engine.transitions import Fire
from statewright.engine.workflow_type import Handler, HandlerResult, Next
from statewright.errors import (
    BudgetExceeded,
    Cancelled,
    DeadlineExceeded,
    IllegalTransition,
    InvalidPayload,
    LeaseLost,
)
from statewright.types import Lease, TimerRecord, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime
    from statewright.store.protocol import Store

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    """A workflow this worker claimed, and its handler while one runs."""

    row: WorkflowRow
    task: asyncio.Task[None] | None = None
    """The whole processing of the workflow (never cancelled by the worker)."""
    run: Run | None = None
    handler: asyncio.Future[HandlerResult] | None = None
    """The handler alone: what a cancel request, a deadline, a lost lease or an expired
    shutdown grace cancels."""
    killer: asyncio.TimerHandle | None = None
    killed_for_cancel: bool = False
    abandoned: bool = False
    deadline: float | None = None
    """``time.monotonic()`` by which the handler must end (set when it starts)."""
    timer: asyncio.TimerHandle | None = None
    timed_out: bool = False
    lost: bool = False
    """The lease is gone (another worker took the workflow over): write nothing more."""
    runs: int = 0
    """Handlers run under this claim (a chain: see :func:`process`)."""
    claimed_at: float = 0.0
    """``time.monotonic()`` of the claim."""

    def __post_init__(self) -> None:
        self.claimed_at = time.monotonic()

    def chain_to(self, row: WorkflowRow) -> None:
        """Run the next handler under the same claim, on the row the transition returned."""
        self.row = row
        # ``run`` stays the finished run until the next one replaces it: the heartbeat may
        # hold this slot across an await and expects a run on a slot it saw running.
        self.handler = None
        self.killer = self.timer = None
        self.killed_for_cancel = self.timed_out = False
        self.deadline = None

    @property
    def own_write(self) -> bool:
        """``row`` came back from this claim's own transition (a chain), which armed no
        timer the handler asked for: see :func:`_due_timers`. ``run`` is still that
        handler's run here (a new one starts after the timers are looked at)."""
        return self.runs > 0 and self.run is not None and not self.run.scheduled

    @property
    def lease(self) -> Lease:
        lease = self.row.lease
        assert lease is not None, "a claimed row has a lease"
        return lease

    @property
    def running(self) -> bool:
        return self.handler is not None and not self.handler.done()

    def renewable(self, grace: float) -> bool:
        """Whether the heartbeat may still renew the lease: never past deadline + grace."""
        return self.deadline is None or time.monotonic() < self.deadline + grace

    def kill_after(self, grace: float) -> None:
        """Cancel the handler's task in ``grace`` seconds unless it ends first."""
        if self.killer is None and self.running:
            self.killer = asyncio.get_running_loop().call_later(grace, self._kill)

    def _kill(self) -> None:
        if self.running:
            assert self.handler is not None
            self.killed_for_cancel = True
            self.handler.cancel()

    def abandon(self) -> None:
        """Shutdown grace expired: cancel the handler, leave the workflow for another worker."""
        self.abandoned = True
        self._stop(LeaseLost(self.row.id, "the worker stopped"))

    def lose(self) -> None:
        """The lease is gone: stop the handler; its writes would be refused anyway."""
        if self.lost:
            return
        self.lost = True
        if self.running:  # otherwise its processing has just written (and released) already
            log.warning(
                "lease lost: stopping the handler",
                extra={
                    "action": "lease_lost",
                    "workflow_id": self.row.id,
                    "state": self.row.state,
                },
            )
        self._stop(LeaseLost(self.row.id))

    def time_out(self) -> None:
        """The handler ran past its deadline."""
        if self.running:
            self.timed_out = True
            self._stop(
                DeadlineExceeded(f"the handler of {self.row.state!r} ran past its deadline")
            )

    def _stop(self, why: BaseException) -> None:
        if self.run is not None and self.run.stopped is None:
            self.run.stopped = why  # a thread still running it gets this from every call
        if self.running:
            assert self.handler is not None
            self.handler.cancel()

    def end(self) -> None:
        for handle in (self.killer, self.timer):
            if handle is not None:
                handle.cancel()


class Host(Protocol):
    """What processing a claimed workflow needs of the worker that claimed it (a
    :class:`~statewright.engine.worker.Worker`)."""

    rt: Runtime
    processed: int
    """Handler runs (and timers fired) so far: each of a chain counts."""

    @property
    def executor(self) -> Executor:
        """Where synchronous user code runs."""

    @property
    def actor(self) -> str: ...

    @property
    def stopping(self) -> bool: ...

    def may_chain(self, slot: Slot) -> bool: ...


async def process(w: Host, slot: Slot) -> None:
    """Process a claimed workflow; while its handler's transition keeps the lease (the next
    state has a handler too: see :meth:`Worker.may_chain`), go on with the next state under
    the same claim."""
    while True:
        after = await _process_row(w, slot)
        if after is None or slot.lost or slot.abandoned:
            return
        w.processed += 1
        slot.chain_to(after)


async def _process_row(w: Host, slot: Slot) -> WorkflowRow | None:
    """Process ``slot.row``; the row to run the next handler on, if its transition kept
    the lease for it."""
    rt, store, row = w.rt, w.rt.store, slot.row
    # An unknown version keeps its lease: released, this worker would claim it again at once;
    # held, it expires and a worker that knows the version recovers it.
    wtype = rt.registry.type_of(row.type, row.machine_version)
    claim = Claim(rt, wtype, row, slot.lease, w.actor)
    if w.stopping:  # claimed but not started: hand it back so another worker takes it now
        return await settle(claim, Release())
    if row.cancel is not None:
        request = await pending(rt, wtype, row.id, row.state, row.cancel)
        if request is not None:
            try:
                actor = request.actor or w.actor
                return await settle(claim, cancel_outcome(claim, request, actor, park=False))
            except (IllegalTransition, InvalidPayload):
                pass  # a guard refuses it here: run as usual (the handler sees it too)
    now = rt.clock.now()
    handler = wtype.handlers.get(row.state)
    due = await _due_timers(store, slot, now)
    if handler is not None and row.next_due_at is not None:
        # The handler's run came due before these recurring timers did: it runs first, so a
        # timer recurring faster than the handler is claimed can never starve it.
        due = [t for t in due if t.every is None or t.due_at <= row.next_due_at]
    if due:
        return await settle(claim, _fire_timer(rt, due[0], slot.lease, handler is not None))
    if handler is None or row.next_due_at is None or row.next_due_at > now:
        # Nothing to run (a timer was consumed meanwhile): re-arm from the pending timers.
        return await settle(claim, LetGo())
    if w.stopping:
        return await settle(claim, Release())
    # Its span joins the trace stored with the workflow; the outcome's transition is made
    # inside it, so the next handler's span is this one's child.
    with tracecontext.handler_span(row):
        return await _run_handler(w, slot, claim, handler)


async def _due_timers(store: Store, slot: Slot, now: float) -> list[TimerRecord]:
    """The workflow's timers due by ``now``, read from the store; or none without reading,
    on a row this claim's own transition just returned whose ``next_due_at`` is that
    write's own time (the handler's run; it is the earliest of that and every pending
    timer, so no timer was due before the write) when the handler had armed none.

    What that skips is what a read a moment earlier would have seen: a timer coming due
    since the write, or scheduled since by another process, fires after this handler runs
    (or goes with the state it belonged to), as when it lands just after the read. A timer
    due at exactly the write's instant (a timer kept from an earlier state, on a clock that
    stood still) counts as not due yet."""
    row = slot.row
    if slot.own_write and row.next_due_at is not None and row.next_due_at >= row.updated_at:
        return []
    return [t for t in await store.timers(row.id) if t.due_at <= now]


def _fire_timer(rt: Runtime, timer: TimerRecord, lease: Lease, has_handler: bool) -> FireTimer:
    """Fire a due timer: its event as a transition that consumes it (a recurring one is
    re-armed for its next interval in the same transaction when the workflow stays).

    A refused event fails the workflow for a one-shot timer; a recurring timer's refusal is
    logged as a rejection and the timer is consumed and re-armed without a transition (a
    guard that does not pass yet is the usual case: "check again later"): see
    :func:`~statewright.engine.outcome.decide`."""
    fire = Fire(
        timer.event,
        timer.payload,
        timer_actor(timer),  # "timer", or "timer for <who scheduled it>"
        fired_timer=timer.id,
        rearm=rearmed_timer(timer, rt.clock.now()),
        lease=lease,
    )
    return FireTimer(fire, has_handler)


def _start(w: Host, slot: Slot, run: Run, handler: Handler) -> asyncio.Future[HandlerResult]:
    """Start the handler: ``async def`` on the loop, anything else in the thread pool."""
    label = f"handler {run.type.name}/{run.state} {run.id}"
    if is_async(handler):
        coro: Any = handler(run)
        return asyncio.ensure_future(user_code(label, coro))
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()  # the trace and other context variables go along
    sync_run = SyncRun(run, loop)
    threaded = loop.run_in_executor(w.executor, lambda: ctx.run(handler, sync_run))
    return asyncio.ensure_future(_threaded_result(threaded, label))


async def _threaded_result(threaded: asyncio.Future[Any], label: str) -> HandlerResult:
    result = await threaded
    if asyncio.iscoroutine(result):  # a plain function that returned a coroutine
        result = await user_code(label, result)
    return result  # type: ignore[no-any-return]


async def _run_handler(w: Host, slot: Slot, claim: Claim, handler: Handler) -> WorkflowRow | None:
    """Run the handler and write its outcome (:func:`~statewright.engine.settle.settle`);
    the row to chain on (see :func:`process`)."""
    rt, wtype, row = w.rt, claim.wtype, slot.row
    run = slot.run = claim.run = Run(rt, wtype, row, executor=w.executor)
    # The last step's done record rides with the transition the handler returns; anything
    # else the handler does, and every other way this run ends, writes it first.
    run.carry_done = True
    slot.runs += 1
    deadline = wtype.deadline_for(row.state)
    slot.deadline = time.monotonic() + deadline
    slot.handler = _start(w, slot, run, handler)
    slot.timer = asyncio.get_running_loop().call_later(deadline, slot.time_out)
    result: HandlerResult = None
    raised: BaseException | None = None
    stopped = False
    try:
        result = await slot.handler
    except Cancelled as exc:
        tracecontext.note(outcome="cancelled")
        raised = exc
    except BudgetExceeded as exc:
        # A budget of the type is reached (an agent's model call was refused): the outcome
        # is the budget's event, not a failure (see statewright.engine.budgets).
        result = Next(exc.event, budgets.payload(exc.budget, exc.totals))
    except asyncio.CancelledError:
        me = asyncio.current_task()
        if me is not None and me.cancelling():
            raise  # this task itself is being cancelled, not just the handler
        tracecontext.note(outcome="stopped")
        stopped = True
    except LeaseLost as exc:
        tracecontext.note(outcome="lease_lost")
        raised = exc
    except Suspended as exc:  # a BaseException: a wait that frees the worker, not a failure
        tracecontext.note(outcome="suspended")
        raised = exc
    except Exception as exc:
        tracecontext.failed(exc)
        raised = exc
    finally:
        slot.end()
    if raised is None and not stopped and not slot.lost:
        if result is None:
            tracecontext.note(outcome="idle")
        else:
            event = result if isinstance(result, str) else getattr(result, "event", None)
            tracecontext.note(outcome="next", event=event)
    ended = Ended(
        result,
        raised,
        stopped,
        lost=slot.lost,
        timed_out=slot.timed_out,
        killed_for_cancel=slot.killed_for_cancel,
        abandoned=slot.abandoned,
        chain=raised is None and not stopped and result is not None and w.may_chain(slot),
    )
    return await settle(claim, ended)
