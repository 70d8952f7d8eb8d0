"""What happens after a handler runs: the outcome decided in one function, applied in one place.

A claimed workflow's processing ends in one of a few writes, each fenced by the claim's lease:
the handler's next event (:class:`Advance`), going idle (:class:`Idle`), a retry after a
backoff or the retry event (:class:`Retry`), the error event (:class:`Fail`), parking for an
operator (:class:`Park`), the cancel event (:class:`CancelRun`), a due timer's event
(:class:`FireTimer`, :class:`KeepTimer`), re-arming from the pending timers (:class:`LetGo`);
or in no write: the claim handed back as it is (:class:`Release`), or nothing at all because
the lease is gone (:class:`Drop`).

:func:`decide` is the one function that chooses, from how the handler ended (:class:`Ended`),
a failure the retry policy applies to (:class:`Failed`: recovery, a refused timer), or a write
the store or the machine refused (:class:`Refused`). It reads the clock, draws the backoff's
jitter and logs why, and writes nothing: :func:`statewright.engine.settle.settle` writes its
choice (and asks it again when a write is refused).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from statewright.engine import records, suspend, tracecontext
from statewright.engine.cancel import cancel_reason
from statewright.engine.failures import PARKED_FATAL, PARKED_REFUSED, PARKED_UNKNOWN, describe
from statewright.engine.outcome_kinds import (
    Advance,
    CancelRun,
    Claim,
    Drop,
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
from statewright.engine.retry import retry_after_of
from statewright.engine.transactional import idle_with_steps
from statewright.engine.transitions import Defer, Fire
from statewright.engine.workflow_type import Next
from statewright.errors import (
    Cancelled,
    DeadlineExceeded,
    FatalError,
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    LeaseLost,
    StatewrightError,
    StepOutcomeUnknown,
    StoreError,
    VersionConflict,
)
from statewright.types import CancelRequest

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

PARKED_CANCEL_REFUSED = "cancel_refused"

# -- the decision -------------------------------------------------------------------------------


def decide(claim: Claim, happened: Happened) -> Outcome:
    """The outcome of what happened to ``claim``: the one place that chooses it."""
    row, lease, run = claim.row, claim.lease, claim.run
    if isinstance(happened, Failed):
        return _failure(claim, happened.error)
    if isinstance(happened, Refused):
        return _refused(claim, happened.outcome, happened.error)
    exc = happened.raised
    if isinstance(exc, Cancelled):
        if (
            happened.abandoned
            and not happened.killed_for_cancel
            and (run is None or run.cancel_request is None)
        ):
            # The handler turned the worker's shutdown into Cancelled: that stops the worker,
            # not the workflow.
            return Release()
        return _cancel(claim, cancel_reason(exc), happened.killed_for_cancel)
    if happened.stopped:
        if happened.lost:
            return Drop(logged=True)
        if happened.timed_out:
            # A deadline hit: the outcome of what it was doing is unknown; its unfinished steps
            # are left executing and get reconciled before anything runs again.
            log.warning(
                "handler deadline exceeded",
                extra={"action": "handler_deadline", "workflow_id": row.id, "state": row.state},
            )
            deadline = claim.wtype.deadline_for(row.state)
            return _failure(
                claim,
                DeadlineExceeded(
                    f"the handler of {row.state!r} ran past its deadline of {deadline:g}s"
                ),
            )
        if happened.killed_for_cancel:
            return _cancel(claim, None, True)
        # Shutdown grace expired: leave the workflow as it is for another worker; steps the
        # handler left *executing* are reconciled when it runs again.
        log.warning(
            "handler cancelled at shutdown",
            extra={"action": "handler_abandoned", "workflow_id": row.id, "state": row.state},
        )
        return Release()
    if isinstance(exc, LeaseLost) or happened.lost:
        return Drop(logged=True)
    if isinstance(exc, StoreError):
        return _store_failed(claim, exc)
    if exc is not None:
        if isinstance(exc, suspend.Suspended):  # a wait that frees the worker: not a failure
            return Idle(suspend.defer(run, lease, exc)) if run is not None else Release()
        log.warning(
            "handler failed",
            extra={
                "action": "handler_failed",
                "workflow_id": row.id,
                "state": row.state,
                "error": describe(exc),
            },
        )
        return _failure(claim, exc)
    assert run is not None, "a handler's result comes with its run"
    taken = tuple(run.taken)
    result = happened.result
    if result is None:
        if run.effects:
            return _failure(claim, idle_with_steps(row.state, run.effects))
        return Idle(
            Defer(
                attempts=0,
                lease=lease,
                consume_inputs=taken,
                add_timers=run.scheduled,
                cancel_timer_keys=run.cancelled_timers,
            )
        )
    nxt = Next(result) if isinstance(result, str) else result
    return Advance(
        Fire(
            nxt.event,
            nxt.payload,
            claim.actor,
            context_patch=nxt.context,
            attempts=0,
            lease=lease,
            consume_inputs=taken,
            add_timers=run.scheduled,
            cancel_timer_keys=run.cancelled_timers,
            messages=tuple(run.messages),
            step_finish=run.pending_finish,
            keep_lease_if_due=happened.chain,
            effects=run.effects,
        ),
        happened.chain,
    )


def _refused(claim: Claim, outcome: Outcome, exc: Exception) -> Outcome:
    """What follows when ``outcome``'s write was refused with ``exc``."""
    rt, row = claim.rt, claim.row
    if isinstance(outcome, Advance | Idle):
        if isinstance(exc, VersionConflict):
            # Someone moved the workflow meanwhile (an external event): this result is
            # dropped, and the inputs the run took stay for the next run. A finished step
            # stays done.
            return Release()
        if isinstance(exc, LeaseLost):
            return Drop(logged=True)
        if isinstance(outcome, Advance) and isinstance(exc, IllegalTransition | InvalidPayload):
            return _failure(claim, FatalError(f"handler returned {exc.message}"), traced=True)
    elif isinstance(outcome, FireTimer | KeepTimer | LetGo):
        if isinstance(exc, VersionConflict):
            return Release()
        if isinstance(exc, LeaseLost):
            return Drop()
        if isinstance(outcome, FireTimer) and isinstance(exc, IllegalTransition | InvalidPayload):
            fire = outcome.fire
            if fire.rearm is None:
                return _failure(claim, FatalError(f"timer {fire.event!r}: {exc}"))
            # A handler's retry owed (a failure's backoff) may hide behind this timer's due
            # time (next_due_at keeps only the earlier): run it now rather than lose it.
            owed = outcome.has_handler and row.attempts > 0 and row.parked is None
            return KeepTimer(
                Defer(
                    attempts=row.attempts,
                    next_due_at=rt.clock.now() if owed else None,
                    last_error=row.last_error,
                    parked=row.parked,
                    lease=claim.lease,
                    fired_timer=fire.fired_timer,
                    add_timers=(fire.rearm,),
                )
            )
    elif isinstance(outcome, Retry | Fail | Park):
        if isinstance(exc, VersionConflict | LeaseLost):
            return Drop()
        fallback = outcome.fallback
        if fallback is not None and isinstance(exc, IllegalTransition | InvalidPayload):
            # The machine refused the error event (a guard); park rather than loop.
            return Park(
                fallback,
                "error event refused; parking",
                {"action": "workflow_parked", "workflow_id": row.id},
                cause=exc,
            )
    elif isinstance(outcome, CancelRun):
        if isinstance(exc, VersionConflict | IdempotencyKeyReused):
            return Release() if claim.lease is not None else Drop()
        if isinstance(exc, LeaseLost):
            return Drop()
        if isinstance(exc, IllegalTransition | InvalidPayload | InvalidInput):
            if not outcome.park:
                return Refuse(exc)
            return _cancel_refused(claim, outcome.fire, exc)
    return Refuse(exc)


