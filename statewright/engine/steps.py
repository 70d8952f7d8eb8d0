"""Idempotent steps and the ``Run`` handed to state handlers."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from statewright.engine.workflow_type import Applied, NotApplied, Reconciler, WorkflowType
from statewright.errors import InvalidInput, StepOutcomeUnknown
from statewright.types import JSON, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.core import Engine

log = logging.getLogger(__name__)
T = TypeVar("T")


async def maybe_await(value: Awaitable[T] | T) -> T:
    if inspect.isawaitable(value):
        return await value
    return value


class Run:
    """What a handler sees: the workflow as claimed, and durable steps.

    Attributes:
        workflow: the row as it was when the worker claimed it.
    """

    def __init__(self, engine: Engine, wtype: WorkflowType, workflow: WorkflowRow) -> None:
        self.engine = engine
        self.type = wtype
        self.workflow = workflow

    @property
    def id(self) -> str:
        return self.workflow.id

    @property
    def state(self) -> str:
        return self.workflow.state

    @property
    def context(self) -> JSON:
        return self.workflow.context

    def key(self, step: str) -> str:
        """The idempotency key of a step: ``workflow_id:step``."""
        return f"{self.workflow.id}:{step}"

    def now(self) -> float:
        return self.engine.clock.now()

    async def step(
        self,
        name: str,
        action: Callable[[str], Awaitable[Any] | Any],
        *,
        safe_to_repeat: bool = False,
        reconcile: Reconciler | None = None,
    ) -> Any:
        """Run ``action(idempotency_key)`` at most once per workflow and step name.

        The ledger records *executing* (committed) before the action runs and *done* with
        the result after. A second call returns the stored result without running it. A step
        found *executing* (a crash interrupted it) is reconciled: ``reconcile`` (or the
        type's reconciler for this step) asks the external system; without a verdict the
        step runs again only if ``safe_to_repeat``, else :class:`StepOutcomeUnknown`.
        The result must be JSON-serialisable.
        """
        if not name or ":" in name:
            raise InvalidInput(f"step name must be non-empty and contain no ':': {name!r}")
        store = self.engine.store
        key = self.key(name)
        record = await store.get_step(key)
        if record is not None and record.status == "done":
            return record.result
        if record is not None and record.status == "executing":
            hook = reconcile or self.type.reconcilers.get(name)
            verdict = await maybe_await(hook(key)) if hook is not None else None
            log.warning(
                "step found executing after an interruption",
                extra={"action": "step_reconcile", "key": key, "verdict": repr(verdict)},
            )
            if isinstance(verdict, Applied):
                await store.step_finish(key, "done", verdict.result, None, self.now())
                return verdict.result
            if not isinstance(verdict, NotApplied) and not safe_to_repeat:
                raise StepOutcomeUnknown(key)
        await store.step_begin(key, self.workflow.id, name, self.now())
        started = time.perf_counter()
        try:
            result = await maybe_await(action(key))
        except Exception as exc:
            await store.step_finish(
                key, "failed", None, f"{type(exc).__name__}: {exc}", self.now()
            )
            raise
        await store.step_finish(key, "done", result, None, self.now())
        self.engine.observers.step_finished(self.workflow, name, time.perf_counter() - started)
        return result

    async def next_input(self, name: str | None = None) -> JSON | None:
        """Take the oldest unconsumed inbox input (of ``name``), or None."""
        store = self.engine.store
        item = await store.next_input(self.workflow.id, name)
        if item is None or not await store.consume_input(item.id, self.now()):
            return None
        return item.payload
