"""One claimed workflow in a worker: fire its due timer, or run its handler and persist the
outcome (the next event, a retry, a cancel)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statewright.engine.cancel import cancel_reason, deliver_pending, fire_cancel, pending
from statewright.engine.failures import describe, handle_failure
from statewright.engine.steps import Run, maybe_await
from statewright.engine.workflow_type import Handler, HandlerResult, Next, WorkflowType
from statewright.errors import (
    Cancelled,
    FatalError,
    IllegalTransition,
    InvalidPayload,
    VersionConflict,
)
from statewright.types import WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.worker import Worker

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    """A workflow this worker claimed, and its handler while one runs."""

    row: WorkflowRow
    task: asyncio.Task[None] | None = None
    """The whole processing of the workflow (never cancelled by the worker)."""
    run: Run | None = None
    handler: asyncio.Task[HandlerResult] | None = None
    """The handler alone: what a cancel request or an expired shutdown grace cancels."""
    killer: asyncio.TimerHandle | None = None
    killed_for_cancel: bool = False
    abandoned: bool = False

    @property
    def running(self) -> bool:
        return self.handler is not None and not self.handler.done()

    def kill_after(self, grace: float) -> None:
        """Cancel the handler's task in ``grace`` seconds unless it ends first."""
        if self.killer is None and self.running:
            self.killer = asyncio.get_running_loop().call_later(grace, self._kill)

    def _kill(self) -> None:
        if self.handler is not None and not self.handler.done():
            self.killed_for_cancel = True
            self.handler.cancel()

    def abandon(self) -> None:
        """Shutdown grace expired: cancel the handler, leave the workflow for another worker."""
        self.abandoned = True
        if self.handler is not None and not self.handler.done():
            self.handler.cancel()


async def process(w: Worker, slot: Slot) -> None:
    engine, store, row = w.engine, w.engine.store, slot.row
    # An unknown version keeps its lease: released, this worker would claim it again at once;
    # held, it expires and a worker that knows the version recovers it.
    wtype = engine.type_of(row.type, row.machine_version)
    if w.stopping:  # claimed but not started: hand it back so another worker takes it now
        await store.release_lease(row.id, w.id)
        return
    if row.cancel_requested is not None:
        request = await pending(engine, wtype, row.id, row.state, row.cancel_requested)
        if request is not None:
            try:
                await fire_cancel(
                    engine, row, wtype, request.reason, request.actor or w.actor, park=False
                )
                return
            except (IllegalTransition, InvalidPayload):
                pass  # a guard refuses it here: run as usual (the handler sees it too)
    now = engine.clock.now()
    due = [t for t in await store.timers(row.id) if t.due_at <= now]
    if due:
        timer = due[0]
        try:
            after = await engine._fire(
                row, timer.event, timer.payload, "timer", fired_timer=timer.id
            )
        except VersionConflict:
            await store.release_lease(row.id, w.id)
            return
        except (IllegalTransition, InvalidPayload) as exc:
            failed = FatalError(f"timer {timer.event!r}: {exc}")
            await after_write(w, wtype, await handle_failure(engine, row, failed))
            return
        await after_write(w, wtype, after)
        return
    handler = wtype.handlers.get(row.state)
    if handler is None or row.next_due_at is None or row.next_due_at > now:
        # Nothing to run (a timer was consumed meanwhile): re-arm from the pending timers.
        parked = await store.defer(
            row.id,
            row.version,
            attempts=row.attempts,
            next_due_at=None,  # the store re-arms from the pending timers
            last_error=row.last_error,
            at=now,
        )
        await after_write(w, wtype, parked)
        return
    if w.stopping:
        await store.release_lease(row.id, w.id)
        return
    await _run_handler(w, slot, wtype, handler)


async def _call(handler: Handler, run: Run) -> HandlerResult:
    return await maybe_await(handler(run))


async def _run_handler(w: Worker, slot: Slot, wtype: WorkflowType, handler: Handler) -> None:
    engine, store, row = w.engine, w.engine.store, slot.row
    run = slot.run = Run(engine, wtype, row)
    slot.handler = asyncio.create_task(_call(handler, run), name=f"statewright:{row.id}")
    try:
        result = await slot.handler
    except Cancelled as exc:
        if slot.abandoned and not slot.killed_for_cancel and run.cancel_request is None:
            # The handler turned the worker's shutdown into Cancelled: that stops the worker,
            # not the workflow.
            await store.release_lease(row.id, w.id)
            return
        await _cancelled(w, slot, wtype, cancel_reason(exc))
        return
    except asyncio.CancelledError:
        me = asyncio.current_task()
        if me is not None and me.cancelling():
            raise  # this task itself is being cancelled, not just the handler
        if slot.killed_for_cancel:
            await _cancelled(w, slot, wtype, None)
            return
        # Shutdown grace expired: leave the workflow as it is for another worker; steps the
        # handler left *executing* are reconciled when it runs again.
        log.warning(
            "handler cancelled at shutdown",
            extra={"action": "handler_abandoned", "workflow_id": row.id, "state": row.state},
        )
        await store.release_lease(row.id, w.id)
        return
    except Exception as exc:
        log.warning(
            "handler failed",
            extra={
                "action": "handler_failed",
                "workflow_id": row.id,
                "state": row.state,
                "error": describe(exc),
            },
        )
        await after_write(w, wtype, await handle_failure(engine, row, exc))
        return
    finally:
        if slot.killer is not None:
            slot.killer.cancel()
    now = engine.clock.now()
    if result is None:
        idle = await store.defer(
            row.id, row.version, attempts=0, next_due_at=None, last_error=None, at=now
        )
        await after_write(w, wtype, idle)
        return
    nxt = Next(result) if isinstance(result, str) else result
    try:
        after = await engine._fire(
            row, nxt.event, nxt.payload, w.actor, context_patch=nxt.context, attempts=0
        )
    except VersionConflict:
        await store.release_lease(row.id, w.id)
        return
    except (IllegalTransition, InvalidPayload) as exc:
        failed = FatalError(f"handler returned {exc.message}")
        await after_write(w, wtype, await handle_failure(engine, row, failed))
        return
    await after_write(w, wtype, after)


async def _cancelled(w: Worker, slot: Slot, wtype: WorkflowType, reason: str | None) -> None:
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
    await fire_cancel(w.engine, slot.row, wtype, reason, actor, slot.run.partial)


async def after_write(w: Worker, wtype: WorkflowType, row: WorkflowRow | None) -> None:
    await deliver_pending(w.engine, wtype, row, w.actor)
