"""What happens when a handler fails: retry with backoff, fail, or park for an operator.

Shared by the worker (a handler raised or ran past its deadline) and recovery (a worker died
mid-state).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from statewright.engine.retry import retry_after_of
from statewright.engine.transitions import Defer, Fire
from statewright.errors import (
    IllegalTransition,
    InvalidPayload,
    LeaseLost,
    StepOutcomeUnknown,
    VersionConflict,
)
from statewright.types import Lease, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

PARKED_FATAL = "fatal_error"
PARKED_REFUSED = "error_event_refused"
PARKED_UNKNOWN = "step_outcome_unknown"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


async def handle_failure(
    rt: Runtime,
    row: WorkflowRow,
    exc: BaseException,
    *,
    lease: Lease | None = None,
) -> WorkflowRow | None:
    """Apply the type's retry policy to a failure of ``row``'s current state.

    Transient: count the attempt (durably, in both budgets: consecutive failures in this
    state and failures over the workflow's life), then fire ``on_transient`` (e.g. running ->
    retrying, with a backoff timer for ``retry_event``) or, without such an edge, schedule the
    handler again after the backoff. Fatal, or a budget is spent: fire ``on_fatal`` or,
    without such an edge, park the workflow with its error (it then shows up as stuck). A
    step whose outcome is unknown (:class:`StepOutcomeUnknown`) takes the type's
    ``step_outcome_unknown`` edge or parks the workflow for an operator.

    ``lease``: the worker's claim (every write is fenced by it and releases it). Inputs the
    failed run took are not consumed: the retry gets them again. Returns the new row, or None
    if the workflow moved on meanwhile or the lease is gone.
    """
    wtype = rt.registry.type_of(row.type, row.machine_version)
    machine, policy = wtype.machine, wtype.retry
    transitions = rt.transitions
    now = rt.clock.now()
    error = describe(exc)
    total = row.total_attempts + 1
    try:
        if isinstance(exc, StepOutcomeUnknown):
            return await _outcome_unknown(rt, row, exc, lease)
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
                return await transitions.fire(
                    row,
                    Fire(
                        wtype.on_transient,
                        payload,
                        "engine",
                        attempts=attempt,
                        total_attempts=total,
                        retry_delay=delay,
                        last_error=error,
                        lease=lease,
                    ),
                )
            elif attempt <= policy.max_attempts:
                log.info(
                    "retry scheduled",
                    extra={
                        "action": "retry_scheduled",
                        "workflow_id": row.id,
                        "attempt": attempt,
                        "delay": delay,
                    },
                )
                deferred = await transitions.defer(
                    row,
                    Defer(
                        attempts=attempt,
                        total_attempts=total,
                        next_due_at=now + delay,
                        last_error=error,
                        lease=lease,
                    ),
                )
                rt.observers.retried(row, deferred, delay)
                return deferred
            else:
                error = f"retry budget of {policy.max_attempts} attempts spent; last: {error}"
        if wtype.on_fatal and machine.can(row.state, wtype.on_fatal):
            return await transitions.fire(
                row,
                Fire(
                    wtype.on_fatal,
                    {"error": error},
                    "engine",
                    attempts=row_attempts,
                    total_attempts=total,
                    last_error=error,
                    lease=lease,
                ),
            )
        log.error(
            "workflow parked after a fatal error",
            extra={"action": "workflow_parked", "workflow_id": row.id, "error": error},
        )
        return await transitions.defer(
            row,
            Defer(
                attempts=row_attempts,
                total_attempts=total,
                last_error=error,
                parked=PARKED_FATAL,
                lease=lease,
            ),
        )
    except (VersionConflict, LeaseLost):
        return None
    except (IllegalTransition, InvalidPayload):
        # The machine refused the error event (a guard); park rather than loop.
        log.exception(
            "error event refused; parking",
            extra={"action": "workflow_parked", "workflow_id": row.id},
        )
        try:
            return await transitions.defer(
                row,
                Defer(
                    attempts=row.attempts,
                    total_attempts=total,
                    last_error=error,
                    parked=PARKED_REFUSED,
                    lease=lease,
                ),
            )
        except (VersionConflict, LeaseLost):
            return None


async def _outcome_unknown(
    rt: Runtime,
    row: WorkflowRow,
    exc: StepOutcomeUnknown,
    lease: Lease | None,
) -> WorkflowRow | None:
    wtype = rt.registry.type_of(row.type, row.machine_version)
    error = describe(exc)
    event = wtype.step_outcome_unknown
    if event is not None and wtype.machine.can(row.state, event):
        return await rt.transitions.fire(
            row,
            Fire(
                event,
                {"key": exc.key, "error": error},
                "engine",
                last_error=error,
                lease=lease,
            ),
        )
    log.error(
        "workflow parked: a step's outcome is unknown; an operator must resolve it",
        extra={
            "action": "workflow_parked",
            "workflow_id": row.id,
            "parked": PARKED_UNKNOWN,
            "key": exc.key,
        },
    )
    return await rt.transitions.defer(
        row,
        Defer(
            attempts=row.attempts,
            last_error=error,
            parked=PARKED_UNKNOWN,
            lease=lease,
        ),
    )