def _cancel(claim: Claim, reason: str | None, forced: bool) -> Outcome:
    """The handler ended for a cancel (it raised Cancelled, or was stopped after the grace):
    the cancel event, with its partial results."""
    row, run = claim.row, claim.run
    assert run is not None
    request = run.cancel_request
    reason = reason or (request.reason if request else None) or "cancelled by its handler"
    actor = request.actor if request and request.actor else claim.actor
    log.info(
        "handler cancelled",
        extra={
            "action": "handler_cancelled",
            "workflow_id": row.id,
            "state": row.state,
            "reason": reason,
            "forced": forced,
        },
    )
    delivered = CancelRequest(
        reason,
        actor,
        request.at if request else None,
        request.version if request else None,
        request.idempotency_key if request else None,
    )
    return cancel_outcome(claim, delivered, actor, run.partial, tuple(run.taken))


def cancel_outcome(
    claim: Claim,
    request: CancelRequest,
    actor: str,
    partial: dict[str, Any] | None = None,
    consume_inputs: tuple[int, ...] = (),
    *,
    park: bool = True,
) -> Outcome:
    """Fire the cancel event on the row as read, with ``partial`` as the context patch.

    With the claim's lease the write is fenced by it and releases it; without one, it applies
    only while no worker holds the workflow. Without an edge for it, or when a guard or the
    payload schema refuses it, the workflow is parked with the error (``park``) or the
    refusal is raised.
    """
    wtype, row, lease = claim.wtype, claim.row, claim.lease
    event = wtype.cancel_event
    fire = Fire(
        event or "cancel",
        {"reason": request.reason},
        actor,
        context_patch=partial or None,
        attempts=0,
        lease=lease,
        require_unleased=lease is None,
        idempotency_key=request.idempotency_key,
        consume_inputs=consume_inputs,
    )
    if event is None or not wtype.machine.can(row.state, event):
        allowed = wtype.machine.allowed_events(row.state, row.context)
        refusal = IllegalTransition(row.state, event or "cancel", allowed, None, row.id)
        return _cancel_refused(claim, fire, refusal) if park else Refuse(refusal)
    return CancelRun(fire, park)


