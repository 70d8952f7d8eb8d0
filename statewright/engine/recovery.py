"""Recovery of work whose worker died: at start-up and then every lease period."""

from __future__ import annotations

import logging
import os
import socket
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from statewright.engine.outcome_kinds import Claim, Failed
from statewright.engine.settle import deliver_pending, settle
from statewright.errors import (
    FatalError,
    LeaseLost,
    TransientError,
    UnknownWorkflowType,
    VersionConflict,
)
from statewright.types import WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import HasRuntime, Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    workflow_id: str
    state: str
    owner: str
    action: str


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


LIVE_WORKERS: weakref.WeakSet[_Identified] = weakref.WeakSet()
"""The workers of this process that still exist (see :func:`dead_local_owner`): a worker is
here from its creation until it is garbage collected (it may run again after a stop), so the
set does not grow with every worker a long-lived process creates."""


def live_here(worker: _Identified) -> None:
    """Count ``worker`` as alive in this process for as long as it exists."""
    LIVE_WORKERS.add(worker)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: dead for our purpose
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def dead_local_owner(owner: str) -> bool:
    """A worker on this host whose process is gone (no need to wait for its lease).

    A lease under this very pid but not of a worker created in this process belongs to an
    earlier process that had the same pid (a restarted container's PID 1, typically).
    """
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return all(worker.id != owner for worker in list(LIVE_WORKERS))
    return not _pid_alive(pid)


async def recover(
    engine: HasRuntime,
    now: float | None = None,
    *,
    worker_id: str = "recovery",
    lease_seconds: float = 30.0,
) -> list[Recovered]:
    """Apply each type's recovery policy to workflows held by dead or expired workers.

    Default per state is ``rerun``: the lease is cleared and the handler runs again, its
    finished steps returning their stored results and interrupted ones reconciled. The other
    policies take the lease over first (a new claim, so the lost worker's writes are refused
    from then on) and write under it.

    A lease is recovered only if it is still the one found expired when the write happens: a
    worker that renewed it meanwhile keeps it. ``engine``: the engine (or anything carrying
    its :class:`~statewright.engine.runtime.Runtime`).
    """
    return await recover_stale(
        engine.runtime, now, worker_id=worker_id, lease_seconds=lease_seconds
    )


async def recover_stale(
    rt: Runtime,
    now: float | None = None,
    *,
    worker_id: str = "recovery",
    lease_seconds: float = 30.0,
) -> list[Recovered]:
    """:func:`recover` on a runtime (what a worker runs)."""
    store = rt.store
    now = rt.clock.now() if now is None else now
    dead = [o for o in await store.lease_owners() if dead_local_owner(o)]
    stale: dict[str, tuple[WorkflowRow, float | None]] = {
        r.id: (r, now) for r in await store.expired_leases(now, limit=10_000)
    }
    for owner in dead:
        for r in await store.leased_by(owner):
            stale[r.id] = (r, None)  # its process is gone: no need to wait for the lease
    done: list[Recovered] = []
    for row, expired_before in stale.values():
        owner = row.lease_owner or ""
        try:
            wtype = rt.registry.type_of(row.type, row.machine_version)
        except UnknownWorkflowType:
            continue  # another deployment's type: leave it to its own workers
        action = wtype.recovery_for(row.state)
        if row.terminal or action == "rerun":
            # Its next claim delivers a cancel, runs the handler (reconciling), or fires timers.
            if not await store.break_leases(owner, [row.id], expired_before=expired_before):
                continue
        else:
            taken = await store.take_over(
                row.id, owner, worker_id, now + lease_seconds, expired_before=expired_before
            )
            if taken is None:
                continue  # renewed, released or recovered by someone else meanwhile
            lease = taken.lease
            after: WorkflowRow | None
            if action == "retry" or action == "fail":
                lost = (TransientError if action == "retry" else FatalError)(
                    f"worker {owner} was lost"
                )
                # The retry policy applies, as to a handler's failure; a pending cancel request
                # is delivered after it.
                await settle(Claim(rt, wtype, taken, lease, "engine"), Failed(lost))
            else:  # leave: release and wait for an external event (or a pending timer)
                try:
                    after = await rt.transitions.let_go(taken, lease)
                except (VersionConflict, LeaseLost):
                    after = None
                await deliver_pending(rt, wtype, after, "engine")
        log.warning(
            "recovered workflow",
            extra={
                "action": "recovered",
                "workflow_id": row.id,
                "state": row.state,
                "policy": action,
                "owner": owner,
            },
        )
        done.append(Recovered(row.id, row.state, owner, action))
    return done
