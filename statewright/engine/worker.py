"""The worker loop: claim due workflows, fire due timers, run state handlers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from statewright.engine.failures import describe, handle_failure
from statewright.engine.recovery import LIVE_WORKERS
from statewright.engine.recovery import recover as run_recovery
from statewright.engine.steps import Run, maybe_await
from statewright.engine.workflow_type import Next
from statewright.errors import (
    FatalError,
    IllegalTransition,
    InvalidPayload,
    StoreError,
    UnknownWorkflowType,
    VersionConflict,
)
from statewright.types import WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.core import Engine

log = logging.getLogger(__name__)


def new_worker_id() -> str:
    """``host:pid:random``: recovery uses host and pid to spot a dead local worker at once."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Claims due work from the store and runs it.

    Args:
        engine: the engine whose types and store to use.
        concurrency: workflows run at once (and claimed per round).
        lease_seconds: how long a claim holds before another worker may recover it; renewed
            by a heartbeat every third of it while a handler runs.
        poll_interval: seconds between claims when idle.
        types: only claim these workflow types (default: all registered).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        concurrency: int = 8,
        lease_seconds: float = 30.0,
        poll_interval: float = 0.5,
        types: Sequence[str] | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.types = list(types) if types is not None else [t.name for t in engine.types]
        self.id = worker_id or new_worker_id()
        LIVE_WORKERS.add(self.id)
        self._stopping = asyncio.Event()
        self._in_flight: set[str] = set()
        self.processed = 0

    def stop(self) -> None:
        """Stop claiming; the current handlers finish and persist."""
        self._stopping.set()

    async def run(self, *, recover: bool = True) -> None:
        """Run until :meth:`stop`. Recovers stale work first and every lease period."""
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            if recover:
                await run_recovery(self.engine)
            last_recovery = self.engine.clock.now()
            while not self._stopping.is_set():
                claimed = await self.run_once()
                now = self.engine.clock.now()
                if recover and now - last_recovery >= self.lease_seconds:
                    await run_recovery(self.engine)
                    last_recovery = now
                if not claimed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), self.poll_interval)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def run_until_idle(self, max_rounds: int = 100_000) -> int:
        """Process due work until none is due at the clock's now; returns how many."""
        total = 0
        for _ in range(max_rounds):
            n = await self.run_once()
            if n == 0:
                return total
            total += n
        raise RuntimeError(f"still busy after {max_rounds} rounds (a loop of transitions?)")

    async def run_once(self) -> int:
        """Claim one round of due workflows and process them concurrently."""
        engine = self.engine
        rows = await engine.store.claim_due(
            self.id, engine.clock.now(), self.lease_seconds, self.concurrency, self.types
        )
        if rows:
            await asyncio.gather(*(self._process(r) for r in rows))
        return len(rows)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            if self._in_flight:
                until = self.engine.clock.now() + self.lease_seconds
                try:
                    await self.engine.store.renew_leases(self.id, list(self._in_flight), until)
                except StoreError:
                    log.exception("lease renewal failed", extra={"action": "heartbeat_failed"})

    async def _process(self, row: WorkflowRow) -> None:
        self._in_flight.add(row.id)
        try:
            await self._step(row)
            self.processed += 1
        except StoreError:
            # Fail closed: the workflow stays where it was; the lease expires and another
            # round (or worker) picks it up when the store is back.
            log.exception(
                "store failed while processing",
                extra={"action": "process_failed", "workflow_id": row.id},
            )
        finally:
            self._in_flight.discard(row.id)

    async def _step(self, row: WorkflowRow) -> None:
        engine = self.engine
        store = engine.store
        try:
            wtype = engine.type_of(row.type, row.machine_version)
        except UnknownWorkflowType:
            await store.release_lease(row.id, self.id)
            raise
        now = engine.clock.now()
        due = [t for t in await store.timers(row.id) if t.due_at <= now]
        if due:
            timer = due[0]
            try:
                await engine._fire(row, timer.event, timer.payload, "timer", fired_timer=timer.id)
            except VersionConflict:
                await store.release_lease(row.id, self.id)
            except (IllegalTransition, InvalidPayload) as exc:
                await handle_failure(engine, row, FatalError(f"timer {timer.event!r}: {exc}"))
            return
        handler = wtype.handlers.get(row.state)
        if handler is None or row.next_due_at is None or row.next_due_at > now:
            # Nothing to run (a timer was consumed meanwhile): re-arm from the pending timers.
            await store.defer(
                row.id,
                row.version,
                attempts=row.attempts,
                next_due_at=None,  # the store re-arms from the pending timers
                last_error=row.last_error,
                at=now,
            )
            return
        try:
            result = await maybe_await(handler(Run(engine, wtype, row)))
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
            await handle_failure(engine, row, exc)
            return
        if result is None:
            await store.defer(
                row.id, row.version, attempts=0, next_due_at=None, last_error=None, at=now
            )
            return
        nxt = Next(result) if isinstance(result, str) else result
        try:
            await engine._fire(
                row,
                nxt.event,
                nxt.payload,
                f"worker:{self.id}",
                context_patch=nxt.context,
                attempts=0,
            )
        except VersionConflict:
            await store.release_lease(row.id, self.id)
        except (IllegalTransition, InvalidPayload) as exc:
            await handle_failure(engine, row, FatalError(f"handler returned {exc.message}"))