def _cancel_refused(claim: Claim, fire: Fire, exc: StatewrightError) -> Park:
    reason = fire.payload["reason"]
    error = f"cancelled ({reason}) but the cancel event was refused: {exc.message}"
    return Park(
        Defer(
            attempts=claim.row.attempts,
            last_error=error[:1000],
            parked=PARKED_CANCEL_REFUSED,
            lease=claim.lease,
            consume_inputs=fire.consume_inputs,
        ),
        error,
        {"action": "workflow_parked", "workflow_id": claim.row.id},
    )


def _refused_park(claim: Claim, error: str, total_attempts: int) -> Defer:
    """The park written when the machine refuses the event a failure fires."""
    return Defer(
        attempts=claim.row.attempts,
        total_attempts=total_attempts,
        last_error=error,
        parked=PARKED_REFUSED,
        lease=claim.lease,
    )


def _store_failed(claim: Claim, exc: StoreError) -> Outcome:
    """The engine's own store failed under the handler (a step's record on a full disk, a lost
    connection, a commit whose outcome is unknown): not the handler's failure, so it spends
    neither retry budget (a full disk must not fail the workflows it holds up). The state runs
    again after the first backoff; the step ledger decides what the re-run may repeat (a step
    whose record may have committed is reconciled or parks, as after a crash)."""
    row, policy, now = claim.row, claim.wtype.retry, claim.rt.clock.now()
    error = describe(exc)
    log.warning(
        "store failed under the handler; it runs again",
        extra={"action": "handler_store_failed", "workflow_id": row.id, "error": error},
    )
    delay = policy.delay(1, None, claim.rt.rng)
    defer = Defer(
        attempts=row.attempts,
        total_attempts=row.total_attempts,
        next_due_at=now + delay,
        last_error=error,
        lease=claim.lease,
    )
    return Retry(defer, delay, _refused_park(claim, error, row.total_attempts))


