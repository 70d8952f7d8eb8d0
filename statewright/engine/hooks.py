"""Transition observers and structured logs. Observers never break a transition.

Observers are plain synchronous callables run right after the fact (a committed transition,
a refused one, a scheduled retry, a finished step), in the task that caused it: they must be
quick and must not do I/O. An observer that raises is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from statewright.engine.looplag import LagReport
from statewright.errors import StatewrightError
from statewright.types import WorkflowRow, quick_init

log = logging.getLogger("statewright.transitions")


StepRef = tuple[str, int] | tuple[None, None]
"""A step's name and attempt (the handler's last one), or ``(None, None)``: none."""
NO_STEP: StepRef = (None, None)


@quick_init
@dataclass(frozen=True)
class TransitionEvent:
    """What observers receive after a transition committed: the transition's record.

    Besides the rows, what answers "what happened, and how long did it take" (all from data
    at hand when the write returns; none costs a store read): :attr:`duration_ms`, the guard
    that chose the target, and the step (and its attempt) that the handler whose outcome this
    is ran last.
    """

    before: WorkflowRow | None
    after: WorkflowRow
    event: str
    actor: str
    guard: str | None = None
    """The name of the guard that chose the target (the edge taken was guarded); None for an
    unguarded edge, an operator's action, a start."""
    step: str | None = None
    """The last step the handler ran (an attempt it began, not a result it found recorded)
    in the run whose outcome this transition is; None when no handler ran a step (an external
    event, a timer, a handler without steps)."""
    attempt: int | None = None
    """That step's attempt (1 for its first run; the step ledger's count)."""

    @property
    def duration_ms(self) -> float | None:
        """Milliseconds in the state the workflow left: from when it entered it to this
        transition (for a self-transition, which keeps the state, the time in it so far);
        None for a start or a fork (no state before)."""
        before = self.before
        if before is None:
            return None
        return round(max(0.0, self.after.updated_at - before.state_entered_at) * 1000.0, 3)


@dataclass(frozen=True)
class Failure:
    """A failure of a workflow's handler or of one of its steps, as it happened (before the
    retry policy's write). Counted by ``statewright_failures_total``.

    ``kind``: ``"step"`` when a step's action raised (every attempt), ``"handler"`` when the
    state failed (the handler raised, returned an event the machine refused, ran past its
    deadline, or its worker was lost; a timer's event refused): whatever the retry policy
    applies to. ``error``: ``"transient"`` or ``"fatal"`` as the type's retry policy classifies
    it, or ``"unknown"`` for a step whose outcome is unknown. ``step``/``attempt``: the failed
    step, or for a handler the step it ran last (its failure is usually the handler's), None
    when it ran none.
    """

    workflow: WorkflowRow
    kind: str
    error: str
    step: str | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class ModelCall:
    """One fresh model call of an agent in ``workflow``'s state (or one a reconcile found, which
    no run had counted; never one read back from the step ledger): its model, tokens and cost
    (None: unknown). Counted by the
    ``statewright_llm_*`` metrics (see :func:`statewright.engine.llm_usage.observe`)."""

    workflow: WorkflowRow
    model: str
    input_tokens: int
    output_tokens: int
    cost: float | None = None


@dataclass(frozen=True)
class Rejection:
    """A refused transition (illegal event, bad payload, version conflict), with the workflow
    as the engine had read it when it knew it (None otherwise, e.g. a refused cancel)."""

    workflow_id: str
    state: str
    event: str
    error: StatewrightError
    workflow: WorkflowRow | None = None
    actor: str | None = None


@dataclass(frozen=True)
class RetryEvent:
    """A transient failure for which a retry was scheduled.

    ``failed`` is the row when its state failed; ``after`` the row with the attempt counted
    (``after.attempts``): a new state (e.g. ``retrying``) when the type has an ``on_transient``
    edge there, else the same state re-run in place after ``delay`` seconds.
    """

    failed: WorkflowRow
    after: WorkflowRow
    delay: float

    @property
    def in_place(self) -> bool:
        return self.after.version == self.failed.version


Observer = Callable[[TransitionEvent], None]
RejectionObserver = Callable[[str, str, str, StatewrightError], None]
"""``(workflow_id, state, event, error)`` for rejected transitions."""
RejectionDetailObserver = Callable[[Rejection], None]
RetryObserver = Callable[[RetryEvent], None]
StepObserver = Callable[[WorkflowRow, str, float], None]
FailureObserver = Callable[[Failure], None]
ModelCallObserver = Callable[[ModelCall], None]
LagObserver = Callable[[LagReport], None]
"""Called from a worker's watchdog thread when user code blocked its event loop."""


