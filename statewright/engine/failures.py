"""Why a workflow is parked after a failure, and how a failure is written down.

What a failure leads to (a retry after the backoff, the error event, parking) is decided with
every other outcome of a handler run in :mod:`statewright.engine.outcome`; the backoff itself
is :meth:`statewright.engine.retry.RetryPolicy.delay`.
"""

from __future__ import annotations

PARKED_FATAL = "fatal_error"
PARKED_REFUSED = "error_event_refused"
PARKED_UNKNOWN = "step_outcome_unknown"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]
