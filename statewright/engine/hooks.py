"""Transition observers and structured logs. Observers never break a transition."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from statewright.errors import StatewrightError
from statewright.types import WorkflowRow

log = logging.getLogger("statewright.transitions")


@dataclass(frozen=True)
class TransitionEvent:
    """What observers receive after a transition committed."""

    before: WorkflowRow | None
    after: WorkflowRow
    event: str
    actor: str


Observer = Callable[[TransitionEvent], None]
RejectionObserver = Callable[[str, str, str, StatewrightError], None]
"""``(workflow_id, state, event, error)`` for rejected transitions."""
StepObserver = Callable[[WorkflowRow, str, float], None]


class Observers:
    def __init__(self) -> None:
        self.transition: list[Observer] = []
        self.rejected: list[RejectionObserver] = []
        self.step: list[StepObserver] = []

    def transitioned(self, ev: TransitionEvent) -> None:
        log.info(
            "transition",
            extra={
                "action": "transition",
                "workflow_id": ev.after.id,
                "workflow_type": ev.after.type,
                "from_state": ev.before.state if ev.before else None,
                "to_state": ev.after.state,
                "event": ev.event,
                "actor": ev.actor,
                "version": ev.after.version,
            },
        )
        for fn in self.transition:
            try:
                fn(ev)
            except Exception:
                log.exception("transition observer failed", extra={"action": "observer_error"})

    def rejected_transition(
        self, workflow_id: str, state: str, event: str, error: StatewrightError
    ) -> None:
        log.warning(
            "transition rejected",
            extra={
                "action": "transition_rejected",
                "workflow_id": workflow_id,
                "state": state,
                "event": event,
                "code": error.code,
                "error": error.message,
            },
        )
        for fn in self.rejected:
            try:
                fn(workflow_id, state, event, error)
            except Exception:
                log.exception("rejection observer failed", extra={"action": "observer_error"})

    def persistence_failed(self, workflow_id: str, event: str, error: StatewrightError) -> None:
        log.error(
            "transition not persisted",
            extra={
                "action": "persistence_failure",
                "workflow_id": workflow_id,
                "event": event,
                "error": error.message,
            },
        )

    def step_finished(self, workflow: WorkflowRow, step: str, seconds: float) -> None:
        for fn in self.step:
            try:
                fn(workflow, step, seconds)
            except Exception:
                log.exception("step observer failed", extra={"action": "observer_error"})
