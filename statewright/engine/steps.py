"""Idempotent steps and the ``Run`` handed to state handlers."""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from statewright.engine.cancel import CancelRequest, pending
from statewright.engine.wakeup import listen
from statewright.engine.workflow_type import Applied, NotApplied, Reconciler, WorkflowType
from statewright.errors import Cancelled, InvalidInput, StepOutcomeUnknown
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
    """What a handler sees: the workflow as claimed, durable steps, cancel, progress, inbox.

    Attributes:
        workflow: the row as it was when the worker claimed it.
        partial: results stashed with :meth:`save_partial`.
    """

    def __init__(self, engine: Engine, wtype: WorkflowType, workflow: WorkflowRow) -> None:
        self.engine = engine
        self.type = wtype
        self.workflow = workflow
        self.partial: JSON = {}
        self._cancel_raw: str | None = None
        self._cancel: CancelRequest | None = None

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

    # -- cancel --------------------------------------------------------------------------------

    @property
    def cancel_requested(self) -> str | None:
        """The reason of a pending cancel request, as last seen; None if none was seen.

        Refreshed by :meth:`check_cancel`, before each :meth:`step`, and by the worker's
        heartbeat. A request counts only in a state with an edge for the cancel event.
        """
        return None if self._cancel is None else self._cancel.reason

    @property
    def cancel_request(self) -> CancelRequest | None:
        """The pending request in full (reason, requester, time), as last seen."""
        return self._cancel

    async def check_cancel(self) -> None:
        """Ask the store; raise :class:`~statewright.errors.Cancelled` if a cancel is pending.

        Let it propagate (after :meth:`save_partial`, if there is something worth keeping):
        the worker then fires the cancel event with the partial results.
        """
        found = await self.engine.store.cancel_requests([self.workflow.id])
        await self.note_cancel(found.get(self.workflow.id))
        if self._cancel is not None:
            raise Cancelled(self._cancel.reason)

    async def note_cancel(self, raw: str | None) -> None:
        """Record the store's ``cancel_requested`` value for this workflow (worker use)."""
        if raw != self._cancel_raw:
            wf = self.workflow
            request = await pending(self.engine, self.type, wf.id, wf.state, raw)
            # Marked as seen only once resolved: a concurrent caller must not skip it meanwhile.
            self._cancel_raw, self._cancel = raw, request

    def save_partial(self, **context: Any) -> None:
        """Stash partial results: if the run ends cancelled, they are merged into the context
        in the same transaction as the cancel event. Values must be JSON-serialisable."""
        try:
            json.dumps(context, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"partial results are not JSON-serialisable: {exc}") from None
        self.partial.update(context)

    # -- progress ------------------------------------------------------------------------------

    async def progress(self, **fields: Any) -> None:
        """Report progress (e.g. ``done=3, of=10, message="..."``); kept until the state
        changes and shown by ``statewright show``. Never fails the step: a report that cannot
        be recorded is logged and dropped."""
        try:
            await self.engine.store.record_progress(self.workflow.id, dict(fields), self.now())
        except Exception:
            log.warning(
                "progress not recorded",
                exc_info=True,
                extra={"action": "progress_failed", "workflow_id": self.workflow.id},
            )

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
        The result must be JSON-serialisable. A pending cancel request raises
        :class:`~statewright.errors.Cancelled` before the step starts.
        """
        if not name or ":" in name:
            raise InvalidInput(f"step name must be non-empty and contain no ':': {name!r}")
        await self.check_cancel()
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

    async def wait_input(
        self, name: str | None = None, *, timeout: float, poll_interval: float = 0.5
    ) -> JSON | None:
        """Wait up to ``timeout`` seconds for an inbox input (of ``name``); take and return
        the oldest one's payload, or None on timeout.

        The store wakes the wait when an input is posted in this process (on PostgreSQL, from
        any process); otherwise it looks every ``poll_interval`` seconds. A cancel request
        ends the wait with :class:`~statewright.errors.Cancelled`. An input is consumed when
        taken: if the worker dies before the handler's transition, it is not seen again.
        """
        store = self.engine.store
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = deadline - time.monotonic()
            waiter = await listen(store, min(remaining, poll_interval))
            try:
                item = await store.next_input(self.workflow.id, name)
                if item is not None:
                    if await store.consume_input(item.id, self.now()):
                        return item.payload
                    continue  # another reader took it: look again at once
                await self.check_cancel()
                if remaining <= 0:
                    return None
                await waiter
            finally:
                waiter.cancel()
