"""The built-in agent task lifecycle (PRODUCT §1).

planned -> running -> (paused | blocked | retrying) -> ... -> done | failed. Event
descriptions are written for the LLM that sees them as its next allowed actions.
"""

from __future__ import annotations

from statewright.definition.machine import Machine, MachineBuilder
from statewright.definition.validate import known_valid_schema
from statewright.errors import DefinitionError, Problem

__all__ = ["RETRY_BUDGET_GUARD", "agent_task_machine"]

RETRY_BUDGET_GUARD = "payload.attempt <= payload.max_attempts"
"""Guard on ``error_transient`` running -> retrying; past the budget it goes to failed."""

_AGENT = ("agent", "operator")
_APPROVER = ("approver",)
_TIMER = ("system", "operator")  # fired by durable timers; an operator may force them

_ERROR_TRANSIENT_SCHEMA = {
    "type": "object",
    "required": ["attempt", "max_attempts"],
    "properties": {
        "attempt": {
            "type": "integer",
            "minimum": 1,
            "description": "Which retry this would be: 1 for the first.",
        },
        "max_attempts": {
            "type": "integer",
            "minimum": 0,
            "description": "How many retries the task may make in all.",
        },
        "error": {"type": "string", "description": "What went wrong."},
        "retry_after": {
            "type": "number",
            "minimum": 0,
            "description": "Seconds to wait before retrying, if known.",
        },
    },
}


