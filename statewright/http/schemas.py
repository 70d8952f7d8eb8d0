"""Request and response bodies of the HTTP API (they are its OpenAPI document).

Request bodies forbid unknown fields, so a typo is a 422, not a silently ignored option.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$"
EVENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartIn(_In):
    type: str = Field(min_length=1, max_length=200, description="The workflow type (machine).")
    input: dict[str, Any] = Field(default_factory=dict, description="The initial context.")
    id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="A caller-chosen id makes the start idempotent.",
    )
    tenant: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="Only for tokens that see every tenant; others start in their own.",
    )


class EventIn(_In):
    event: str = Field(pattern=EVENT_PATTERN)
    payload: dict[str, Any] = Field(default_factory=dict)
    expected_version: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="Refuse (409 version_conflict) unless the workflow is at this version.",
    )


class ApprovalIn(_In):
    workflow_id: str = Field(pattern=ID_PATTERN)
    decision: Literal["approve", "deny"]
    approver: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The person deciding, when a service relays it (default: the caller).",
    )
    comment: str | None = Field(default=None, max_length=10_000)
    expected_version: int | None = Field(default=None, ge=1, le=2**31 - 1)


class CancelIn(_In):
    reason: str = Field(min_length=1, max_length=10_000)


class InputIn(_In):
    name: str = Field(pattern=EVENT_PATTERN)
    payload: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    code: str = Field(description="Stable, machine-readable error code.")
    message: str
    model_config = ConfigDict(extra="allow")


class ErrorOut(BaseModel):
    error: ErrorBody


class WorkflowOut(BaseModel):
    id: str
    type: str
    machine_version: int
    tenant: str
    state: str
    terminal: bool
    version: int
    attempts: int
    created_at: float
    updated_at: float
    state_entered_at: float
    next_due_at: float | None
    leased_by: str | None
    last_error: str | None
    cancel_requested: bool
    progress: dict[str, Any] | None
    summary: Any = Field(description="The context, shaped: long values cut, deep ones elided.")
    allowed_events: list[str] | None = Field(
        default=None, description="Events that could fire now and that the caller may fire."
    )
    stuck: bool | None = None


class WorkflowList(BaseModel):
    items: list[WorkflowOut]
    limit: int
    offset: int


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


class TransitionPage(BaseModel):
    items: list[TransitionOut]
    cursor: int = Field(description="Pass as ?after= to continue after these.")


class StepOut(BaseModel):
    key: str
    step: str
    status: str
    result: Any
    error: str | None
    attempts: int
    started_at: float
    finished_at: float | None


class StuckOut(BaseModel):
    workflow: WorkflowOut
    age: float
    threshold: float


class StuckCount(BaseModel):
    type: str
    state: str
    count: int
    oldest_age: float


class WorkflowHealth(BaseModel):
    status: Literal["ok", "stuck"]
    stuck: int
    by_state: list[StuckCount]


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


class TypeOut(BaseModel):
    name: str
    version: int
    description: str
    states: list[StateInfo]
    events: list[EventInfo]


class InputPosted(BaseModel):
    id: int


class Probe(BaseModel):
    status: Literal["ok", "unavailable"]
    store: str | None = None
    worker: str | None = None
