"""Response bodies of the HTTP API (part of its OpenAPI document; the request bodies are in
:mod:`statewright.http.inputs`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ErrorBody(BaseModel):
    code: str = Field(description="Stable, machine-readable error code.")
    message: str
    model_config = ConfigDict(extra="allow")


class ErrorOut(BaseModel):
    error: ErrorBody


class ChildCounts(BaseModel):
    total: int = Field(description="Children counted (all of them unless `more`).")
    live: int = Field(description="Of those, the ones not ended.")
    ended: int = Field(description="Of those, the ones ended (succeeded or not).")
    failed: int = Field(description="Of the ended ones, those that ended failed or cancelled.")
    more: bool = Field(
        description="More children than were counted: the counts are those of the first 100 "
        "by id (page through GET /v1/workflows/{id}/children for the rest)."
    )
    text: str = Field(description="The counts in a few words: `2 of 3 children done`.")


class UsageTotals(BaseModel):
    input_tokens: int
    output_tokens: int
    tokens: int = Field(description="Input and output tokens.")
    cost: float = Field(description="In USD; calls of unknown cost add nothing.")
    model_calls: int


class Usage(BaseModel):
    total: UsageTotals
    by_state: dict[str, UsageTotals] = Field(description="By the state the calls were made in.")
    by_model: dict[str, UsageTotals]


class WorkflowOut(BaseModel):
    id: str
    type: str
    machine_version: int
    tenant: str
    state: str
    terminal: bool
    version: int
    attempts: int
    total_attempts: int = Field(description="Failures over the workflow's whole life.")
    created_at: float
    updated_at: float
    state_entered_at: float
    next_due_at: float | None
    leased_by: str | None
    last_error: str | None
    cancel_requested: bool
    parked: str | None = Field(
        description="Why it waits for an operator (step_outcome_unknown, fatal_error, "
        "error_event_refused, cancel_refused), or null."
    )
    progress: dict[str, Any] | None
    summary: Any = Field(
        description="The context, shaped: long values cut, deep ones elided, without the keys "
        "starting with `_` and those its type redacts; or the object its type's summary gives."
    )
    summary_text: str | None = Field(
        default=None, description="A short text its type's summary gives, or null."
    )
    parent: str | None = Field(
        description="The workflow that started this one as its child (its id as the caller "
        "knows it), or null."
    )
    parent_key: str | None = Field(
        description="The key the parent started it under (its id is `<parent>.<key>`), or null."
    )
    search_attributes: dict[str, str] = Field(
        default_factory=dict,
        description="Its search attributes (name -> value as text), from its context.",
    )
    version_registered: bool = Field(
        default=True,
        description="False when this server does not have the workflow's machine version "
        "(an old version after an upgrade): it is shown, but no event can be fired on it.",
    )
    allowed_events: list[str] | None = Field(
        default=None, description="Events that could fire now and that the caller may fire."
    )
    stuck: bool | None = Field(
        default=None,
        description="Parked for an operator (from the moment it parks), or in its state past "
        "the state's threshold.",
    )
    operator_actions: list[Literal["resolve_step", "resume", "fork", "move"]] | None = Field(
        default=None,
        description="The operator actions the caller may take on it now (the dashboard's "
        "buttons): `resume`, or `resolve_step` instead for a workflow parked because a "
        "step's outcome is unknown (resuming would park it again), `fork`, and for admins "
        "`move`; empty without the operator or admin role.",
    )
    unresolved_steps: list[str] | None = Field(
        default=None,
        description="Only from GET /v1/workflows/{id}, for a workflow parked with "
        "step_outcome_unknown: the steps whose outcome is unknown, to resolve (POST "
        ".../steps/{step}/resolve); absent otherwise.",
    )
    children: ChildCounts | None = Field(
        default=None,
        description="Only from GET /v1/workflows/{id}: how many children it started and how "
        "many ended (what a parent waits for), counted over its first 100 children; the "
        "children themselves: GET /v1/workflows/{id}/children. Null over a store that keeps "
        "no children.",
    )
    usage: Usage | None = Field(
        default=None,
        description="Only from GET /v1/workflows/{id}, for a workflow whose agents called a "
        "model: the tokens, cost and calls of those calls, in total, by state and by model; "
        "absent otherwise.",
    )
    reached: bool | None = Field(
        default=None,
        description="Only from a long-polling GET /v1/workflows/{id}: it is in a state of "
        "`wait_for_state` or past `after_version`.",
    )
    timed_out: bool | None = Field(
        default=None,
        description="Only from a long-polling GET: the timeout passed first; the workflow is "
        "as it is now.",
    )
    waited: float | None = Field(
        default=None, description="Only from a long-polling GET: seconds it waited."
    )


NEXT_CURSOR = (
    "Pass as ?cursor= for the next page (the same filters); null: this was the last page."
)


class WorkflowList(BaseModel):
    items: list[WorkflowOut]
    limit: int
    offset: int
    next_cursor: str | None = Field(description=NEXT_CURSOR)


class TransitionOut(BaseModel):
    seq: int
    workflow_id: str
    version: int
    from_state: str | None
    to_state: str
    event: str
    payload: dict[str, Any]
    actor: str
    context_patch: dict[str, Any] | None
    at: float


class HistoryPage(BaseModel):
    items: list[TransitionOut] = Field(description="Log entries in version order.")
    next_cursor: str | None = Field(
        description="Pass as ?after= for the next page (it is the last entry's version); "
        "null: this was the last page."
    )


class TransitionPage(BaseModel):
    items: list[TransitionOut]
    cursor: int = Field(description="Pass as ?after= to continue after these.")


class StepOut(BaseModel):
    key: str = Field(
        description="`<store id>:<step>`, the key external systems were given (a tenant's "
        "workflow `order-1` is kept as `tenant:order-1`)."
    )
    step: str
    status: str
    outcome: Literal["not_applied", "unknown"] | None = Field(
        description="Of a failed step: not_applied (safe to run again) or unknown (it may "
        "have taken effect: reconcile it, or resolve it by hand)."
    )
    result: Any
    error: str | None
    attempts: int
    started_at: float
    finished_at: float | None
    compensation: str | None = Field(
        None,
        description="The name of the step's undo (`run.step(..., compensate=fn)`), run by a "
        "compensating transition once the step is done.",
    )
    compensates: str | None = Field(
        None,
        description="Of a compensation (the step `undo.<step>`): the step it undoes.",
    )


class StuckOut(BaseModel):
    workflow: WorkflowOut
    age: float
    threshold: float
    parked: str | None = Field(
        description="Why it waits for an operator (step_outcome_unknown, fatal_error, "
        "error_event_refused, cancel_refused; stuck from the moment it parks), or null: it "
        "has sat in its state past the threshold."
    )
    action: Literal["resolve_step", "resume", "investigate"] = Field(
        description="What to do: `resolve_step` (the outcome of `step` is unknown: POST "
        ".../steps/{step}/resolve, applied with its result or not applied; that resumes it), "
        "`resume` (parked for another reason: fix the cause, then POST .../resume), or "
        "`investigate` (not parked: see why it has not moved)."
    )
    step: str | None = Field(description="The step to resolve (action `resolve_step`).")
    hint: str = Field(description="What to do, as a sentence.")


class StepPage(BaseModel):
    items: list[StepOut] = Field(description="Steps in (started_at, key) order.")
    next_cursor: str | None = Field(description=NEXT_CURSOR)


class StuckPage(BaseModel):
    items: list[StuckOut] = Field(
        description="By type, state, time entered (oldest first) and id."
    )
    next_cursor: str | None = Field(description=NEXT_CURSOR)


class StuckCount(BaseModel):
    type: str
    state: str
    count: int
    oldest_age: float


class ParkedCount(BaseModel):
    type: str
    state: str
    reason: str = Field(description="Why they wait (step_outcome_unknown, fatal_error, ...).")
    count: int
    oldest_age: float


class VersionCount(BaseModel):
    type: str
    machine_version: int
    count: int


class WorkflowHealth(BaseModel):
    status: Literal["ok", "stuck"]
    stuck: int = Field(
        description="Workflows past their state's threshold, or parked for an operator "
        "(whatever their age): a true count."
    )
    by_state: list[StuckCount]
    parked: int = Field(
        description="Workflows waiting for an operator, whatever their age (each is stuck "
        "too: counted in `stuck`)."
    )
    parked_by_state: list[ParkedCount]
    unregistered: int = Field(
        default=0,
        description="Live workflows on a machine version this server does not register (an "
        "old version after an upgrade): nothing runs them here; migrate them.",
    )
    unregistered_by_version: list[VersionCount] = Field(default_factory=list)


class EventInfo(BaseModel):
    name: str
    description: str
    roles: list[str]
    approval: bool
    payload_schema: dict[str, Any] | None
    may_fire: bool = Field(description="Whether the caller's roles allow firing it.")


class StateInfo(BaseModel):
    name: str
    description: str
    terminal: bool
    initial: bool
    stuck_after: float | None
    within: list[str] = Field(default_factory=list, description="Compound states around it.")


class TypeOut(BaseModel):
    name: str
    version: int
    description: str
    states: list[StateInfo]
    events: list[EventInfo]
    search_attributes: list[str] = Field(
        default_factory=list,
        description="The context fields its workflows can be listed by (`where=name=value`).",
    )
    input_schema: dict[str, Any] | None = Field(
        default=None,
        description="The JSON Schema a start's `input` must satisfy (null: any object); a "
        "start that fails it is refused with 422 input_not_accepted listing its `errors`.",
    )
    cancel_event: str | None = Field(
        default=None, description="The event a cancel fires (null: the type cannot be cancelled)."
    )
    may_start: bool = Field(
        default=False, description="Whether the caller may start workflows of this type."
    )


class EventOut(WorkflowOut):
    """The workflow after an event that was applied (or, for a retry, had been)."""

    applied: Literal[True] = Field(
        default=True, description="The event was applied (always true here)."
    )


class Refusal(BaseModel):
    """Why an event sent with ``?if_allowed=true`` was not applied."""

    event: str
    reason: str | None = Field(
        description="`terminal state`, `no guard passed: ...`, or null (no edge from the "
        "workflow's state)."
    )


class EventNotApplied(WorkflowOut):
    """An event sent with ``?if_allowed=true`` that the workflow's state did not allow: nothing
    changed (a late webhook, a duplicate callback). The workflow as it is, in the shape of
    every other answer, with ``applied: false`` and the ``refusal``: the event and why (the
    ``state`` and the ``allowed_events`` are the workflow's own fields)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "order-1001",
                    "state": "cancelled",
                    "allowed_events": [],
                    "...": "...",
                    "applied": False,
                    "refusal": {"event": "payment_captured", "reason": "terminal state"},
                }
            ]
        }
    )

    applied: Literal[False] = Field(description="The event was not applied (always false here).")
    refusal: Refusal


class InputPosted(BaseModel):
    id: int


class Probe(BaseModel):
    status: Literal["ok", "unavailable"]
    store: str | None = None
    worker: str | None = None


class TimerOut(BaseModel):
    id: int
    key: str | None = Field(description="Its name, for a scheduled timer; null for a state's.")
    event: str
    due_at: float
    payload: dict[str, Any]
    every: float | None = Field(description="A recurring timer's interval in seconds.")
    keep: bool
    scheduled_by: str | None = Field(
        default=None,
        description="Who scheduled it: the transition it makes is logged as `timer for "
        "<scheduled_by>`; null for the system's own (a state's, a handler's).",
    )


class TimerList(BaseModel):
    items: list[TimerOut] = Field(description="Timers by due time (earliest first), then id.")
    next_cursor: str | None = Field(default=None, description=NEXT_CURSOR)


class TimerRemoved(BaseModel):
    removed: bool