def agent_task_machine(
    name: str = "agent_task",
    version: int = 1,
    *,
    approval_timeout: float | None = 86400.0,
    approval_reminder: float | None = 82800.0,
    reprobe_interval: float | None = None,
) -> Machine:
    """Build the agent task lifecycle machine.

    Args:
        name: machine name (the workflow type).
        version: definition version.
        approval_timeout: seconds in ``paused`` before ``approval_timeout`` fails the task;
            None for no timeout.
        approval_reminder: seconds in ``paused`` before ``approval_reminder`` fires (a
            self-transition, e.g. to nudge approvers); None for no reminder. Must be shorter
            than ``approval_timeout``.
        reprobe_interval: seconds between re-checks of a blocked task's dependency: while
            ``blocked``, a recurring timer fires ``reprobe`` (a self-transition) this often, so
            the state's handler runs again and can fire ``dependency_ready`` once the
            dependency is there (``agent_task_type(dependency_probe=...)`` installs such a
            handler). None (the default): no re-probe, ``blocked`` waits for the event.

    Raises:
        DefinitionError: the reminder is not before the timeout, or a delay is not > 0.
    """
    if (
        approval_timeout is not None
        and approval_reminder is not None
        and approval_reminder >= approval_timeout
    ):
        raise DefinitionError(
            [
                Problem(
                    "invalid_after_delay",
                    f"approval_reminder ({approval_reminder}s) must be shorter than "
                    f"approval_timeout ({approval_timeout}s)",
                    state="paused",
                )
            ],
            machine=name,
        )
    paused_after: dict[float, str] = {}
    if approval_timeout is not None:
        paused_after[approval_timeout] = "approval_timeout"
    if approval_reminder is not None:
        paused_after[approval_reminder] = "approval_reminder"

    b = MachineBuilder(
        name,
        version,
        "An agent's task: planned, worked on, paused for a human, blocked on a dependency, "
        "retried after transient errors, and finally done or failed.",
    )
    b.state("planned", initial=True, description="Created; work has not started.")
    b.state("running", stuck_after=3600.0, description="The agent is working on the task.")
    b.state(
        "paused",
        after=paused_after,
        stuck_after=approval_timeout or 86400.0,
        description="Waiting for a human approver to grant or deny.",
    )
    b.state(
        "blocked",
        stuck_after=86400.0,
        description="Waiting for an external dependency to become ready.",
        every={} if reprobe_interval is None else {reprobe_interval: "reprobe"},
    )
    b.state(
        "retrying",
        stuck_after=3600.0,
        description="Backing off after a transient error before trying again.",
    )
    b.state("done", terminal=True, description="Finished successfully (final).")
    b.state("failed", terminal=True, description="Ended without success (final).")

    b.event("start", "Begin working on the planned task.", roles=_AGENT)
    b.event(
        "request_approval",
        "Stop and ask a human to approve before continuing. Use it whenever the next "
        "step needs sign-off. The task waits in 'paused' until a human approver decides; "
        "requesting approval never grants it.",
        roles=_AGENT,
    )
    b.event(
        "block",
        "The task cannot go on until an external dependency is ready (another task, a "
        "resource, an upstream fix). It waits in 'blocked' until dependency_ready.",
        roles=_AGENT,
    )
    b.event(
        "error_transient",
        "A transient failure (timeout, rate limit, 5xx) interrupted the work. Payload: "
        "'attempt' (which retry this would be, 1 for the first) and 'max_attempts' (the "
        "retry budget), optional 'error' and 'retry_after' (seconds). Goes to 'retrying' "
        "while attempt <= max_attempts, else to 'failed'.",
        roles=_AGENT,
        payload_schema=known_valid_schema(_ERROR_TRANSIENT_SCHEMA),
    )
    b.event(
        "complete",
        "All of the task's work is finished and checked. Fire it only when every part "
        "is done: 'done' is final.",
        roles=_AGENT,
    )
    b.event("fail", "Give up: the task cannot be completed. 'failed' is final.", roles=_AGENT)
    b.event(
        "approval_granted",
        "A human approver approved the paused task; work resumes in 'running'. Approvers only.",
        roles=_APPROVER,
        approval=True,
    )
    b.event(
        "approval_denied",
        "A human approver rejected the paused task; it ends in 'failed'. Approvers only.",
        roles=_APPROVER,
        approval=True,
    )
    b.event(
        "approval_timeout",
        "No approval decision came in time (fired by a timer); the task ends in 'failed'.",
        roles=_TIMER,
    )
    b.event(
        "approval_reminder",
        "Reminder while waiting for approval (fired by a timer); the task stays 'paused'.",
        roles=_TIMER,
    )
    b.event(
        "dependency_ready",
        "The dependency the task was blocked on is ready; work resumes in 'running'.",
        roles=_AGENT,
    )
    b.event(
        "fatal_error",
        "An unrecoverable error (bad input, permission denied, an outcome that cannot be "
        "known): retrying cannot help, so the task ends in 'failed'.",
        roles=_AGENT,
    )
    b.event(
        "cancel",
        "Someone cancelled the task (payload: reason); a running step may save partial "
        "results first; the task ends in 'failed'.",
        roles=("operator", "system"),
        payload_schema=known_valid_schema(
            {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "description": "Why it was cancelled."}
                },
            }
        ),
    )
    b.event("retry", "The backoff is over: try the work again in 'running'.", roles=_AGENT)
    if reprobe_interval is not None:
        b.event(
            "reprobe",
            "Check again whether the blocked task's dependency is ready (fired by a "
            "recurring timer); the task stays 'blocked' until dependency_ready.",
            roles=_TIMER,
        )
        b.transition("reprobe", "blocked", "blocked")
    b.event("retries_exhausted", "No retries are left; the task ends in 'failed'.", roles=_AGENT)

    b.transition("start", "planned", "running")
    b.transition("request_approval", "running", "paused")
    b.transition("block", "running", "blocked")
    b.transition(
        "error_transient",
        "running",
        "retrying",
        guard=RETRY_BUDGET_GUARD,
        description="Within the retry budget.",
    )
    b.transition("error_transient", "running", "failed", description="Retry budget spent.")
    b.transition("complete", "running", "done")
    b.transition("fail", "running", "failed")
    b.transition("approval_granted", "paused", "running")
    b.transition("approval_denied", "paused", "failed")
    b.transition("approval_timeout", "paused", "failed")
    b.transition("approval_reminder", "paused", "paused")
    b.transition("dependency_ready", "blocked", "running")
    b.transition("fatal_error", ["blocked", "retrying", "running"], "failed")
    b.transition("retry", "retrying", "running")
    b.transition("retries_exhausted", "retrying", "failed")
    b.transition("cancel", ["planned", "running", "paused", "blocked", "retrying"], "failed")
    return b.build()
