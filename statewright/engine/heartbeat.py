"""A worker's heartbeat: renew the leases of its workflows, deliver cancel requests.

Every third of the lease it renews; and whenever the store wakes it (a cancel request does,
on SQLite in this process and on PostgreSQL from anywhere), or at least every poll interval,
it asks the store for cancel requests on the running handlers. A handler that does not end by
itself within the worker's ``cancel_grace`` then has its task cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from statewright.engine.processing import Slot
from statewright.engine.runtime import Runtime
from statewright.engine.wakeup import listen
from statewright.errors import StoreError

log = logging.getLogger(__name__)

CANCEL_CHECK_GAP = 0.1
"""Least seconds between two cancel checks: every transition wakes the heartbeat."""


class Holder(Protocol):
    """What the heartbeat needs of the worker whose leases it keeps (a
    :class:`~statewright.engine.worker.Worker`)."""

    rt: Runtime
    id: str
    lease_seconds: float
    poll_interval: float
    deadline_grace: float
    cancel_grace: float

    @property
    def slots(self) -> list[Slot]: ...

    def slot_of(self, workflow_id: str) -> Slot | None: ...


async def heartbeat(w: Holder) -> None:
    store = w.rt.store
    every = w.lease_seconds / 3
    renew_at = time.monotonic() + every
    while True:
        waiter = await listen(store, min(renew_at - time.monotonic(), w.poll_interval))
        try:
            await asyncio.sleep(CANCEL_CHECK_GAP)
            if time.monotonic() >= renew_at:
                renew_at = time.monotonic() + every
                await _renew(w)
            await _watch_cancels(w)
            await waiter
        finally:
            waiter.cancel()


async def _renew(w: Holder) -> None:
    # Each lease is renewed under its own claim (fencing token): one that another worker took
    # over is not renewed, and its handler is stopped. A handler past its deadline plus the
    # grace is not renewed either: its lease lapses and recovery moves the workflow on.
    slots = [s for s in w.slots if not s.lost and s.renewable(w.deadline_grace)]
    if not slots:
        return
    held = {s.row.id: s.lease.fence for s in slots}
    try:
        renewed = set(
            await w.rt.store.renew_leases(w.id, held, w.rt.clock.now() + w.lease_seconds)
        )
    except StoreError:
        log.exception("lease renewal failed", extra={"action": "heartbeat_failed"})
        return
    for slot in slots:
        if slot.row.id not in renewed and w.slot_of(slot.row.id) is slot:
            slot.lose()


async def _watch_cancels(w: Holder) -> None:
    running = [s for s in w.slots if s.running and s.run is not None]
    if not running:
        return
    try:
        found = await w.rt.store.cancel_requests([s.row.id for s in running])
        for slot in running:
            assert slot.run is not None
            await slot.run.note_cancel(found.get(slot.row.id))
            if slot.run.cancel_request is not None:
                slot.kill_after(w.cancel_grace)
    except StoreError:
        log.exception("cancel check failed", extra={"action": "heartbeat_failed"})
