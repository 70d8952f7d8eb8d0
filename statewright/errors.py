"""One exception tree for every layer.

Each class's docstring is its default message and each carries a stable ``code`` that the CLI,
HTTP and MCP surfaces map to responses. Attributes carry the facts (state, event, versions) so
callers never parse messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


class StatewrightError(Exception):
    """A statewright operation failed."""

    code: ClassVar[str] = "statewright_error"
    as_given: bool = False
    """True when the message names ids as the caller gave them, not as the store keeps them:
    the surfaces then leave it as it is (see ``Access.public_error``)."""

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details: dict[str, Any] = details
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description: ``{"code", "message", **details}``."""
        return {"code": self.code, "message": self.message, **self.details}


# --- definition ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a machine definition."""

    code: str
    message: str
    state: str | None = None
    event: str | None = None

    def __str__(self) -> str:
        return self.message


class DefinitionError(StatewrightError):
    """The machine definition is invalid."""

    code = "definition_invalid"

    def __init__(self, problems: Iterable[Problem] | str, machine: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [Problem("invalid", problems)]
        self.problems: list[Problem] = list(problems)
        self.machine = machine
        head = f"machine {machine!r} is invalid" if machine else "definition is invalid"
        lines = "; ".join(p.message for p in self.problems)
        super().__init__(
            f"{head}: {lines}",
            machine=machine,
            problems=[
                {"code": p.code, "message": p.message, "state": p.state, "event": p.event}
                for p in self.problems
            ],
        )


class IllegalTransition(StatewrightError):
    """The event is not allowed in the current state."""

    code = "illegal_transition"

    def __init__(
        self,
        state: str,
        event: str,
        allowed: Sequence[str] = (),
        reason: str | None = None,
        workflow_id: str | None = None,
    ) -> None:
        self.state = state
        self.event = event
        self.allowed = list(allowed)
        self.reason = reason
        self.workflow_id = workflow_id
        why = f" ({reason})" if reason else ""
        allowed_txt = ", ".join(self.allowed) or "none"
        super().__init__(
            f"event {event!r} is not allowed in state {state!r}{why}; allowed: {allowed_txt}",
            state=state,
            event=event,
            allowed=self.allowed,
            reason=reason,
            workflow_id=workflow_id,
        )


class InvalidPayload(StatewrightError):
    """The event payload does not match the event's schema."""

    code = "invalid_payload"

    def __init__(self, event: str, message: str, path: str = "") -> None:
        self.event = event
        self.path = path
        where = f" at {path}" if path else ""
        super().__init__(
            f"payload of event {event!r} is invalid{where}: {message}",
            event=event,
            path=path,
        )


class ActionFailed(InvalidPayload):
    """A transition's ``assign`` action could not compute its context update (an expression
    met a value of the wrong type, a Python action raised or returned something that is not
    a JSON object). The transition is refused and nothing changes, like an invalid payload."""

    code = "action_failed"

    def __init__(self, event: str, action: str, message: str) -> None:
        self.event = event
        self.path = ""
        self.action = action
        StatewrightError.__init__(
            self,
            f"action {action!r} of event {event!r} failed: {message}",
            event=event,
            action=action,
        )


class InvalidInput(StatewrightError):
    """An argument is malformed."""

    code = "invalid_input"


class InputNotAccepted(InvalidInput):
    """A start's input does not satisfy its workflow type's ``input_schema``: nothing was
    written. ``errors`` lists each failure as ``{"path", "message"}`` (``path`` as in
    :class:`InvalidPayload`: ``/``-separated, empty for the input itself)."""

    code = "input_not_accepted"

    def __init__(self, workflow_type: str, errors: Sequence[Mapping[str, str]]) -> None:
        self.workflow_type = workflow_type
        self.errors = [dict(e) for e in errors]
        first = self.errors[0] if self.errors else {"path": "", "message": "invalid"}
        where = f" at {first['path']}" if first["path"] else ""
        more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        super().__init__(
            f"input of workflow type {workflow_type!r} is invalid{where}: "
            f"{first['message']}{more}",
            workflow_type=workflow_type,
            errors=self.errors,
        )


class InputNotExpected(InvalidInput):
    """An input posted to a workflow that no handler would ever read: neither its state nor
    any state reachable from it has one. Refused, nothing written (it would wait in the inbox
    unread). Inputs are for handlers that wait for them (``run.wait_input`` /
    ``run.next_input``); a workflow in states without handlers moves on events."""

    code = "input_not_expected"

    def __init__(self, workflow_id: str, state: str, name: str) -> None:
        self.workflow_id = workflow_id
        self.state = state
        self.name = name
        super().__init__(
            f"workflow {workflow_id!r} is in state {state!r}: neither it nor any state "
            f"after it has a handler to take input {name!r} (send the workflow an event "
            "instead)",
            workflow_id=workflow_id,
            state=state,
            input=name,
        )


class UnknownState(InvalidInput):
    """The machine has no such state (a move by hand, a diagram of a state, a migration map
    naming a state the target version lacks)."""

    code = "unknown_state"


class UnknownSearchAttribute(InvalidInput):
    """A listing filters by a search attribute its type (or, with no type, every registered
    type) does not declare: refused rather than answered with nothing."""

    code = "unknown_search_attribute"


class VersionNotFound(InvalidInput):
    """The workflow's log has no such version (a fork from a version it never reached)."""

    code = "version_not_found"


class ValueTooDeep(InvalidInput):
    """A JSON value nests deeper than the engine's ``max_depth``."""

    code = "value_too_deep"


class ValueTooLarge(InvalidInput):
    """A JSON value's encoding is larger than the engine's ``max_bytes``."""

    code = "value_too_large"


class Unauthorized(StatewrightError):
    """No valid API token was presented."""

    code = "unauthorized"


class Forbidden(StatewrightError):
    """The caller's roles do not allow this action; nothing was changed."""

    code = "forbidden"


class UnknownTool(StatewrightError):
    """No MCP tool has this name."""

    code = "unknown_tool"


# --- store -----------------------------------------------------------------------------------


class StoreError(StatewrightError):
    """The store could not complete the operation; nothing was changed."""

    code = "store_error"


class VersionConflict(StatewrightError):
    """The workflow changed since it was read: the transition was not applied."""

    code = "version_conflict"

    def __init__(self, workflow_id: str, expected: int, actual: int | None) -> None:
        self.workflow_id = workflow_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"workflow {workflow_id!r} is at version {actual}, not {expected}: "
            "it changed since it was read; re-read and retry",
            workflow_id=workflow_id,
            expected=expected,
            actual=actual,
        )


