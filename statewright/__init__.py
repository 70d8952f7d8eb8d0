"""statewright: durable, explicit state machines for AI-agent and backend workflows."""

from __future__ import annotations

import logging

from statewright.clock import Clock, ManualClock, SystemClock
from statewright.definition.machine import (
    Assign,
    Event,
    Guard,
    Machine,
    MachineBuilder,
    State,
    Transition,
)
from statewright.engine import (
    Applied,
    Engine,
    Next,
    NotApplied,
    RetryPolicy,
    Run,
    Worker,
    WorkflowType,
    agent_task_type,
)
from statewright.engine.steps import Input, StepKey, SyncRun
from statewright.engine.transitions import Dispatched
from statewright.errors import (
    ActionFailed,
    Cancelled,
    DeadlineExceeded,
    DefinitionError,
    FatalError,
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    LeaseLost,
    OutcomeUnknown,
    ReplayMismatch,
    RequestNotSent,
    StatewrightError,
    StepDone,
    StepNotFound,
    StepOutcomeUnknown,
    StoreError,
    TimerNotFound,
    TransientError,
    UnknownWorkflowType,
    ValueTooDeep,
    ValueTooLarge,
    VersionConflict,
    WorkflowBusy,
    WorkflowExists,
    WorkflowFinished,
    WorkflowNotFound,
)
from statewright.jsonvalue import Limits
from statewright.store import SQLiteStore, Store, store_from_url
from statewright.sync import SyncEngine
from statewright.types import TransitionRecord, WorkflowFilter, WorkflowRow

__version__ = "0.1.0"

# A library does not configure logging; this keeps Python's last-resort handler from printing
# our WARNINGs to stderr in scripts that never set logging up.
logging.getLogger("statewright").addHandler(logging.NullHandler())

__all__ = [
    "ActionFailed",
    "Applied",
    "Assign",
    "Cancelled",
    "Clock",
    "DeadlineExceeded",
    "DefinitionError",
    "Dispatched",
    "Engine",
    "Event",
    "FatalError",
    "Guard",
    "IdempotencyKeyReused",
    "IllegalTransition",
    "Input",
    "InvalidInput",
    "InvalidPayload",
    "LeaseLost",
    "Limits",
    "Machine",
    "MachineBuilder",
    "ManualClock",
    "Next",
    "NotApplied",
    "OutcomeUnknown",
    "ReplayMismatch",
    "RequestNotSent",
    "RetryPolicy",
    "Run",
    "SQLiteStore",
    "State",
    "StatewrightError",
    "StepDone",
    "StepKey",
    "StepNotFound",
    "StepOutcomeUnknown",
    "Store",
    "StoreError",
    "SyncEngine",
    "SyncRun",
    "SystemClock",
    "TimerNotFound",
    "TransientError",
    "Transition",
    "TransitionRecord",
    "UnknownWorkflowType",
    "ValueTooDeep",
    "ValueTooLarge",
    "VersionConflict",
    "Worker",
    "WorkflowBusy",
    "WorkflowExists",
    "WorkflowFilter",
    "WorkflowFinished",
    "WorkflowNotFound",
    "WorkflowRow",
    "WorkflowType",
    "__version__",
    "agent_task_type",
    "store_from_url",
]