def _failure(claim: Claim, exc: BaseException, *, traced: bool = False) -> Outcome:
    """The type's retry policy on a failure of the row's current state.

    Transient: count the attempt (in both budgets: consecutive failures in this state and
    failures over the workflow's life), then fire ``on_transient`` (e.g. running -> retrying,
    with a backoff timer for ``retry_event``) or, without such an edge, run the handler again
    after the backoff. Fatal, or a budget is spent: fire ``on_fatal`` or, without such an
    edge, park the workflow with its error. A step whose outcome is unknown
    (:class:`StepOutcomeUnknown`) takes the type's ``step_outcome_unknown`` edge or parks the
    workflow for an operator. Inputs the failed run took are not consumed: the retry gets them
    again.
    """
    if traced:
        tracecontext.failed(exc)
    rt, wtype, row, lease = claim.rt, claim.wtype, claim.row, claim.lease
    machine, policy = wtype.machine, wtype.retry
    now = rt.clock.now()
    error = describe(exc)
    total = row.total_attempts + 1
    last = None if claim.run is None else claim.run.ledger.last
    records.handler_failed(rt.observers, wtype, row, exc, last)
    if isinstance(exc, StepOutcomeUnknown):
        event = wtype.step_outcome_unknown
        if event is not None and machine.can(row.state, event):
            fire = Fire(
                event, {"key": exc.key, "error": error}, "engine", last_error=error, lease=lease
            )
            return Fail(fire, _refused_park(claim, error, total))
        return Park(
            Defer(attempts=row.attempts, last_error=error, parked=PARKED_UNKNOWN, lease=lease),
            "workflow parked: a step's outcome is unknown; an operator must resolve it",
            {
                "action": "workflow_parked",
                "workflow_id": row.id,
                "parked": PARKED_UNKNOWN,
                "key": exc.key,
            },
            fallback=_refused_park(claim, error, total),
        )
    row_attempts = row.attempts
    if policy.classify(exc) == "transient":
        attempt = row.attempts + 1
        row_attempts = attempt
        retry_after = retry_after_of(exc, now)
        delay = policy.delay(attempt, retry_after, rt.rng)
        lifetime = policy.max_total_attempts
        if lifetime is not None and total > lifetime:
            error = f"lifetime retry budget of {lifetime} failures spent; last: {error}"
        elif wtype.on_transient and machine.can(row.state, wtype.on_transient):
            payload: dict[str, object] = {
                "attempt": attempt,
                "max_attempts": policy.max_attempts,
                "error": error,
            }
            if retry_after is not None:
                payload["retry_after"] = retry_after
            fire = Fire(
                wtype.on_transient,
                payload,
                "engine",
                attempts=attempt,
                total_attempts=total,
                retry_delay=delay,
                last_error=error,
                lease=lease,
            )
            return Retry(fire, delay, _refused_park(claim, error, total))
        elif attempt <= policy.max_attempts:
            defer = Defer(
                attempts=attempt,
                total_attempts=total,
                next_due_at=now + delay,
                last_error=error,
                lease=lease,
            )
            return Retry(defer, delay, _refused_park(claim, error, total))
        else:
            error = f"retry budget of {policy.max_attempts} attempts spent; last: {error}"
    if wtype.on_fatal and machine.can(row.state, wtype.on_fatal):
        fire = Fire(
            wtype.on_fatal,
            {"error": error},
            "engine",
            attempts=row_attempts,
            total_attempts=total,
            last_error=error,
            lease=lease,
        )
        return Fail(fire, _refused_park(claim, error, total))
    return Park(
        Defer(
            attempts=row_attempts,
            total_attempts=total,
            last_error=error,
            parked=PARKED_FATAL,
            lease=lease,
        ),
        "workflow parked after a fatal error",
        {"action": "workflow_parked", "workflow_id": row.id, "error": error},
        fallback=_refused_park(claim, error, total),
    )
