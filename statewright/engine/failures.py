"""What happens when a handler fails: retry with backoff, or fail.

Shared by the worker (a handler raised) and recovery (a worker died mid-state).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from statewright.engine.retry import retry_after_of
from statewright.errors import IllegalTransition, InvalidPayload, VersionConflict
from statewright.types import WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.core import Engine

log = logging.getLogger(__name__)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


async def handle_failure(
    engine: Engine, row: WorkflowRow, exc: BaseException
) -> WorkflowRow | None:
    """Apply the type's retry policy to a failure of ``row``'s current state.

    Transient: count the attempt (durably), then fire ``on_transient`` (e.g. running ->
    retrying, with a backoff timer for ``retry_event``) or, without such an edge, schedule the
    handler again after the backoff. Fatal, or the budget is spent: fire ``on_fatal`` or, without
    such an edge, park the workflow with its error (it then shows up as stuck).
    Returns the new row, or None if the workflow moved on meanwhile.
    """
    wtype = engine.type_of(row.type, row.machine_version)
    machine, policy = wtype.machine, wtype.retry
    now = engine.clock.now()
    error = describe(exc)
    try:
        if policy.classify(exc) == "transient":
            attempt = row.attempts + 1
            retry_after = retry_after_of(exc)
            delay = policy.delay(attempt, retry_after, engine.rng)
            if wtype.on_transient and machine.can(row.state, wtype.on_transient):
                payload: dict[str, object] = {
                    "attempt": attempt,
                    "max_attempts": policy.max_attempts,
                    "error": error,
                }
                if retry_after is not None:
                    payload["retry_after"] = retry_after
                return await engine._fire(
                    row,
                    wtype.on_transient,
                    payload,
                    "engine",
                    attempts=attempt,
                    retry_delay=delay,
                    last_error=error,
                )
            if attempt <= policy.max_attempts:
                log.info(
                    "retry scheduled",
                    extra={
                        "action": "retry_scheduled",
                        "workflow_id": row.id,
                        "attempt": attempt,
                        "delay": delay,
                    },
                )
                deferred = await engine.store.defer(
                    row.id,
                    row.version,
                    attempts=attempt,
                    next_due_at=now + delay,
                    last_error=error,
                    at=now,
                )
                engine.observers.retried(row, deferred, delay)
                return deferred
            error = f"retry budget of {policy.max_attempts} attempts spent; last: {error}"
            row_attempts = attempt
        else:
            row_attempts = row.attempts
        if wtype.on_fatal and machine.can(row.state, wtype.on_fatal):
            return await engine._fire(
                row,
                wtype.on_fatal,
                {"error": error},
                "engine",
                attempts=row_attempts,
                last_error=error,
            )
        log.error(
            "workflow parked after a fatal error",
            extra={"action": "workflow_parked", "workflow_id": row.id, "error": error},
        )
        return await engine.store.defer(
            row.id, row.version, attempts=row_attempts, next_due_at=None, last_error=error, at=now
        )
    except VersionConflict:
        return None
    except (IllegalTransition, InvalidPayload):
        # The machine refused the error event (a guard); park rather than loop.
        log.exception(
            "error event refused; parking",
            extra={"action": "workflow_parked", "workflow_id": row.id},
        )
        return await engine.store.defer(
            row.id, row.version, attempts=row.attempts, next_due_at=None, last_error=error, at=now
        )
