"""The built-in agent task lifecycle as a ready workflow type, with PRODUCT §4's defaults."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from statewright.definition.builtin.agent_task import agent_task_machine
from statewright.engine.retry import RetryPolicy
from statewright.engine.steps import Run
from statewright.engine.workflow_type import Handler, Next, RecoveryAction, WorkflowType

DependencyProbe = Callable[[Run], Awaitable[bool]]
"""Whether a blocked task's dependency is ready now (an ``async`` check of the outside)."""

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
    dependency_probe: DependencyProbe | None = None,
    **machine_options: Any,
) -> WorkflowType:
    """The agent task lifecycle bound to your handlers (usually one for ``running``).

    ``machine_options`` go to :func:`agent_task_machine` (``approval_timeout``,
    ``approval_reminder``, ``reprobe_interval``, ``name``, ``version``); ``recovery``
    entries override :data:`AGENT_TASK_RECOVERY` per state.

    ``dependency_probe``: the handler of ``blocked`` asks it whether the dependency is ready
    and fires ``dependency_ready`` when it is (else the task stays blocked, idle). It runs on
    entering ``blocked`` and, with ``reprobe_interval``, again after every ``reprobe`` tick.
    """
    all_handlers = dict(handlers or {})
    if dependency_probe is not None:
        all_handlers.setdefault("blocked", _probing(dependency_probe))
    return WorkflowType(
        agent_task_machine(**machine_options),
        handlers=all_handlers,
        retry=retry or RetryPolicy(),
        recovery={**AGENT_TASK_RECOVERY, **(recovery or {})},
    )


def _probing(probe: DependencyProbe) -> Handler:
    async def blocked(run: Run) -> Next | None:
        return Next("dependency_ready") if await probe(run) else None

    return blocked
