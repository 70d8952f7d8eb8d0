"""One claimed workflow in a worker: fire its due timer, or run its handler and persist the
outcome (the next event, a retry, a cancel, parking).

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

from statewright.engine import tracecontext
from statewright.engine.cancel import cancel_reason, deliver_pending, fire_cancel, pending
from statewright.engine.failures import describe, handle_failure
from statewright.engine.looplag import user_code
from statewright.engine.steps import Run, SyncRun, is_async
from statewright.engine.timers import rearmed as rearmed_timer
from statewright.engine.timers import timer_actor
from statewright.engine.transitions import Defer, Fire
from statewright.engine.workflow_type import Handler, HandlerResult, Next, WorkflowType
from statewright.errors import (
    Cancelled,
    DeadlineExceeded,
    FatalError,
    IllegalTransition,
    InvalidPayload,
    LeaseLost,
    VersionConflict,
)
from statewright.types import CancelRequest, Lease, TimerRecord, WorkflowRow

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
    lease = slot.lease
    # An unknown version keeps its lease: released, this worker would claim it again at once;
    # held, it expires and a worker that knows the version recovers it.
    wtype = rt.registry.type_of(row.type, row.machine_version)
    if w.stopping:  # claimed but not started: hand it back so another worker takes it now
        await store.release_lease(row.id, lease)
        return None
    if row.cancel is not None:
        request = await pending(rt, wtype, row.id, row.state, row.cancel)
        if request is not None:
            try:
                await fire_cancel(
                    rt, row, wtype, request, request.actor or w.actor, park=False, lease=lease
                )
                return None
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
        await _fire_timer(w, wtype, row, due[0], lease, handler is not None)
        return None
    if handler is None or row.next_due_at is None or row.next_due_at > now:
        # Nothing to run (a timer was consumed meanwhile): re-arm from the pending timers.
        try:
            rearmed = await rt.transitions.let_go(row, lease)
        except VersionConflict:
            await store.release_lease(row.id, lease)
            return None
        except LeaseLost:
            return None
        await after_write(w, wtype, rearmed)
        return None
    if w.stopping:
        await store.release_lease(row.id, lease)
        return None
    # Its span joins the trace stored with the workflow; the outcome's transition is made
    # inside it, so the next handler's span is this one's child.
    with tracecontext.handler_span(row):
        return await _run_handler(w, slot, wtype, handler)


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


async def _fire_timer(
    w: Host,
    wtype: WorkflowType,
    row: WorkflowRow,
    timer: TimerRecord,
    lease: Lease,
    has_handler: bool,
) -> None:
    """Fire a due timer: its event as a transition that consumes it (a recurring one is
    re-armed for its next interval in the same transaction when the workflow stays).

    A refused event fails the workflow for a one-shot timer; a recurring timer's refusal is
    logged as a rejection and the timer is consumed and re-armed without a transition (a
    guard that does not pass yet is the usual case: "check again later")."""
    rt = w.rt
    store = rt.store
    rearm = rearmed_timer(timer, rt.clock.now())
    try:
        after = await rt.transitions.fire(
            row,
            Fire(
                timer.event,
                timer.payload,
                timer_actor(timer),  # "timer", or "timer for <who scheduled it>"
                fired_timer=timer.id,
                rearm=rearm,
                lease=lease,
            ),
        )
    except VersionConflict:
        await store.release_lease(row.id, lease)
        return
    except LeaseLost:
        return
    except (IllegalTransition, InvalidPayload) as exc:
        if rearm is None:
            failed = FatalError(f"timer {timer.event!r}: {exc}")
            await after_write(w, wtype, await handle_failure(rt, row, failed, lease=lease))
            return
        # A handler's retry owed (a failure's backoff) may hide behind this timer's due time
        # (next_due_at keeps only the earlier): run it now rather than lose it.
        owed = has_handler and row.attempts > 0 and row.parked is None
        try:
            kept = await rt.transitions.defer(
                row,
                Defer(
                    attempts=row.attempts,
                    next_due_at=rt.clock.now() if owed else None,
                    last_error=row.last_error,
                    parked=row.parked,
                    lease=lease,
                    fired_timer=timer.id,
                    add_timers=(rearm,),
                ),
            )
        except VersionConflict:
            await store.release_lease(row.id, lease)
            return
        except LeaseLost:
            return
        await after_write(w, wtype, kept)
        return
    await after_write(w, wtype, after)


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
    return asyncio.ensure_future(_settle(threaded, label))


async def _settle(threaded: asyncio.Future[Any], label: str) -> HandlerResult:
    result = await threaded
    if asyncio.iscoroutine(result):  # a plain function that returned a coroutine
        result = await user_code(label, result)
    return result  # type: ignore[no-any-return]


async def _run_handler(
    w: Host, slot: Slot, wtype: WorkflowType, handler: Handler
) -> WorkflowRow | None:
    """Run the handler and write its outcome; the row to chain on (see :func:`process`)."""
    rt, store, row = w.rt, w.rt.store, slot.row
    lease = slot.lease
    run = slot.run = Run(rt, wtype, row, executor=w.executor)
    # The last step's done record rides with the transition the handler returns; anything
    # else the handler does, and every other way this run ends, writes it first.
    run.carry_done = True
    slot.runs += 1
    deadline = wtype.deadline_for(row.state)
    slot.deadline = time.monotonic() + deadline
    slot.handler = _start(w, slot, run, handler)
    slot.timer = asyncio.get_running_loop().call_later(deadline, slot.time_out)
    try:
        result = await slot.handler
    except Cancelled as exc:
        tracecontext.note(outcome="cancelled")
        await run.flush()
        if slot.abandoned and not slot.killed_for_cancel and run.cancel_request is None:
            # The handler turned the worker's shutdown into Cancelled: that stops the worker,
            # not the workflow.
            await store.release_lease(row.id, lease)
            return None
        await _cancelled(w, slot, wtype, cancel_reason(exc))
        return None
    except asyncio.CancelledError:
        me = asyncio.current_task()
        if me is not None and me.cancelling():
            raise  # this task itself is being cancelled, not just the handler
        tracecontext.note(outcome="stopped")
        await _stopped(w, slot, wtype)
        return None
    except LeaseLost:
        tracecontext.note(outcome="lease_lost")
        _log_lost(slot)
        return None
    except Exception as exc:
        tracecontext.failed(exc)
        if slot.lost:
            _log_lost(slot)
            return None
        log.warning(
            "handler failed",
            extra={
                "action": "handler_failed",
                "workflow_id": row.id,
                "state": row.state,
                "error": describe(exc),
            },
        )
        await run.flush()
        await after_write(w, wtype, await handle_failure(rt, row, exc, lease=lease))
        return None
    finally:
        slot.end()
    if slot.lost:
        _log_lost(slot)
        return None
    taken = tuple(run.taken)
    if result is None:
        tracecontext.note(outcome="idle")
        try:
            await run.flush()
            idle = await rt.transitions.defer(
                row,
                Defer(
                    attempts=0,
                    lease=lease,
                    consume_inputs=taken,
                    add_timers=run.scheduled,
                    cancel_timer_keys=run.cancelled_timers,
                ),
            )
        except VersionConflict:
            await store.release_lease(row.id, lease)
            return None
        except LeaseLost:
            _log_lost(slot)
            return None
        await after_write(w, wtype, idle)
        return None
    chain = w.may_chain(slot)
    try:
        nxt = Next(result) if isinstance(result, str) else result
        tracecontext.note(outcome="next", event=nxt.event)
        after = await rt.transitions.fire(
            row,
            Fire(
                nxt.event,
                nxt.payload,
                w.actor,
                context_patch=nxt.context,
                attempts=0,
                lease=lease,
                consume_inputs=taken,
                add_timers=run.scheduled,
                cancel_timer_keys=run.cancelled_timers,
                step_finish=run.pending_finish,
                keep_lease_if_due=chain,
            ),
        )
    except VersionConflict:
        # Someone moved the workflow meanwhile (an external event): this result is dropped,
        # and the inputs the run took stay for the next run. The finished step stays done.
        await run.flush()
        await store.release_lease(row.id, lease)
        return None
    except LeaseLost:
        _log_lost(slot)
        return None
    except (IllegalTransition, InvalidPayload) as exc:
        await run.flush()
        failed = FatalError(f"handler returned {exc.message}")
        tracecontext.failed(failed)
        await after_write(w, wtype, await handle_failure(rt, row, failed, lease=lease))
        return None
    except Exception:
        # The transition failed (a store error; or its outcome is unknown): record the step's
        # outcome on its own if that can still be done. If not, the step stays *executing*
        # and is reconciled before the handler runs again, as after a crash.
        try:
            await run.flush()
        except Exception:
            log.warning(
                "step outcome not recorded",
                exc_info=True,
                extra={"action": "step_finish_failed", "workflow_id": row.id},
            )
        raise
    run.carried()
    if chain and after.lease == lease:
        return after  # the next state's handler runs under this claim
    await after_write(w, wtype, after)
    return None


async def _stopped(w: Host, slot: Slot, wtype: WorkflowType) -> None:
    """The handler's task was cancelled by the worker: say why, and write what follows."""
    rt, row = w.rt, slot.row
    if slot.lost:
        _log_lost(slot)
    elif slot.timed_out:
        # A deadline hit: the outcome of what it was doing is unknown; its unfinished steps
        # are left executing and get reconciled before anything runs again.
        exc = DeadlineExceeded(
            f"the handler of {row.state!r} ran past its deadline of "
            f"{wtype.deadline_for(row.state):g}s"
        )
        log.warning(
            "handler deadline exceeded",
            extra={"action": "handler_deadline", "workflow_id": row.id, "state": row.state},
        )
        await _flush(slot)
        after = await handle_failure(rt, row, exc, lease=slot.lease)
        await after_write(w, wtype, after)
    elif slot.killed_for_cancel:
        await _flush(slot)
        await _cancelled(w, slot, wtype, None)
    else:
        # Shutdown grace expired: leave the workflow as it is for another worker; steps the
        # handler left *executing* are reconciled when it runs again.
        log.warning(
            "handler cancelled at shutdown",
            extra={"action": "handler_abandoned", "workflow_id": row.id, "state": row.state},
        )
        await _flush(slot)
        await rt.store.release_lease(row.id, slot.lease)


