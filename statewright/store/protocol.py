"""The store port: one async, domain-level interface every backend implements.

Operations are what the engine means (``apply_transition`` with an expected version,
``claim_due``, ``step_begin``), never ``execute(sql)``: compare-and-swap, locking and
notification are each backend's own business. Every method raises only
:class:`~statewright.errors.StatewrightError` subclasses; driver errors are translated at the
boundary with the original kept as ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from statewright.types import (
    InboxItem,
    NewWorkflow,
    RejectionRecord,
    StepRecord,
    TimerRecord,
    TransitionRecord,
    TransitionWrite,
    WorkflowFilter,
    WorkflowRow,
)


@runtime_checkable
class Store(Protocol):
    """Durable storage for workflows, their transition log, step ledger, timers and inbox."""

    async def open(self) -> None:
        """Connect and apply pending migrations."""

    async def close(self) -> None:
        """Release connections; pending writes are committed or failed first."""

    # -- workflows and transitions ---------------------------------------------------------

    async def create_workflow(self, new: NewWorkflow) -> tuple[WorkflowRow, bool]:
        """Insert the row (version 1) and its first log entry, or return the existing row.

        Returns ``(row, created)``; an existing id is not an error here (idempotent start),
        the engine decides whether the existing row matches.
        """

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None: ...

    async def apply_transition(self, write: TransitionWrite) -> WorkflowRow:
        """Apply one transition atomically.

        Raises:
            WorkflowNotFound: no such workflow.
            VersionConflict: the row is not at ``write.expected_version``; nothing changed.
            StoreError: persistence failed; nothing changed.
        """

    async def apply_event(
        self, workflow_id: str, plan: Callable[[WorkflowRow], TransitionWrite]
    ) -> tuple[WorkflowRow, WorkflowRow]:
        """Read the row, let ``plan`` build the transition from it, and apply it: one operation.

        ``plan`` is pure (no I/O) and may raise to refuse the transition; then nothing is
        written and its exception propagates. Returns ``(before, after)``. Saves a round
        trip per external event compared with :meth:`get_workflow` + :meth:`apply_transition`;
        the compare-and-swap still guards against writers in other processes.

        Raises:
            WorkflowNotFound, VersionConflict, StoreError, or whatever ``plan`` raised.
        """

    async def history(
        self, workflow_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[TransitionRecord]:
        """The workflow's log entries in version order."""

    async def transitions_since(
        self, seq: int, limit: int = 500, tenant: str | None = None
    ) -> list[TransitionRecord]:
        """All log entries with ``seq`` greater than the cursor, in commit order.

        With ``tenant``, only entries of that tenant's workflows (the cursor still advances
        over the global sequence).
        """

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]: ...

    async def count_by_state(
        self,
        terminal: bool | None = None,
        tenant: str | None = None,
        *,
        entered_after: float | None = None,
        entered_before: float | None = None,
    ) -> list[tuple[str, str, int]]:
        """``(type, state, count)`` rows (of one tenant when given), of the workflows that
        entered their state at or after ``entered_after`` and before ``entered_before``."""

    async def live_event_counts(
        self, since: float, events: Sequence[str], tenant: str | None = None
    ) -> list[tuple[str, str, str, int]]:
        """``(workflow_id, type, event, count)``: how often each non-terminal workflow took
        one of ``events`` in log entries at or after ``since`` (ordered by id, event)."""

    # -- rejections log --------------------------------------------------------------------

    async def record_rejection(
        self,
        *,
        workflow_id: str,
        type: str,
        tenant: str,
        state: str,
        event: str,
        code: str,
        actor: str,
        message: str,
        at: float,
    ) -> None:
        """Append a refused event to the rejections log (its own write: the refusal itself
        changed nothing)."""

    async def count_rejections(
        self, since: float, tenant: str | None = None
    ) -> list[tuple[str, str, int]]:
        """``(type, code, count)`` of the rejections at or after ``since``."""

    async def rejections(
        self, since: float, tenant: str | None = None, limit: int = 100
    ) -> list[RejectionRecord]:
        """The latest rejections at or after ``since``, newest first."""

    # -- workers ---------------------------------------------------------------------------

    async def claim_due(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None = None,
    ) -> list[WorkflowRow]:
        """Lease up to ``limit`` unleased workflows whose ``next_due_at`` has come."""

    async def renew_leases(self, worker_id: str, ids: Sequence[str], until: float) -> int:
        """Extend the leases ``worker_id`` holds; returns how many it still holds."""

    async def release_lease(self, workflow_id: str, worker_id: str) -> None: ...

    async def defer(
        self,
        workflow_id: str,
        expected_version: int,
        *,
        attempts: int,
        next_due_at: float | None,
        last_error: str | None,
        at: float,
    ) -> WorkflowRow:
        """Record a failed attempt without a transition: counter, error, next due time.

        ``next_due_at`` is merged with the pending timers (the earlier wins), so parking a
        workflow never silences its timers: ``next_due_at IS NULL`` always means "no timers".
        Releases the lease. Raises :class:`VersionConflict` if the workflow moved on.
        """

    async def expired_leases(self, now: float, limit: int = 100) -> list[WorkflowRow]:
        """Workflows whose lease expired (their worker died or hung)."""

    async def leased_by(self, owner: str) -> list[WorkflowRow]:
        """Workflows a given worker holds leases on."""

    async def lease_owners(self) -> list[str]:
        """Distinct workers holding leases now."""

    async def break_leases(self, owner: str, ids: Sequence[str] | None = None) -> int:
        """Clear leases held by ``owner`` (all, or only ``ids``); returns how many."""

    async def wait_for_work(self, timeout: float) -> None:
        """Return soon after work may have become due, or after ``timeout`` seconds.

        PostgreSQL wakes idle workers with LISTEN/NOTIFY sent by the transaction that made
        work due; SQLite wakes workers of this process and otherwise polls. Either way the
        caller then claims; a wake-up is a hint, never a promise.
        """

    # -- cancel and progress ---------------------------------------------------------------

    async def request_cancel(self, workflow_id: str, reason: str, at: float) -> WorkflowRow:
        """Flag a cancel request on a live workflow (not a transition; wakes its worker).

        The flag stays until the workflow reaches a terminal state. Raises WorkflowNotFound.
        """

    async def cancel_requests(self, ids: Sequence[str]) -> dict[str, str]:
        """Among ``ids``, the workflows with a pending cancel request, with its reason."""

    async def record_progress(self, workflow_id: str, progress: dict[str, Any], at: float) -> None:
        """Keep the latest progress report of the running step (cleared on state change)."""

    # -- timers ----------------------------------------------------------------------------

    async def timers(self, workflow_id: str) -> list[TimerRecord]:
        """The workflow's pending timers, earliest first."""

    # -- step ledger -----------------------------------------------------------------------

    async def step_begin(self, key: str, workflow_id: str, step: str, at: float) -> StepRecord:
        """Durably record that a step is executing before its action runs.

        If the key exists already, returns the existing record with ``attempts`` incremented
        when its status is ``executing`` or ``failed`` (a re-run); a ``done`` record is
        returned unchanged.
        """

    async def step_finish(
        self, key: str, status: str, result: Any, error: str | None, at: float
    ) -> StepRecord:
        """Record the outcome of a step (``done`` with a result, or ``failed``)."""

    async def get_step(self, key: str) -> StepRecord | None: ...

    async def steps(self, workflow_id: str) -> list[StepRecord]: ...

    # -- inbox -----------------------------------------------------------------------------

    async def post_input(
        self, workflow_id: str, name: str, payload: dict[str, Any], at: float
    ) -> InboxItem:
        """Append an external input for a workflow; raises WorkflowNotFound."""

    async def next_input(self, workflow_id: str, name: str | None = None) -> InboxItem | None:
        """The oldest unconsumed input (optionally of one name)."""

    async def consume_input(self, item_id: int, at: float) -> bool:
        """Mark an input consumed; False if it already was."""
