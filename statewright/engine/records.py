"""Failure reports for the observers: a handler's or a step's failure, classified as the type's
retry policy classifies it (``statewright_failures_total`` counts them by machine, state, step
and kind, so "which step fails most" is one query).

Called where a failure is known: a step's action raised (:meth:`Ledger.failed
<statewright.engine.ledger.Ledger.failed>`), a state failed (the outcome's ``_failure``). Nothing
is computed when no observer listens: the retry policy's classifier (user code, possibly) runs
only for one.
"""

from __future__ import annotations

import logging

from statewright.engine.hooks import NO_STEP, Observers, StepRef
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import StepOutcomeUnknown
from statewright.types import WorkflowRow

log = logging.getLogger(__name__)

HANDLER = "handler"
"""A state failed: whatever the retry policy applies to."""
STEP = "step"
"""A step's action raised (each attempt)."""
KINDS = (HANDLER, STEP)
ERRORS = ("transient", "fatal", "unknown")
"""How a failure is classified: the retry policy's verdict, or a step's unknown outcome."""


def classify(wtype: WorkflowType, exc: BaseException) -> str:
    """``"unknown"`` for a step whose outcome is unknown, else the type's retry policy's
    ``"transient"`` or ``"fatal"`` (``"fatal"`` too when its classifier itself raises: the
    report must not fail the failure's handling)."""
    if isinstance(exc, StepOutcomeUnknown):
        return "unknown"
    try:
        return wtype.retry.classify(exc)
    except Exception:
        log.warning("the retry policy's classifier raised", exc_info=True)
        return "fatal"


def handler_failed(
    observers: Observers,
    wtype: WorkflowType,
    row: WorkflowRow,
    exc: BaseException,
    last: StepRef | None,
) -> None:
    """``row``'s state failed with ``exc``; ``last``: the step its handler ran last (None or
    :data:`NO_STEP`: none, or no handler ran). A step whose outcome is unknown names that
    step (its key's), without an attempt."""
    if not observers.failure:
        return
    step, attempt = last or NO_STEP
    if isinstance(exc, StepOutcomeUnknown):
        step, attempt = exc.key.rpartition(":")[2], None
    observers.failed(row, HANDLER, classify(wtype, exc), step, attempt)


def step_failed(
    observers: Observers,
    wtype: WorkflowType,
    row: WorkflowRow,
    exc: BaseException,
    step: str,
    attempt: int,
) -> None:
    """Attempt ``attempt`` of step ``step``, run in ``row``'s state, raised ``exc``."""
    if observers.failure:
        observers.failed(row, STEP, classify(wtype, exc), step, attempt)


__all__ = ["ERRORS", "HANDLER", "KINDS", "STEP", "classify", "handler_failed", "step_failed"]