class Observers:
    def __init__(self) -> None:
        self.transition: list[Observer] = []
        self.rejected: list[RejectionObserver] = []
        self.rejections: list[RejectionDetailObserver] = []
        """Like ``rejected``, with the workflow row (type, tenant) and the actor when known."""
        self.not_applied: list[RejectionDetailObserver] = []
        """Events sent ``if_allowed`` that were not allowed now (not refusals: nothing is
        logged as a rejected transition for them)."""
        self.retry: list[RetryObserver] = []
        self.step: list[StepObserver] = []
        self.lag: list[LagObserver] = []
        self.failure: list[FailureObserver] = []
        """Told of every handler and step failure (:class:`Failure`)."""
        self.model_call: list[ModelCallObserver] = []
        """Told of every fresh model call of an agent (:class:`ModelCall`)."""

    def transitioned(self, ev: TransitionEvent) -> None:
        if log.isEnabledFor(logging.INFO):  # the record's fields cost nothing when unlogged
            self._log_transition(ev)
        for fn in self.transition:
            try:
                fn(ev)
            except Exception:
                log.exception("transition observer failed", extra={"action": "observer_error"})

    def _log_transition(self, ev: TransitionEvent) -> None:
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
                "duration_ms": ev.duration_ms,
                "guard": ev.guard,
                "step": ev.step,
                "attempt": ev.attempt,
            },
        )

    def rejected_transition(
        self,
        workflow_id: str,
        state: str,
        event: str,
        error: StatewrightError,
        *,
        workflow: WorkflowRow | None = None,
        actor: str | None = None,
    ) -> None:
        fields: dict[str, object] = {
            "action": "transition_rejected",
            "workflow_id": workflow_id,
            "state": state,
            "event": event,
            "code": error.code,
            "error": error.message,
        }
        if workflow is not None:
            fields["workflow_type"] = workflow.type
        if actor is not None:
            fields["actor"] = actor
        log.warning("transition rejected", extra=fields)
        for fn in self.rejected:
            try:
                fn(workflow_id, state, event, error)
            except Exception:
                log.exception("rejection observer failed", extra={"action": "observer_error"})
        if self.rejections:
            rejection = Rejection(workflow_id, state, event, error, workflow, actor)
            for detail in self.rejections:
                try:
                    detail(rejection)
                except Exception:
                    log.exception("rejection observer failed", extra={"action": "observer_error"})

    def event_not_applied(
        self, workflow: WorkflowRow, event: str, error: StatewrightError, actor: str
    ) -> None:
        """An event sent ``if_allowed`` was not allowed in ``workflow``'s state now (a late
        webhook, a duplicate callback): nothing changed, and it is no refusal."""
        log.info(
            "event not applied: not allowed now",
            extra={
                "action": "event_not_applied",
                "workflow_id": workflow.id,
                "workflow_type": workflow.type,
                "state": workflow.state,
                "event": event,
                "actor": actor,
                "version": workflow.version,
                "error": error.message,
            },
        )
        if self.not_applied:
            skipped = Rejection(workflow.id, workflow.state, event, error, workflow, actor)
            for fn in self.not_applied:
                try:
                    fn(skipped)
                except Exception:
                    log.exception(
                        "not-applied observer failed", extra={"action": "observer_error"}
                    )

    def retried(self, failed: WorkflowRow, after: WorkflowRow, delay: float) -> None:
        """A transient failure of ``failed``'s state was counted and a retry scheduled."""
        if not self.retry:
            return
        ev = RetryEvent(failed, after, delay)
        for fn in self.retry:
            try:
                fn(ev)
            except Exception:
                log.exception("retry observer failed", extra={"action": "observer_error"})

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

    def failed(
        self,
        workflow: WorkflowRow,
        kind: str,
        error: str,
        step: str | None = None,
        attempt: int | None = None,
    ) -> None:
        """A handler or step failure (see :class:`Failure`); nothing is built without
        observers."""
        if not self.failure:
            return
        failure = Failure(workflow, kind, error, step, attempt)
        for fn in self.failure:
            try:
                fn(failure)
            except Exception:
                log.exception("failure observer failed", extra={"action": "observer_error"})

    def model_called(
        self,
        workflow: WorkflowRow,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | None = None,
    ) -> None:
        """An agent in ``workflow``'s state made a fresh model call; nothing is built without
        observers."""
        if not self.model_call:
            return
        call = ModelCall(workflow, model, input_tokens, output_tokens, cost)
        for fn in self.model_call:
            try:
                fn(call)
            except Exception:
                log.exception("model call observer failed", extra={"action": "observer_error"})

    def loop_lagged(self, report: LagReport) -> None:
        """User code blocked a worker's event loop (called from the watchdog thread)."""
        for fn in self.lag:
            try:
                fn(report)
            except Exception:
                log.exception("lag observer failed", extra={"action": "observer_error"})
