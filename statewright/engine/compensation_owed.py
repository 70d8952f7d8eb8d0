"""Which compensations a workflow owes, and handing a cancel that must pay them to a worker.

Compensations run only under a worker's claim (fenced by its lease, in the process that runs
the type's code), never in the process that asked for a cancel: a cancel that compensates, of a
workflow no worker holds, is recorded as a request (as for a held one) and the workflow made
due at once with a timer of the cancel event, so the worker that claims it delivers the request
and runs the compensations first (:mod:`statewright.engine.compensation`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from statewright.engine.compensation_names import UNDO_PREFIX, undo_name
from statewright.engine.workflow_type import WorkflowType
from statewright.types import CancelRequest, StepRecord, TimerSpec, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

HandOver = Literal["fire", "fire_compensated", "handed"]

HAND_OVER_KEY = "$compensate"
"""The key of the timer that makes a workflow due for the worker that compensates it."""


def owed(steps: list[StepRecord]) -> list[StepRecord]:
    """The steps of a ledger whose compensation has not been done: those that declared one,
    are not known never to have applied (failed ``not_applied``), and whose undo is not done.
    Steps not done among them are reconciled before anything is compensated."""
    undone = {s.step for s in steps if s.step.startswith(UNDO_PREFIX) and s.status == "done"}
    return [
        s
        for s in steps
        if s.compensation is not None
        and not s.step.startswith(UNDO_PREFIX)
        and undo_name(s.step) not in undone
        and not (s.status == "failed" and s.outcome == "not_applied")
    ]


def cancel_compensates(wtype: WorkflowType, row: WorkflowRow) -> bool:
    """Whether the type's cancel event compensates on ``row``: by the type's policy
    (``compensate_on``), or because its edge from the row's state is marked ``compensate``."""
    event = wtype.cancel_event
    if not wtype.compensates or event is None:
        return False
    if event in wtype.compensating_events:
        return True
    return any(t.compensate for t in wtype.machine.transitions_from(row.state, event))


async def hand_over(
    rt: Runtime, wtype: WorkflowType, row: WorkflowRow, request: CancelRequest, *, now: bool
) -> HandOver:
    """Leave the cancel ``request`` of ``row`` (held by no worker) to a worker, when it
    compensates and compensations are owed: recorded on the row, and the row made due with a
    timer (at once; with ``now`` False only when nothing else will bring a worker: not for a
    row due later, a retry's backoff, nor for a parked one). Returns ``"fire"`` when the
    caller fires the cancel as usual; ``"fire_compensated"`` when it compensates but nothing
    is owed (the caller fires it with ``compensated=()``); ``"handed"`` when a worker
    delivers it (the caller fires nothing)."""
    if not cancel_compensates(wtype, row):
        return "fire"
    if not owed(await rt.store.steps(row.id)):
        return "fire_compensated"
    assert wtype.cancel_event is not None
    await rt.store.request_cancel(row.id, request)
    if now or (row.next_due_at is None and row.parked is None):
        at = rt.clock.now()
        timer = TimerSpec(at, wtype.cancel_event, {"reason": request.reason}, key=HAND_OVER_KEY)
        await rt.store.schedule_timer(
            row.id,
            timer,
            state=row.state,
            entered_at=row.state_entered_at,
            at=at,
            scheduled_by=request.actor,
        )
    return "handed"
