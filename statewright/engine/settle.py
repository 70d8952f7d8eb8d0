"""Writing a handler run's outcome: the one place a claim's processing ends.

:func:`settle` writes what :func:`~statewright.engine.outcome.decide` chose. It is the one
place that writes a run's pending step record (before any write but the handler's own
transition, which carries it; not when the lease is gone), the one place that releases a
lease without a transition, and it asks :func:`~statewright.engine.outcome.decide` again when
a write is refused, until one lands or nothing is left to write. Recovery applies a dead
worker's failure through it too.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from statewright.engine import compensation, transactional
from statewright.engine.cancel import pending
from statewright.engine.compensation_owed import HandOver, hand_over
from statewright.engine.hooks import NO_STEP
from statewright.engine.outcome import PARKED_CANCEL_REFUSED, cancel_outcome, decide
from statewright.engine.outcome_kinds import (
    REFUSALS,
    Advance,
    CancelRun,
    Claim,
    Drop,
    Ended,
    Fail,
    Failed,
    FireTimer,
    Happened,
    Idle,
    KeepTimer,
    LetGo,
    Outcome,
    Park,
    Refuse,
    Refused,
    Release,
    Retry,
)
from statewright.engine.transitions import Defer, Fire
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import StatewrightError, TransactionFailed, TransactionUnavailable
from statewright.types import WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)


async def settle(claim: Claim, happened: Happened | Outcome) -> WorkflowRow | None:
    """Decide what ``happened`` leads to (or take the outcome given: what a claim does before
    any handler runs) and write it; the row to run the next handler on when the handler's
    transition kept the lease for it (a chain), else None.

    The one place that writes the run's pending step record (before any write but the
    handler's transition, which carries it; not when the lease is gone), and the one place
    that releases the lease without a transition. A write refused is decided again (a
    conflict releases the claim, a lost lease drops it, a refused event fails or parks).
    After a write that left the workflow to no worker soon, a cancel request that arrived
    meanwhile is delivered.
    """
    rt, row = claim.rt, claim.row
    outcome: Outcome | None = None
    try:
        outcome = (
            decide(claim, happened) if isinstance(happened, Ended | Failed | Refused) else happened
        )
        while True:
            if isinstance(outcome, Refuse):
                raise outcome.error
            if isinstance(outcome, Advance) and outcome.fire.effects:
                try:  # before any undo runs for it: the tables its steps write are the store's
                    await transactional.check(rt.store, outcome.fire.effects)
                except TransactionUnavailable as exc:
                    outcome = decide(claim, Failed(exc))
                    continue
            owing = compensation.compensating(claim, outcome) if claim.wtype.compensates else None
            if owing is not None:
                # The compensations this transition needs run first, after the handler's
                # last step is recorded done (so it is undone too).
                await _write_pending(claim)
                outcome = await compensation.before(claim, outcome, owing)
            if not isinstance(outcome, Advance | Drop):
                # Any write but the transition that carries it needs the step's done record
                # durable first (a lost lease raises LeaseLost, as does every write here).
                await _write_pending(claim)
            try:
                after = await _write(claim, outcome)
            except REFUSALS as exc:
                outcome = decide(claim, Refused(outcome, exc))
                continue
            except TransactionFailed as exc:
                # A transactional step raised: nothing of the transition committed, and the
                # handler run fails with what the step raised (its type's retry policy).
                log.warning(
                    "transactional step failed",
                    extra={
                        "action": "transaction_failed",
                        "workflow_id": row.id,
                        "state": row.state,
                        "step": exc.step,
                        "error": repr(exc.error),
                    },
                )
                outcome = decide(claim, Failed(exc.error))
                continue
            break
    except Exception:
        # The transition failed (a store error; or its outcome is unknown): record the step's
        # outcome on its own if that can still be done (nothing is pending any more after any
        # other write, or a failed attempt to record it). If not, the step stays *executing*
        # and is reconciled before the handler runs again, as after a crash.
        try:
            await _write_pending(claim)
        except Exception:
            log.warning(
                "step outcome not recorded",
                exc_info=True,
                extra={"action": "step_finish_failed", "workflow_id": row.id},
            )
        raise
    if isinstance(outcome, Advance):
        if outcome.fire.effects:
            log.info(
                "transactional steps committed",
                extra={
                    "action": "transaction_committed",
                    "workflow_id": row.id,
                    "event": outcome.fire.event,
                    "steps": [step.name for step in outcome.fire.effects],
                },
            )
        if claim.run is not None:
            claim.run.ledger.carried()
        if outcome.chain and after is not None and after.lease == claim.lease:
            return after  # the next state's handler runs under this claim
    if isinstance(outcome, CancelRun) or (
        isinstance(outcome, Park) and outcome.defer.parked == PARKED_CANCEL_REFUSED
    ):
        return None  # the cancel was the request's delivery
    await deliver_pending(rt, claim.wtype, after, claim.actor)
    return None


async def _write(claim: Claim, outcome: Outcome) -> WorkflowRow | None:
    """Write ``outcome``; the row after it (None: nothing written). The one place a lease is
    released without a transition (:class:`Release`)."""
    rt, row = claim.rt, claim.row
    if isinstance(outcome, Drop):
        if outcome.logged:
            log.warning(
                "lease lost: the run's outcome is left to the worker that took the workflow over",
                extra={"action": "run_dropped", "workflow_id": row.id, "state": row.state},
            )
        return None
    if isinstance(outcome, Release):
        if claim.lease is not None:
            await rt.store.release_lease(row.id, claim.lease)
        return None
    if isinstance(outcome, Park):
        log.error(outcome.message, extra=outcome.extra, exc_info=outcome.cause)
    if isinstance(outcome, LetGo):
        return await rt.transitions.let_go(row, claim.lease)
    change = _change(outcome)
    if isinstance(change, Fire):
        # The transition's record names the step the handler ran last (None: no handler).
        last = NO_STEP if claim.run is None else claim.run.ledger.last
        return await rt.transitions.fire(row, change, last)
    if isinstance(outcome, Retry):
        log.info(
            "retry scheduled",
            extra={
                "action": "retry_scheduled",
                "workflow_id": row.id,
                "attempt": change.attempts,
                "delay": outcome.delay,
            },
        )
    after = await rt.transitions.defer(row, change)
    if isinstance(outcome, Retry):
        rt.observers.retried(row, after, outcome.delay)
    return after


def _change(outcome: Outcome) -> Fire | Defer:
    if isinstance(outcome, Advance | FireTimer | Fail | CancelRun):
        return outcome.fire
    if isinstance(outcome, Retry):
        return outcome.change
    assert isinstance(outcome, Idle | KeepTimer | Park)
    return outcome.defer


async def _write_pending(claim: Claim) -> None:
    """Write the run's pending *done* record (a finished step) on its own, fenced by the
    lease: before anything but the transition that was to carry it."""
    if claim.run is not None:
        await claim.run.ledger.flush()


async def deliver_pending(
    rt: Runtime, wtype: WorkflowType, row: WorkflowRow | None, actor: str
) -> None:
    """Deliver a request that arrived while a worker (or recovery) held the workflow.

    Called with the row a worker's write returned (its lease released). Needed only when no
    worker will claim the workflow soon (a retry backoff, going idle): a claim delivers
    pending requests itself, and a transition of a workflow with a request pending makes it
    due now (the stores' ``apply_transition``), so after one this returns at once. The
    requester is the event's actor; ``actor`` if unknown.
    """
    if row is None or row.cancel is None or row.terminal:
        return
    if row.next_due_at is not None and row.next_due_at <= rt.clock.now():
        return
    try:
        request = await pending(rt, wtype, row.id, row.state, row.cancel)
        handing: HandOver = "fire"
        if request is not None and wtype.compensates:
            handing = await hand_over(rt, wtype, row, request, now=False)
        if request is not None and handing != "handed":
            claim = Claim(rt, wtype, row, None, request.actor or actor)
            outcome = cancel_outcome(claim, request, claim.actor, park=False)
            if handing == "fire_compensated" and isinstance(outcome, CancelRun):
                outcome = CancelRun(replace(outcome.fire, compensated=()), outcome.park)
            await settle(claim, outcome)
    except StatewrightError as exc:
        log.warning(
            "cancel request not delivered",
            extra={"action": "cancel_refused", "workflow_id": row.id, "error": exc.message},
        )
