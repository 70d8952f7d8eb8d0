"""The store port: async, domain-level interfaces every backend implements, in parts.

:class:`Store` is the **core**: what running workflows needs (its methods are all a worker,
``start`` and ``send`` call). The other parts are protocols of their own that a store may
implement: :class:`ReadModel` (listings, counts, the log feed), and, in modules of their own
(re-exported here), :class:`Schedules`, :class:`AlertOutbox`, :class:`Retention` and
:class:`Family` (:mod:`statewright.store.parts`), :class:`Subscriptions`
(:mod:`statewright.store.subscriptions`). Each is ``runtime_checkable``, so
``isinstance(store, Schedules)`` tells whether a store has a part; :data:`PARTS` names them
all and :class:`FullStore` is a store with every part (both built-in stores are).

Operations are what the engine means (``apply_transition`` with an expected version,
``claim_due``, ``step_begin``), never ``execute(sql)``: compare-and-swap, locking and
notification are each backend's own business. Every method raises only
:class:`~statewright.errors.StatewrightError` subclasses; driver errors are translated at the
boundary with the original kept as ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from statewright.store.parts import AlertOutbox, Family, Retention, Schedules
from statewright.store.subscriptions import Subscriptions
from statewright.types import (
    CancelRequest,
    DeferWrite,
    InboxItem,
    Lease,
    NewWorkflow,
    RejectionRecord,
    StepFinish,
    StepOpening,
    StepOutcome,
    StepRecord,
    StuckCutoff,
    StuckKey,
    TimerRecord,
    TimerSpec,
    TransitionRecord,
    TransitionWrite,
    TypeLimit,
    WorkflowFilter,
    WorkflowRow,
)


def fork_source_busy(source_id: str) -> str:
    """Why a fork's create was refused (:attr:`NewWorkflow.fork_of`): the source's lease."""
    return (
        f"a worker holds workflow {source_id!r} or claimed it while it was being forked (a "
        "step of it may be in flight): fork it once the worker lets go"
    )


@runtime_checkable
class Store(Protocol):
    """The core: what running workflows needs (start, send, the worker, steps, timers, cancel,
    recovery). A new backend implements this part first (the contract suite's core part,
    ``tests/store/contract/core``, runs against it alone); the others are separate protocols."""

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and apply pending migrations."""

    async def close(self) -> None:
        """Release connections; pending writes are committed or failed first."""

    async def ping(self) -> None:
        """Return once the database answers a trivial query, on a path of its own that the
        store's reads and writes cannot hold up (readiness probes); StoreError if it fails."""

    # -- workflows and their log --------------------------------------------------------------

    async def create_workflow(self, new: NewWorkflow) -> tuple[WorkflowRow, bool]:
        """Insert the row (version 1) and its first log entry, or return the existing row.

        Returns ``(row, created)``; an existing id is not an error here (idempotent start),
        the engine decides whether the existing row matches. WorkflowPruned when a workflow of
        that id was pruned (its tombstone is kept: see :meth:`Retention.delete_workflows`). A fork
        (``new.fork_of``) whose source a worker holds, or claimed since it was read, is
        refused with WorkflowBusy (:func:`fork_source_busy`), checked in the transaction that
        would create it. A child (``new.parent``) whose parent is gone, ended, or no longer
        held by the lease given is refused the same way (WorkflowNotFound, WorkflowFinished,
        LeaseLost), the parent locked against a concurrent end until the child is written.
        """

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None: ...

    async def apply_transition(self, write: TransitionWrite) -> WorkflowRow:
        """Apply one transition atomically: compare-and-swap on the version (and, with
        ``write.lease``, on the lease), log entry, timers, inbox consumption.

        Planning happens before, outside the store (the engine's pure ``plan``): the store
        runs no user code.

        Raises:
            WorkflowNotFound: no such workflow.
            VersionConflict: the row is not at ``write.expected_version``; nothing changed.
            LeaseLost: ``write.lease`` no longer holds; nothing changed.
            IdempotencyKeyReused: the workflow's log already has ``write.idempotency_key``.
            OutcomeUnknown: the connection broke after the request left; it may have applied.
            StoreError: persistence failed; nothing changed.
        """

    async def transition_by_key(
        self, workflow_id: str, idempotency_key: str
    ) -> TransitionRecord | None:
        """The log entry a client's idempotency key produced on a workflow, if any.

        A key names one request: raises IdempotencyKeyReused when it posted an input to this
        workflow instead (:meth:`post_input` refuses a key an event used likewise)."""

    async def history(
        self, workflow_id: str, after_version: int = 0, limit: int | None = None
    ) -> list[TransitionRecord]:
        """The workflow's log entries in version order."""

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

    # -- workers: claims, leases and recovery -------------------------------------------------

    async def claim_due(
        self,
        worker_id: str,
        now: float,
        lease_seconds: float,
        limit: int,
        types: Sequence[str] | None = None,
        limits: Mapping[str, TypeLimit] | None = None,
    ) -> list[WorkflowRow]:
        """Lease up to ``limit`` unleased workflows whose ``next_due_at`` has come.

        Each claim increments the workflow's fencing token (``fence``): the returned rows
        carry the new one, and :attr:`WorkflowRow.lease` is the claim.

        ``limits``: type name -> :class:`~statewright.types.TypeLimit` for the limited ones
        among ``types`` (which must then be given): never more of such a type leased at once
        (live leases, every worker counted) or claimed per second than it allows. Types
        without limits keep the one-statement claim.
        """

    async def renew_leases(
        self, worker_id: str, held: Mapping[str, int], until: float
    ) -> list[str]:
        """Extend the leases ``worker_id`` holds (workflow id -> fencing token); returns the
        ids whose lease still held and was extended."""

    async def release_lease(self, workflow_id: str, lease: Lease) -> None:
        """Give a lease back (nothing happens if it is no longer held)."""

    async def defer(self, write: DeferWrite) -> WorkflowRow:
        """Keep the workflow in its state: counters, error, next due time, parked reason;
        releases the lease. See :class:`~statewright.types.DeferWrite`.

        Raises VersionConflict (the workflow moved on), LeaseLost (``write.lease`` is gone).
        """

    async def take_over(
        self,
        workflow_id: str,
        owner: str,
        worker_id: str,
        until: float,
        *,
        expired_before: float | None = None,
    ) -> WorkflowRow | None:
        """Move ``owner``'s lease on a workflow to ``worker_id`` as a new claim (new fencing
        token), only while ``owner`` holds it (and it expired before ``expired_before``, when
        given); None if that no longer holds."""

    async def expired_leases(self, now: float, limit: int = 100) -> list[WorkflowRow]:
        """Workflows whose lease expired (their worker died, hung or was frozen)."""

    async def leased_by(self, owner: str) -> list[WorkflowRow]:
        """Workflows a given worker holds leases on."""

    async def lease_owners(self) -> list[str]:
        """Distinct workers holding leases now."""

    async def break_leases(
        self,
        owner: str,
        ids: Sequence[str] | None = None,
        *,
        expired_before: float | None = None,
    ) -> int:
        """Clear leases held by ``owner`` (all, or only ``ids``; with ``expired_before``
        only those that expired before it, so a lease renewed meanwhile survives); returns
        how many. The owner's later writes for those workflows are refused (fencing)."""

    async def wait_for_work(self, timeout: float) -> None:
        """Return soon after work may have become due, or after ``timeout`` seconds.

        PostgreSQL wakes idle workers with LISTEN/NOTIFY sent by the transaction that made
        work due; SQLite wakes workers of this process and otherwise polls. Either way the
        caller then claims; a wake-up is a hint, never a promise.
        """

    # -- cancel, progress and definitions -----------------------------------------------------

    async def request_cancel(self, workflow_id: str, request: CancelRequest) -> WorkflowRow:
        """Record a cancel request on a live workflow (not a transition; wakes its worker).

        The request stays until the workflow reaches a terminal state; a newer one replaces
        it. Returns the row either way. Raises WorkflowNotFound.
        """

    async def cancel_requests(self, ids: Sequence[str]) -> dict[str, CancelRequest]:
        """Among ``ids``, the workflows with a pending cancel request, with the request."""

    async def record_progress(
        self, workflow_id: str, progress: dict[str, Any], at: float, lease: Lease | None = None
    ) -> None:
        """Keep the latest progress report of the running step (cleared on state change).

        Raises WorkflowNotFound, or LeaseLost when ``lease`` no longer holds.
        """

    async def record_definition(
        self,
        name: str,
        version: int,
        fingerprint: str,
        document: Mapping[str, Any],
        at: float,
        *,
        replace: bool = False,
    ) -> tuple[str, Any]:
        """Record the definition an engine registers for ``(name, version)``, unless one is
        recorded already; returns the recorded ``(fingerprint, document)`` (the one given,
        or the earlier one: the caller compares). With ``replace``, the given one replaces
        the earlier one (an edit the caller allows)."""

    # -- timers -------------------------------------------------------------------------------

    async def timers(
        self,
        workflow_id: str,
        *,
        after: tuple[float, int] | None = None,
        limit: int | None = None,
    ) -> list[TimerRecord]:
        """The workflow's pending timers, earliest first (by ``(due_at, id)``): those after
        ``after``, at most ``limit`` (default: all)."""

    async def schedule_timer(
        self,
        workflow_id: str,
        timer: TimerSpec,
        *,
        state: str,
        entered_at: float,
        at: float,
        scheduled_by: str | None = None,
    ) -> TimerRecord | None:
        """Arm one timer on its own (not with a transition), atomically, only while the
        workflow is still in the visit of a state it was read in: in ``state``, entered at
        ``entered_at``, and not terminal. None (nothing written) otherwise; the caller reads
        the workflow again. A ``timer.key`` replaces the workflow's pending timer of that key
        (a new id). The workflow's version is not changed (a running handler's result still
        applies); ``next_due_at`` becomes the earlier of it and the new timer (a replaced
        timer's time is dropped when provably nothing else is due then). ``at``: now.
        ``scheduled_by``: who scheduled it, kept with it (None: the system).

        Serialised with transitions: a transition that leaves the state either sees the new
        timer (and clears it, unless ``keep``) or made the visit check fail.

        Raises WorkflowNotFound, InvalidInput (a payload the store cannot hold).
        """

    async def cancel_timer(self, workflow_id: str, key: str, *, at: float) -> bool:
        """Delete the workflow's pending timer of ``key``; whether there was one.
        ``next_due_at`` is recomputed as for :meth:`schedule_timer`. Raises WorkflowNotFound.
        """

    # -- step ledger --------------------------------------------------------------------------

    async def step_begin(
        self,
        key: str,
        workflow_id: str,
        step: str,
        at: float,
        lease: Lease | None = None,
        compensation: str | None = None,
    ) -> StepRecord:
        """Durably record that a step is executing before its action runs.

        A new key starts at attempt 1; an existing key whose status is ``executing`` or
        ``failed`` becomes ``executing`` again with ``attempts`` incremented (a re-run); a
        ``done`` record is returned unchanged (the caller must use its result). With
        ``lease``, refused with LeaseLost once the lease no longer holds. ``compensation``
        (the name of the step's undo, or None) is recorded with the attempt.
        """

    async def step_open(
        self,
        key: str,
        workflow_id: str,
        step: str,
        at: float,
        lease: Lease | None = None,
        compensation: str | None = None,
    ) -> StepOpening:
        """A step's usual start in one trip: when the workflow has no pending cancel request
        and the step no ledger entry, record it *executing* at attempt 1 as
        :meth:`step_begin` does (``begun``). Otherwise write nothing and return the cancel
        request and the ledger entry found: the caller decides (reconcile, refuse) and then
        calls :meth:`step_begin`. Raises WorkflowNotFound; with ``lease``, LeaseLost when it
        no longer holds and there is neither a request nor an entry to report.
        """

    async def step_finish(self, finish: StepFinish, lease: Lease | None = None) -> StepRecord:
        """Record the outcome of one step attempt.

        Refused with LeaseLost (nothing written) when ``lease`` no longer holds, or when the
        ledger entry is no longer that attempt *executing* (a newer attempt or a result
        recorded meanwhile): a late writer never overwrites a newer result.
        """

    async def resolve_step(
        self,
        key: str,
        status: str,
        result: Any,
        outcome: StepOutcome | None,
        note: str,
        at: float,
    ) -> StepRecord:
        """An operator's verdict on a step whose outcome is unknown: ``done`` with the
        result it had, or ``failed`` with outcome ``not_applied``. Refused with StepDone on a
        ``done`` step, WorkflowBusy while a worker holds the workflow, StepNotFound.
        """

    async def get_step(self, key: str) -> StepRecord | None: ...

    async def steps(
        self,
        workflow_id: str,
        after: tuple[float, str] | None = None,
        limit: int | None = None,
    ) -> list[StepRecord]:
        """The workflow's step ledger in ``(started_at, key)`` order, after ``after`` (keyset
        paging). A step run again moves to its new start time: while paging, it may show up
        twice, never not at all."""

    # -- inbox --------------------------------------------------------------------------------

    async def post_input(
        self,
        workflow_id: str,
        name: str,
        payload: dict[str, Any],
        at: float,
        *,
        idempotency_key: str | None = None,
        wake_in_state: str | None = None,
    ) -> tuple[InboxItem, bool]:
        """Append an external input for a live workflow; returns ``(item, created)``.

        With ``idempotency_key`` an input already posted under that key is returned instead
        (``created`` False). With ``wake_in_state``, a workflow still in that state and not
        leased becomes due now (its handler runs and can take the input).

        Raises WorkflowNotFound, WorkflowFinished (terminal workflows take no inputs),
        IdempotencyKeyReused (the key produced an entry of this workflow's log: an event,
        checked in the same statement or transaction as the post).
        """

    async def next_input(
        self, workflow_id: str, name: str | None = None, skip: Sequence[int] = ()
    ) -> InboxItem | None:
        """The oldest unconsumed input (optionally of one name), other than ``skip``.

        Reading consumes nothing: an input is consumed by the transition (or the deferral)
        that ends the handler run which took it, in the same transaction.
        """


