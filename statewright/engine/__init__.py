"""The engine: transitions, steps, retries, timers, workers and recovery."""

from __future__ import annotations

from statewright.engine.builtin import AGENT_TASK_RECOVERY, agent_task_type
from statewright.engine.core import Engine, Posted, Replayed, Started, Stuck
from statewright.engine.recovery import Recovered, recover
from statewright.engine.retry import RetryPolicy, classify
from statewright.engine.steps import Run
from statewright.engine.worker import Worker
from statewright.engine.workflow_type import (
    Applied,
    Handler,
    Next,
    NotApplied,
    RecoveryAction,
    WorkflowType,
)

__all__ = [
    "AGENT_TASK_RECOVERY",
    "Applied",
    "Engine",
    "Handler",
    "Next",
    "NotApplied",
    "Posted",
    "Recovered",
    "RecoveryAction",
    "Replayed",
    "RetryPolicy",
    "Run",
    "Started",
    "Stuck",
    "Worker",
    "WorkflowType",
    "agent_task_type",
    "classify",
    "recover",
]