class WorkflowNotFound(StatewrightError):
    """No workflow has this id."""

    code = "workflow_not_found"

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        super().__init__(f"no workflow with id {workflow_id!r}", workflow_id=workflow_id)


class WorkflowExists(StatewrightError):
    """A workflow with this id exists with a different type."""

    code = "workflow_exists"

    def __init__(self, workflow_id: str, existing_type: str, requested_type: str) -> None:
        self.workflow_id = workflow_id
        super().__init__(
            f"workflow {workflow_id!r} already exists as type {existing_type!r}, "
            f"not {requested_type!r}",
            workflow_id=workflow_id,
            existing_type=existing_type,
            requested_type=requested_type,
        )


class DefinitionChanged(StatewrightError):
    """A machine version's definition is not the one the store recorded for it: workflows on
    that version would no longer mean what their rows and logs say. Give the changed
    definition a new version (and migrate), restore the old one, or, for an edit that only
    adds states, events or edges, open with ``Engine(allow_compatible_changes=True)``."""

    code = "definition_changed"

    def __init__(self, machine: str, version: int, changes: list[str]) -> None:
        self.machine = machine
        self.version = version
        self.changes = changes
        super().__init__(
            f"machine {machine!r} version {version} changed since it was registered in this "
            f"store ({'; '.join(changes)}): give it a new version (and migrate its workflows), "
            "or restore it; an edit that only adds may be allowed with "
            "allow_compatible_changes=True",
            machine=machine,
            version=version,
            changes=changes,
        )