@runtime_checkable
class ReadModel(Protocol):
    """Listings, counts and feeds for operators, dashboards, metrics and alerts: every read
    here is a range of an index (:mod:`statewright.store.sqlbuild`)."""

    async def transitions_since(
        self, seq: int, limit: int = 500, tenant: str | None = None
    ) -> list[TransitionRecord]:
        """All log entries with ``seq`` greater than the cursor, in commit order.

        With ``tenant``, only entries of that tenant's workflows (the cursor still advances
        over the global sequence).
        """

    async def model_steps(self, workflow_id: str) -> list[StepRecord]:
        """The workflow's steps whose result is an object holding the key ``"$llm"`` (the
        usage envelopes of an agent's model calls, see :mod:`statewright.engine.llm_usage`), any
        status, in ``(started_at, key)`` order; the other steps are filtered out by the
        database. Nothing (one index probe) for a workflow without model calls."""

    async def input_by_key(self, workflow_id: str, idempotency_key: str) -> InboxItem | None:
        """The input posted to the workflow under ``idempotency_key``, if any (consumed or
        not): a retried post the engine no longer takes answers with it."""

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]:
        """Workflows matching ``where`` in ``(state_entered_at, id)`` order, at most
        ``where.limit``; ``where.after`` continues after a row (keyset paging: each page is
        a range of an index, however deep)."""

    async def search_attributes(self, workflow_id: str) -> dict[str, str]:
        """A workflow's search attributes as stored (name -> canonical text; those with a
        value), written with its creation and transitions (see ``TransitionWrite.search``)."""

    async def count_stuck(
        self, cutoffs: Sequence[StuckCutoff], tenant: str | None = None, *, parked: bool = False
    ) -> list[tuple[str, str, int, float]]:
        """``(type, state, count, oldest_state_entered_at)`` of the workflows the cutoffs
        call stuck (of one tenant when given), only groups with some, by type and state.
        With ``parked``, also the parked workflows of each group's live state that are not
        past the cutoff yet (a parked workflow is stuck from the moment it parks).

        True counts, never capped: aggregates over index ranges, no row is read.
        """

    async def stuck_workflows(
        self,
        cutoffs: Sequence[StuckCutoff],
        *,
        after: StuckKey | None = None,
        limit: int = 100,
        tenant: str | None = None,
        parked: bool = False,
    ) -> list[WorkflowRow]:
        """Up to ``limit`` workflows the cutoffs call stuck (with ``parked``, and the parked
        ones, as :meth:`count_stuck`), in ``(type, state, state_entered_at, id)`` order, after
        ``after`` (keyset paging)."""

    async def count_parked(
        self, tenant: str | None = None
    ) -> list[tuple[str, str, str, int, float]]:
        """``(type, state, parked reason, count, oldest_state_entered_at)`` of the workflows
        parked for an operator (any age), in that order."""

    async def unresolved_steps(self, workflow_ids: Sequence[str]) -> list[StepRecord]:
        """The steps of these workflows whose outcome is unknown (not done, and not known as
        never applied), in ``(workflow_id, started_at, key)`` order."""

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

    async def live_versions_between(
        self, workflow_type: str, lo: int, hi: int
    ) -> list[tuple[int, int]]:
        """``(machine_version, count)`` of the live workflows of a type on versions strictly
        between ``lo`` and ``hi`` (one index range)."""

    async def count_rejections(
        self, since: float, tenant: str | None = None
    ) -> list[tuple[str, str, int]]:
        """``(type, code, count)`` of the rejections at or after ``since``."""

    async def rejections(
        self, since: float, tenant: str | None = None, limit: int = 100
    ) -> list[RejectionRecord]:
        """The latest rejections at or after ``since``, newest first."""


@runtime_checkable
class FullStore(
    Store, ReadModel, Schedules, AlertOutbox, Retention, Family, Subscriptions, Protocol
):
    """A store with every part (:class:`~statewright.store.SQLiteStore` and
    :class:`~statewright.store.postgres.PostgresStore` are)."""


PARTS: dict[str, type] = {
    "core": Store,
    "read model": ReadModel,
    "schedules": Schedules,
    "alert outbox": AlertOutbox,
    "retention": Retention,
    "family": Family,
    "subscriptions": Subscriptions,
}
"""Each part by name, core first (``isinstance(store, PARTS[name])`` tells whether a store
implements it)."""


__all__ = [
    "PARTS",
    "AlertOutbox",
    "Family",
    "FullStore",
    "ReadModel",
    "Retention",
    "Schedules",
    "Store",
    "Subscriptions",
    "fork_source_busy",
]
