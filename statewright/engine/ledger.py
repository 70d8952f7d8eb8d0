"""One run's writes to the step ledger: a step's attempt as it runs, its *done* or *failed*
record, and the last *done* record kept pending for the handler's transition to carry.

Every write is fenced by the claim's lease (:class:`~statewright.errors.LeaseLost` once it is
gone). The step API that decides when to write (reconcile, cancel, the call itself) is
:meth:`statewright.engine.steps.Run.step`; the worker writes the pending record at one point,
:func:`statewright.engine.settle.settle`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statewright.engine import records
from statewright.engine.hooks import NO_STEP, StepRef
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import FatalError, InvalidInput, LeaseLost
from statewright.types import Lease, StepFinish, StepRecord, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger("statewright.engine.steps")


class StepKey(str):
    """A step's idempotency key (``workflow_id:step``), as handed to its action.

    It is a ``str`` (send it as the external system's idempotency key) that also carries the
    **fencing token** of the claim running the step: a number that grows with every claim of
    the workflow. A service that records the highest token it has seen per key (or per
    workflow) and refuses lower ones rejects a call from a worker that was frozen past its
    lease while another worker took over, which nothing else can recall once in flight.

    Attributes:
        workflow_id, step: what the key names.
        fencing_token: the claim's token (``Run.fencing_token``).
        attempt: this run of the step (1 for the first; the ledger's ``attempts``).
    """

    workflow_id: str
    step: str
    fencing_token: int
    attempt: int

    def __new__(cls, workflow_id: str, step: str, fencing_token: int, attempt: int) -> StepKey:
        key = super().__new__(cls, f"{workflow_id}:{step}")
        key.workflow_id = workflow_id
        key.step = step
        key.fencing_token = fencing_token
        key.attempt = attempt
        return key


@dataclass
class Begun:
    """A step that may run now: its ledger entry (this attempt)."""

    key: StepKey
    record: StepRecord
    started: float


@dataclass
class _Pending:
    """A finished step's *done* record not written yet (see :attr:`Ledger.carry_done`)."""

    finish: StepFinish
    name: str
    elapsed: float


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


class Ledger:
    """The step ledger as one run writes it (see the module docstring)."""

    def __init__(
        self, rt: Runtime, wtype: WorkflowType, workflow: WorkflowRow, lease: Lease | None
    ) -> None:
        self.rt = rt
        self.type = wtype
        self.workflow = workflow
        self.lease = lease
        self.carry_done = False
        """Keep the last finished step's *done* record pending, for the worker to commit it
        with the transition the handler returns (one commit fewer). Whatever else the handler
        does next through its run writes it first (:meth:`flush`)."""
        self._pending: _Pending | None = None
        self.last: StepRef = NO_STEP
        """The step this run began last, and its attempt: the transition the run's outcome
        makes names it (its record), as does a failure of the handler."""

    @property
    def pending_finish(self) -> StepFinish | None:
        """The finished step's outcome not written yet (None: nothing pending)."""
        return None if self._pending is None else self._pending.finish

    async def flush(self) -> None:
        """Write the pending *done* record now, on its own, fenced by the lease (worker use:
        before anything that needs it durable, and when the transition that was to carry it
        is refused). Raises LeaseLost when the lease (or that attempt) is gone."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        await self.rt.store.step_finish(pending.finish, self.lease)
        self.rt.observers.step_finished(self.workflow, pending.name, pending.elapsed)

    def carried(self) -> None:
        """The pending record was committed with the handler's transition (worker use)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self.rt.observers.step_finished(self.workflow, pending.name, pending.elapsed)

    def begun(self, name: str, record: StepRecord) -> Begun:
        """The attempt ``record`` (just recorded executing) as it runs now."""
        self.last = (name, record.attempts)
        return Begun(
            StepKey(self.workflow.id, name, self.workflow.fence, record.attempts),
            record,
            time.perf_counter(),
        )

    async def finish(
        self,
        begun: Begun,
        status: str,
        result: Any,
        error: str | None,
        outcome: Any,
    ) -> StepRecord:
        finish = self.outcome(begun, status, result, error, outcome)
        return await self.rt.store.step_finish(finish, self.lease)

    def outcome(
        self, begun: Begun, status: str, result: Any, error: str | None, outcome: Any
    ) -> StepFinish:
        return StepFinish(
            key=str(begun.key),
            attempt=begun.record.attempts,
            status="done" if status == "done" else "failed",
            result=result,
            error=error,
            outcome=outcome,
            at=self.rt.clock.now(),
        )

    async def failed(self, begun: Begun, exc: BaseException) -> None:
        self._report(begun, exc)
        outcome = self.type.retry.outcome(exc)
        try:
            await self.finish(begun, "failed", None, describe(exc), outcome)
        except LeaseLost as lost:
            raise lost from exc
        log.warning(
            "step failed",
            extra={
                "action": "step_failed",
                "key": str(begun.key),
                "attempt": begun.record.attempts,
                "outcome": outcome,
                "error": describe(exc),
            },
        )

    def _report(self, begun: Begun, exc: BaseException) -> None:
        """Tell the failure observers (``statewright_failures_total``) of this attempt's."""
        key, observers = begun.key, self.rt.observers
        records.step_failed(observers, self.type, self.workflow, exc, key.step, key.attempt)

    async def keepable(self, begun: Begun, name: str, result: Any) -> None:
        try:
            self.rt.limits.check(result, f"result of step {name!r}")
        except InvalidInput as exc:
            # The call went through, but its result cannot be kept (not JSON, too deep or
            # too large): the outcome stays unknown to the ledger (reconcile can tell, or an
            # operator resolves it), and the workflow fails this state.
            error = FatalError(f"{exc.message}: it cannot be kept")
            self._report(begun, error)
            await self.finish(begun, "failed", None, describe(error), "unknown")
            raise error from exc

    async def done(self, begun: Begun, name: str, result: Any) -> Any:
        await self.keepable(begun, name, result)
        elapsed = time.perf_counter() - begun.started
        if self.carry_done and self._pending is None:
            # Kept for the handler's transition: the step stays *executing* in the ledger
            # until then (a crash meanwhile is reconciled like one during the call).
            finish = self.outcome(begun, "done", result, None, None)
            self._pending = _Pending(finish, name, elapsed)
            return result
        await self.finish(begun, "done", result, None, None)
        self.rt.observers.step_finished(self.workflow, name, elapsed)
        return result