class ReplayMismatch(StatewrightError):
    """Replaying the transition log does not give the stored row."""

    code = "replay_mismatch"


# --- engine ----------------------------------------------------------------------------------


class UnknownWorkflowType(StatewrightError):
    """No workflow type is registered under this name (and version)."""

    code = "unknown_workflow_type"

    def __init__(
        self, name: str, version: int | None = None, known: Sequence[str] | None = None
    ) -> None:
        self.name = name
        self.version = version
        v = f" version {version}" if version is not None else ""
        # What is registered, so a typo is seen at once: the types (any caller may read
        # them), or the versions of this one.
        hint = f" (known: {', '.join(known)})" if known else ""
        super().__init__(f"unknown workflow type {name!r}{v}{hint}", name=name, version=version)


class TransientError(StatewrightError):
    """A transient failure (timeout, 429, 503): the work may be retried after a backoff.

    Args:
        retry_after: seconds the remote system asked us to wait (``Retry-After``), if any.
    """

    code = "transient_error"

    def __init__(self, message: str | None = None, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message, retry_after=retry_after)


class FatalError(StatewrightError):
    """A fatal failure (422, 403, bad data): retrying cannot help."""

    code = "fatal_error"


class TransactionUnavailable(FatalError):
    """Transactional steps are not available here: the store cannot run user code in its
    transaction, or the tables named are not in its database. Use ``run.step`` with an
    idempotency key (the step's key) for writes to another database instead."""

    code = "transaction_unavailable"


class TransactionFailed(StatewrightError):
    """A transactional step raised: the transition it rode with was rolled back whole (its
    log entry, timers, step record and the application's rows), nothing of it committed.

    Attributes:
        step: the transactional step's name.
        error: what its function raised (the handler run fails with it: the type's retry
            policy applies).
    """

    code = "transaction_failed"

    def __init__(self, step: str, error: BaseException) -> None:
        self.step = step
        self.error = error
        super().__init__(
            f"transactional step {step!r} raised {type(error).__name__}: {error}; its "
            "transition was rolled back",
            step=step,
        )


class RequestNotSent(TransientError):
    """The request never reached the other side: nothing was applied, so the step may simply run again."""  # noqa: E501 (one line: the docstring is the default message)

    code = "request_not_sent"


class StepOutcomeUnknown(FatalError):
    """A step was interrupted mid-flight and its outcome cannot be established safely."""

    code = "step_outcome_unknown"

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"step {key!r} was interrupted while executing, no reconcile hook could tell its "
            "outcome, and it is not declared safe to repeat",
        )
        self.details["key"] = key


class CompensationNotFound(FatalError):
    """A completed step's compensation cannot be found in this process by the name recorded
    with it (registered on no type, not importable): the workflow is parked for an operator,
    never left uncompensated silently."""

    code = "compensation_not_found"

    def __init__(self, step: str, name: str) -> None:
        self.step, self.compensation = step, name
        super().__init__(
            f"the compensation {name!r} of step {step!r} cannot be found: name it in the "
            "type's compensations, or make it importable by that module:qualname",
        )
        self.details.update(step=step, name=name)


class NotParked(StatewrightError):
    """A bulk resume met a workflow that is not parked: nothing to resume (skipped; never
    raised out of :func:`bulk`)."""

    code = "not_parked"


class NoEventChosen(FatalError):
    """An agent finished without choosing one of the state's events.

    Fatal: a re-run replays the same stored responses and ends the same way. An adapter's
    ``on_no_event`` names an event to fire instead (see :mod:`statewright.agents`)."""

    code = "no_event_chosen"


