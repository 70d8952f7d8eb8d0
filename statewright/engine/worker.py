"""The worker loop: claim due workflows, fire due timers, run state handlers.

:meth:`Worker.run` keeps up to ``concurrency`` workflows in flight, claiming more as slots
free up; when nothing is due it waits on the store's wake-up (LISTEN/NOTIFY on PostgreSQL)
with polling as the fallback. A heartbeat renews the leases of running handlers (never past a
handler's deadline plus ``deadline_grace``), stops a handler whose lease was taken over, and
delivers cancel requests. :meth:`Worker.stop` stops claiming, lets in-flight handlers finish
and persist (up to a grace period), and hands every lease back.

Synchronous user code runs in the worker's own bounded pool of threads (``threads``), so a
blocking call never starves the heartbeat, the HTTP probes of ``serve --worker`` or the other
workflows; a watchdog logs an ``async def`` handler that blocks the loop anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from statewright.engine.children import cancel_orphans
from statewright.engine.heartbeat import heartbeat
from statewright.engine.looplag import LagReport, LoopLagMonitor
from statewright.engine.pool import UserCodePool
from statewright.engine.processing import Slot, process
from statewright.engine.recovery import live_here, recover_stale
from statewright.engine.retention import check_worker_options, prune_periodically
from statewright.engine.schedules import fire_due
from statewright.engine.wakeup import listen
from statewright.errors import LeaseLost, StoreError
from statewright.store.protocol import Schedules

if TYPE_CHECKING:
    from statewright.engine.runtime import HasRuntime

log = logging.getLogger(__name__)

ABANDON_TIMEOUT = 10.0
"""Seconds cancelled handlers get to release their leases once the shutdown grace expired."""


def new_worker_id() -> str:
    """``host:pid:random``: recovery uses host and pid to spot a dead local worker at once."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Claims due work from the store and runs it.

    Args:
        engine: the engine whose types and store to use (the worker keeps only its
            :class:`~statewright.engine.runtime.Runtime`).
        concurrency: workflows run at once (and claimed per round by :meth:`run_once`).
        lease_seconds: how long a claim holds before another worker may recover it; renewed
            by a heartbeat every third of it while a handler runs.
        poll_interval: longest wait between claims when idle (the store's wake-ups usually
            end the wait sooner), and between cancel checks while handlers run.
        cancel_grace: seconds a handler has, after its worker saw a cancel request, to end
            by itself (``Cancelled`` from ``run.check_cancel()``) before its task is cancelled.
        types: only claim these workflow types (default: all registered).
        threads: size of the pool that runs synchronous handlers, step actions and reconcile
            hooks (default: ``concurrency``, at least 4).
        deadline_grace: seconds past a handler's deadline during which its lease is still
            renewed (for it to wind down); then the lease lapses (default: ``lease_seconds``).
        loop_lag_threshold: seconds an ``async def`` handler may block the event loop before
            a WARNING names it (the lag is also reported to observers as a metric).
        chain_limit: handlers run under one claim. A handler whose transition enters a state
            with a handler of its own keeps the lease, and the worker runs that handler next
            without a new claim, up to this many runs and ``chain_seconds`` since the claim;
            then the lease is released as usual and the workflow waits its turn among the
            due ones (1: never chain).
        chain_seconds: see ``chain_limit``.
        prune_terminal_older_than: when set, seconds: :meth:`run` prunes finished workflows
            older than this (``Engine.prune``, no archive) every ``prune_every`` seconds,
            starting at once. Several workers pruning at once is safe.
        prune_every: see ``prune_terminal_older_than``.
    """

    def __init__(
        self,
        engine: HasRuntime,
        *,
        concurrency: int = 8,
        lease_seconds: float = 30.0,
        poll_interval: float = 0.5,
        cancel_grace: float = 5.0,
        types: Sequence[str] | None = None,
        worker_id: str | None = None,
        threads: int | None = None,
        deadline_grace: float | None = None,
        loop_lag_threshold: float = 1.0,
        chain_limit: int = 32,
        chain_seconds: float = 1.0,
        prune_terminal_older_than: float | None = None,
        prune_every: float = 3600.0,
    ) -> None:
        self.rt = engine.runtime
        """What the worker uses of the engine it was given."""
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.cancel_grace = cancel_grace
        self.deadline_grace = lease_seconds if deadline_grace is None else deadline_grace
        self.threads = threads or max(4, concurrency)
        self.executor = UserCodePool(self.threads)
        """The threads that run synchronous user code."""
        self.loop_lag = LoopLagMonitor(threshold=loop_lag_threshold, on_lag=self._lagged)
        self.types = list(types) if types is not None else [t.name for t in self.rt.registry.types]
        self._fires_schedules = isinstance(self.rt.store, Schedules)
        """A store without the schedules part has none to fire."""
        self.id = worker_id or new_worker_id()
        live_here(self)
        self.processed = 0
        self.recovered = 0
        """Workflows this worker's recovery rounds took over from dead or expired workers."""
        self.orphans_cancelled = 0
        """Live children of ended parents that its recovery rounds cancelled."""
        self.chain_limit = chain_limit
        self.chain_seconds = chain_seconds
        check_worker_options(prune_terminal_older_than, prune_every)
        self.prune_terminal_older_than = prune_terminal_older_than
        self.prune_every = prune_every
        self.limits = {
            t.name: t.limit
            for t in self.rt.registry.types
            if t.name in self.types and t.limit is not None
        } or None
        """The claim limits of this worker's limited types (None: the fast claim only)."""
        self._slots: dict[str, Slot] = {}
        self._orphans_after: tuple[str, str] | None = None
        """Where the next recovery round reads orphaned children on (children.py)."""
        self._stopping = asyncio.Event()
        self._deadline: float | None = None
        self._hurry = asyncio.Event()

    @property
    def actor(self) -> str:
        """How this worker's transitions are signed in the log."""
        return f"worker:{self.id}"

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def in_flight(self) -> list[str]:
        """Ids of the workflows this worker is processing now."""
        return list(self._slots)

    def slot_of(self, workflow_id: str) -> Slot | None:
        """The slot processing a workflow now, if any."""
        return self._slots.get(workflow_id)

    @property
    def slots(self) -> list[Slot]:
        """The workflows this worker is processing now, with their handlers."""
        return list(self._slots.values())

    def may_chain(self, slot: Slot) -> bool:
        """Whether the slot's next handler may run under its current claim (see
        ``chain_limit``): not when stopping, and not past the bounds."""
        return (
            not self.stopping
            and not slot.lost
            and not slot.abandoned
            and slot.runs < self.chain_limit
            and time.monotonic() - slot.claimed_at < self.chain_seconds
        )

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming; let in-flight handlers finish and persist, then release all leases.

        Workflows claimed whose handlers have not started are released at once. After
        ``grace`` seconds (None: no limit) the remaining handlers are cancelled and their
        workflows released as they are, for another worker to run again. Calling it again
        with a shorter grace shortens the wait (``statewright worker`` does so on a second
        signal).
        """
        if grace is not None:
            deadline = time.monotonic() + max(0.0, grace)
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
                self._hurry.set()
        if not self._stopping.is_set():
            log.info(
                "worker stopping",
                extra={"action": "worker_stopping", "in_flight": len(self._slots)},
            )
        self._stopping.set()

    async def run(self, *, recover: bool = True) -> None:
        """Run until :meth:`stop`. Recovers stale work first and every lease period.

        When it returns this worker holds no leases.
        """
        if self.executor.closed:  # run again after a stop: a fresh pool
            self.executor = UserCodePool(self.threads)
        beat = asyncio.create_task(heartbeat(self))
        older = self.prune_terminal_older_than
        pruner = None if older is None else prune_periodically(self.rt, older, self.prune_every)
        await self.loop_lag.start()
        try:
            if recover:
                await self._recover()
            await self._claim_loop(recover)
        except BaseException:
            self.stop(grace=0.0)  # cancelled or broken: do not wait for handlers
            raise
        finally:
            await self._drain()
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
            if pruner is not None:
                pruner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pruner
            await self._release_all()
            await self.loop_lag.stop()
            # Threads still in user code the worker gave up on are daemons: not waited for.
            self.executor.shutdown(wait=False, cancel_futures=True)

    async def run_until_idle(self, max_rounds: int = 100_000) -> int:
        """Process due work until none is due at the clock's now (the due ticks of schedules
        included: fired once, first); returns how many."""
        total = 0
        await self._fire_schedules()
        for _ in range(max_rounds):
            n = await self._round()
            if n == 0:
                return total
            total += n
        raise RuntimeError(f"still busy after {max_rounds} rounds (a loop of transitions?)")

    async def run_once(self) -> int:
        """Claim one round of due workflows and process them concurrently; returns how many
        were claimed (:attr:`processed` counts the handlers run, chains included). The due
        ticks of schedules are fired first."""
        await self._fire_schedules()
        return await self._round()

    async def _round(self) -> int:
        slots = await self._claim(self.concurrency)
        if slots:
            await asyncio.gather(*(s.task for s in slots if s.task is not None))
        return len(slots)

    # -- the loop ------------------------------------------------------------------------------

    async def _claim_loop(self, recover: bool) -> None:
        store = self.rt.store
        stopping = asyncio.create_task(self._stopping.wait())
        waiter: asyncio.Task[None] | None = None
        last_recovery = self.rt.clock.now()
        fired_at = -math.inf
        try:
            while not self._stopping.is_set():
                if waiter is None or waiter.done():
                    waiter = await listen(store, self.poll_interval)
                if time.monotonic() - fired_at >= self.poll_interval:
                    fired_at = time.monotonic()
                    await self._fire_schedules()
                free = self.concurrency - len(self._slots)
                try:
                    claimed = len(await self._claim(free, reap=True)) if free > 0 else 0
                except StoreError:
                    # Fail closed and keep trying: nothing was claimed (or, if the answer
                    # was lost after the claim committed, leases we never saw lapse and
                    # are recovered like a dead worker's).
                    log.exception("claim failed", extra={"action": "claim_failed"})
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), self.poll_interval)
                    continue
                now = self.rt.clock.now()
                if recover and now - last_recovery >= self.lease_seconds:
                    last_recovery = now
                    await self._recover()
                if free > 0 and claimed == free:
                    continue  # there may be more due: claim again at once
                wait_on: set[asyncio.Future[Any]] = {stopping}
                if claimed < free:
                    wait_on.add(waiter)
                else:  # full: wait for a slot to free up
                    wait_on.update(s.task for s in self._slots.values() if s.task is not None)
                # Not past the next recovery round (slots busy with long chains or handlers
                # must not delay taking over a dead worker's workflows).
                until_recovery = (
                    max(0.0, last_recovery + self.lease_seconds - now) if recover else None
                )
                if until_recovery is not None:  # nor past the next check of due schedules
                    until_recovery = min(until_recovery, self.poll_interval)
                await asyncio.wait(
                    wait_on, timeout=until_recovery, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            for task in (stopping, waiter):
                if task is not None:
                    task.cancel()

    async def recover(self) -> None:
        """One recovery round (what :meth:`run` does every ``lease_seconds``): the work of
        dead or expired workers, and a page of orphaned children; counted in
        :attr:`recovered` and :attr:`orphans_cancelled`. A store failure is logged."""
        await self._recover()

    async def _recover(self) -> None:
        try:
            found = await recover_stale(
                self.rt, worker_id=self.id, lease_seconds=self.lease_seconds
            )
            self.recovered += len(found)
            # Live children of a parent whose process died before cancelling them (a page
            # a round, going on where the last round stopped).
            cancelled, self._orphans_after = await cancel_orphans(
                self.rt, after=self._orphans_after
            )
            self.orphans_cancelled += cancelled
        except StoreError:
            log.exception("recovery failed", extra={"action": "recovery_failed"})

    async def _fire_schedules(self) -> None:
        """Start the workflows of the due ticks of this worker's types' schedules (every
        worker does: one start per tick wins, see :mod:`statewright.engine.schedules`)."""
        if not self._fires_schedules:
            return
        try:
            await fire_due(self.rt, types=self.types)
        except Exception:  # the ticks stay due; claiming and running workflows go on
            log.exception("firing schedules failed", extra={"action": "schedules_failed"})

    def _lagged(self, report: LagReport) -> None:
        # From the watchdog thread: observers must be thread-safe (prometheus-client is).
        self.rt.observers.loop_lagged(report)

    async def _claim(self, limit: int, *, reap: bool = False) -> list[Slot]:
        rt = self.rt
        rows = await rt.store.claim_due(
            self.id, rt.clock.now(), self.lease_seconds, limit, self.types, self.limits
        )
        slots = []
        for row in rows:
            slot = Slot(row)
            self._slots[row.id] = slot
            slot.task = asyncio.create_task(self._process(slot))
            if reap:
                slot.task.add_done_callback(_reap)
            slots.append(slot)
        return slots

    async def _process(self, slot: Slot) -> None:
        try:
            await process(self, slot)
            self.processed += 1
        except StoreError:
            # Fail closed: the workflow stays where it was; the lease expires and another
            # round (or worker) picks it up when the store is back. (OutcomeUnknown too: by
            # the time the lease expires, the write has landed or not; the next claim sees.)
            log.exception(
                "store failed while processing",
                extra={"action": "process_failed", "workflow_id": slot.row.id},
            )
        except LeaseLost:
            log.warning(
                "lease lost while processing",
                extra={"action": "run_dropped", "workflow_id": slot.row.id},
            )
        finally:
            if self._slots.get(slot.row.id) is slot:
                del self._slots[slot.row.id]

    # -- shutdown ------------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Wait for in-flight work until the grace expires, then cancel what is left."""
        self._stopping.set()
        while self._slots:
            timeout = None if self._deadline is None else self._deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                break
            self._hurry.clear()
            hurry = asyncio.create_task(self._hurry.wait())
            tasks = [s.task for s in self._slots.values() if s.task is not None]
            try:
                await asyncio.wait(
                    [*tasks, hurry], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                hurry.cancel()
        if not self._slots:
            return
        log.warning(
            "shutdown grace expired: cancelling handlers",
            extra={"action": "handlers_cancelled", "workflows": list(self._slots)},
        )
        for slot in self._slots.values():
            slot.abandon()
        tasks = [s.task for s in self._slots.values() if s.task is not None]
        _, late = await asyncio.wait(tasks, timeout=ABANDON_TIMEOUT)
        for task in late:  # stuck on the store: give up on them, the leases go below
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def _release_all(self) -> None:
        try:
            n = await self.rt.store.break_leases(self.id)
        except StoreError:
            log.exception("could not release leases", extra={"action": "release_failed"})
            return
        if n:
            log.warning(
                "released leases left at shutdown", extra={"action": "leases_released", "n": n}
            )


def _reap(task: asyncio.Task[None]) -> None:
    # run() never awaits its processing tasks' results: log what would otherwise be lost.
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "processing a workflow failed",
            exc_info=task.exception(),
            extra={"action": "process_failed"},
        )
