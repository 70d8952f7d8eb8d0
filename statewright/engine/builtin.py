"""The built-in agent task lifecycle as a ready workflow type, with PRODUCT §4's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright.definition.builtin.agent_task import agent_task_machine
from statewright.engine.retry import RetryPolicy
from statewright.engine.workflow_type import Handler, RecoveryAction, WorkflowType

AGENT_TASK_RECOVERY: Mapping[str, RecoveryAction] = {
    "running": "retry",  # a worker died mid-run: count a transient failure, back off
    "retrying": "rerun",  # its backoff timer fires retry, or the budget check fails it
    "paused": "rerun",  # its approval timeout still fires (-> failed)
    "blocked": "leave",  # stays blocked until the dependency is back or it fails
}


def agent_task_type(
    handlers: Mapping[str, Handler] | None = None,
    *,
    retry: RetryPolicy | None = None,
    recovery: Mapping[str, RecoveryAction] | None = None,
    **machine_options: Any,
) -> WorkflowType:
    """The agent task lifecycle bound to your handlers (usually one for ``running``).

    ``machine_options`` go to :func:`agent_task_machine` (``approval_timeout``,
    ``approval_reminder``, ``name``, ``version``); ``recovery`` entries override
    :data:`AGENT_TASK_RECOVERY` per state.
    """
    return WorkflowType(
        agent_task_machine(**machine_options),
        handlers=dict(handlers or {}),
        retry=retry or RetryPolicy(),
        recovery={**AGENT_TASK_RECOVERY, **(recovery or {})},
    )