class BudgetExceeded(StatewrightError):
    """A budget of the workflow's type is reached: the model is not called again, and the
    handler's outcome is the budget's event."""

    code = "budget_exceeded"

    def __init__(self, budget: Any, totals: Any, state: str | None = None) -> None:
        # ``budget``: a :class:`~statewright.engine.budgets.Budget`; ``totals``: the
        # :class:`~statewright.engine.budgets.Totals` it counted (typed loosely: errors are
        # below every layer and import none of them).
        self.budget, self.totals, self.state = budget, totals, state
        where = f" in state {state!r}" if state else ""
        super().__init__(
            f"budget reached{where} ({budget.per}): {totals.tokens} tokens, "
            f"{round(totals.cost, 6)} cost, {totals.model_calls} model calls; "
            f"firing {budget.event!r}",
        )
        self.details.update(budget=budget.to_dict(), usage=totals.to_dict(), state=state)

    @property
    def event(self) -> str:
        """The event the budget fires."""
        return str(self.budget.event)


class Cancelled(BaseException):
    """The workflow was cancelled. A ``BaseException`` so ``except Exception`` cannot eat it."""

    code: ClassVar[str] = "cancelled"


# --- the exactly-once contract -----------------------------------------------------------------


class OutcomeUnknown(StoreError):
    """The store may or may not have applied the write: the connection was lost after the
    request was sent (e.g. after COMMIT reached the server). Retry with the same idempotency
    key: a key already applied returns the first result and applies nothing again."""

    code = "outcome_unknown"


class LeaseLost(StatewrightError):
    """This worker's lease on the workflow is gone (recovered by another worker after it
    lapsed, or claimed anew): the write was refused and nothing changed."""

    code = "lease_lost"

    def __init__(self, workflow_id: str, message: str | None = None) -> None:
        self.workflow_id = workflow_id
        super().__init__(
            message
            or f"the lease on workflow {workflow_id!r} is gone: another worker took it over",
            workflow_id=workflow_id,
        )


class IdempotencyKeyReused(StatewrightError):
    """This idempotency key was used for another request on this workflow."""

    code = "idempotency_key_reused"

    def __init__(self, workflow_id: str, key: str, detail: str) -> None:
        self.workflow_id = workflow_id
        self.key = key
        super().__init__(
            f"idempotency key {key!r} was already used on workflow {workflow_id!r} for "
            f"{detail}; use a new key for a new request",
            workflow_id=workflow_id,
            idempotency_key=key,
        )


class WorkflowFinished(StatewrightError):
    """The workflow has ended (terminal state): it takes no more inputs."""

    code = "workflow_finished"

    def __init__(self, workflow_id: str, state: str) -> None:
        self.workflow_id = workflow_id
        self.state = state
        super().__init__(
            f"workflow {workflow_id!r} has finished (state {state!r}) and takes no more inputs",
            workflow_id=workflow_id,
            state=state,
        )


class DeadlineExceeded(TransientError):
    """A handler or step ran past its deadline. Its outcome is unknown: steps it left
    unfinished are reconciled before anything runs again."""

    code = "deadline_exceeded"


class StepNotFound(StatewrightError):
    """The workflow's step ledger has no such step."""

    code = "step_not_found"


class TimerNotFound(StatewrightError):
    """The workflow has no pending timer of that key (it fired, was cancelled, or never
    was)."""

    code = "timer_not_found"

    def __init__(self, workflow_id: str, key: str) -> None:
        self.workflow_id = workflow_id
        self.key = key
        super().__init__(
            f"workflow {workflow_id!r} has no pending timer {key!r}",
            workflow_id=workflow_id,
            key=key,
        )


class ScheduleNotFound(StatewrightError):
    """There is no schedule of that id."""

    code = "schedule_not_found"

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"no schedule {schedule_id!r}", schedule_id=schedule_id)


class SubscriptionNotFound(StatewrightError):
    """There is no subscription of that name (or it is another kind: a consumer's, asked
    for as a webhook's)."""

    code = "subscription_not_found"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no subscription {name!r}", name=name)