async def _flush(slot: Slot) -> None:
    """Write the run's pending done record (a finished step) before what follows."""
    if slot.run is not None:
        await slot.run.flush()


def _log_lost(slot: Slot) -> None:
    log.warning(
        "lease lost: the run's outcome is left to the worker that took the workflow over",
        extra={"action": "run_dropped", "workflow_id": slot.row.id, "state": slot.row.state},
    )


async def _cancelled(w: Host, slot: Slot, wtype: WorkflowType, reason: str | None) -> None:
    assert slot.run is not None
    request = slot.run.cancel_request
    reason = reason or (request.reason if request else None) or "cancelled by its handler"
    actor = request.actor if request and request.actor else w.actor
    log.info(
        "handler cancelled",
        extra={
            "action": "handler_cancelled",
            "workflow_id": slot.row.id,
            "state": slot.row.state,
            "reason": reason,
            "forced": slot.killed_for_cancel,
        },
    )
    delivered = CancelRequest(
        reason,
        actor,
        request.at if request else None,
        request.version if request else None,
        request.idempotency_key if request else None,
    )
    await fire_cancel(
        w.rt,
        slot.row,
        wtype,
        delivered,
        actor,
        slot.run.partial,
        lease=slot.lease,
        consume_inputs=tuple(slot.run.taken),
    )


async def after_write(w: Host, wtype: WorkflowType, row: WorkflowRow | None) -> None:
    await deliver_pending(w.rt, wtype, row, w.actor)
