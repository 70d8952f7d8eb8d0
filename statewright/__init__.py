"""statewright: durable, explicit state machines for AI-agent and backend workflows."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from statewright._version import __version__

if TYPE_CHECKING:
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
        StepsWouldRerun,
        StepUnresolved,
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
        WorkflowPruned,
    )
    from statewright.jsonvalue import Limits
    from statewright.store import SQLiteStore, Store, store_from_url
    from statewright.sync import SyncEngine
    from statewright.types import TransitionRecord, WorkflowFilter, WorkflowRow

# The public names are imported on first use (PEP 562), so that `import statewright` (and so
# `statewright --help`, which imports statewright.cli) loads no engine, store or definition
# code until something asks for it: `from statewright import Engine` works as before.
_LAZY: dict[str, str] = {
    "ActionFailed": "statewright.errors",
    "Applied": "statewright.engine",
    "Assign": "statewright.definition.machine",
    "Cancelled": "statewright.errors",
    "Clock": "statewright.clock",
    "DeadlineExceeded": "statewright.errors",
    "DefinitionError": "statewright.errors",
    "Dispatched": "statewright.engine.transitions",
    "Engine": "statewright.engine",
    "Event": "statewright.definition.machine",
    "FatalError": "statewright.errors",
    "Guard": "statewright.definition.machine",
    "IdempotencyKeyReused": "statewright.errors",
    "IllegalTransition": "statewright.errors",
    "Input": "statewright.engine.steps",
    "InvalidInput": "statewright.errors",
    "InvalidPayload": "statewright.errors",
    "LeaseLost": "statewright.errors",
    "Limits": "statewright.jsonvalue",
    "Machine": "statewright.definition.machine",
    "MachineBuilder": "statewright.definition.machine",
    "ManualClock": "statewright.clock",
    "Next": "statewright.engine",
    "NotApplied": "statewright.engine",
    "OutcomeUnknown": "statewright.errors",
    "ReplayMismatch": "statewright.errors",
    "RequestNotSent": "statewright.errors",
    "RetryPolicy": "statewright.engine",
    "Run": "statewright.engine",
    "SQLiteStore": "statewright.store",
    "State": "statewright.definition.machine",
    "StatewrightError": "statewright.errors",
    "StepDone": "statewright.errors",
    "StepKey": "statewright.engine.steps",
    "StepNotFound": "statewright.errors",
    "StepOutcomeUnknown": "statewright.errors",
    "StepUnresolved": "statewright.errors",
    "StepsWouldRerun": "statewright.errors",
    "Store": "statewright.store",
    "StoreError": "statewright.errors",
    "SyncEngine": "statewright.sync",
    "SyncRun": "statewright.engine.steps",
    "SystemClock": "statewright.clock",
    "TimerNotFound": "statewright.errors",
    "TransientError": "statewright.errors",
    "Transition": "statewright.definition.machine",
    "TransitionRecord": "statewright.types",
    "UnknownWorkflowType": "statewright.errors",
    "ValueTooDeep": "statewright.errors",
    "ValueTooLarge": "statewright.errors",
    "VersionConflict": "statewright.errors",
    "Worker": "statewright.engine",
    "WorkflowBusy": "statewright.errors",
    "WorkflowExists": "statewright.errors",
    "WorkflowFilter": "statewright.types",
    "WorkflowFinished": "statewright.errors",
    "WorkflowNotFound": "statewright.errors",
    "WorkflowPruned": "statewright.errors",
    "WorkflowRow": "statewright.types",
    "WorkflowType": "statewright.engine",
    "agent_task_type": "statewright.engine",
    "store_from_url": "statewright.store",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and flag unknown names

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups do not come back here
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "StepUnresolved",
    "StepsWouldRerun",
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
    "WorkflowPruned",
    "WorkflowRow",
    "WorkflowType",
    "__version__",
    "agent_task_type",
    "store_from_url",
]