class SubscriptionGone(StatewrightError):
    """A consumer's subscription was deleted while it read, or the name is a webhook's."""

    code = "subscription_gone"


class InvalidSubscription(InvalidInput):
    """A subscription's name, target (URL or consumer), headers or filter is not valid."""

    code = "invalid_subscription"


class InvalidSchedule(InvalidInput):
    """A schedule's cron expression, time zone, catch-up policy or id is not valid."""

    code = "invalid_schedule"


class InvalidCursor(InvalidInput):
    """A page cursor that no page returned: pass ``next_cursor`` exactly as a previous page
    returned it. (Over HTTP a 409, like ``invalid_schedule``: a cursor of the documented
    characters is schema-valid, and a schema-valid request is never answered 422.)"""

    code = "invalid_cursor"


class StepDone(StatewrightError):
    """The step is done: its result stands and cannot be resolved again."""

    code = "step_done"


class WorkflowBusy(StatewrightError):
    """A worker holds the workflow now: try again once it lets go."""

    code = "workflow_busy"


class StepUnresolved(StatewrightError):
    """A step of the workflow has an unknown outcome (its call may have happened): resolve it
    first (applied, with its result, or not applied)."""

    code = "step_unresolved"

    def __init__(self, workflow_id: str, steps: Sequence[str], *, action: str = "resume") -> None:
        self.workflow_id = workflow_id
        self.steps = list(steps)
        names = ", ".join(repr(s) for s in self.steps)
        first = self.steps[0] if self.steps else "STEP"
        why = (
            "a fork would call it again under the fork's own key, which no reconcile hook or "
            "deduplicating service has seen"
            if action == "fork"
            else "resuming it would park it again"
        )
        super().__init__(
            f"workflow {workflow_id!r}: the outcome of step {names} is unknown (its call may "
            f"have happened); {why}. Check the external system, then resolve the step on this "
            f"workflow (`statewright resolve-step {workflow_id} {first} --applied RESULT_JSON | "
            f"--not-applied`, POST /v1/workflows/{workflow_id}/steps/{first}/resolve): applied "
            "(with its result) or not applied (it runs again)",
            workflow_id=workflow_id,
            steps=self.steps,
        )


class StepsWouldRerun(StatewrightError):
    """Forking from this version runs again the steps done after it: say so to fork."""

    code = "steps_would_rerun"

    def __init__(self, workflow_id: str, version: int, steps: Sequence[str]) -> None:
        self.workflow_id = workflow_id
        self.version = version
        self.steps = list(steps)
        names = ", ".join(repr(s) for s in self.steps)
        super().__init__(
            f"forking workflow {workflow_id!r} from version {version} runs again the steps "
            f"it did after that version ({names}), under the fork's own keys: their effects "
            "(a charge, an email) happen a second time. Fork with rerun_steps=True "
            '(--rerun-steps, "rerun_steps": true) if that is what you want',
            workflow_id=workflow_id,
            version=version,
            steps=self.steps,
        )


class WorkflowPruned(StatewrightError):
    """A workflow with this id existed and was pruned: the id is not used again."""

    code = "workflow_pruned"

    def __init__(self, workflow_id: str, idempotency_key: str | None = None) -> None:
        self.workflow_id = workflow_id
        self.idempotency_key = idempotency_key
        named = f"workflow {workflow_id!r}" + (
            "" if idempotency_key is None else f" (idempotency key {idempotency_key!r})"
        )
        super().__init__(
            f"{named} was started before, finished and has been pruned: its id is not used "
            "again (a retried start must not run its steps a second time under the same "
            "keys); import it from the prune's archive to see it",
            workflow_id=workflow_id,
            idempotency_key=idempotency_key,
        )


# --- tools -----------------------------------------------------------------------------------


class DemoWorkerFailed(StatewrightError):
    """The demo's worker process failed before it could be killed."""

    code = "demo_worker_failed"
