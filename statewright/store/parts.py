"""The store's optional parts besides the read model (see :mod:`statewright.store.protocol`,
which names them all in ``PARTS`` and re-exports them): cron schedules, alert delivery's
outbox, retention, and child workflows' links read back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from statewright.store.alert_outbox import AlertChange, AlertStateRecord, OutboxRecord
from statewright.types import ScheduleRecord, WorkflowRow


@runtime_checkable
class Schedules(Protocol):
    """Cron schedules that start workflows (:mod:`statewright.engine.schedules`)."""

    async def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create a schedule, or replace the definition and next tick of the one of its id."""

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None: ...

    async def list_schedules(
        self, tenant: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> list[ScheduleRecord]:
        """The schedules (of one tenant when given), by id: those after the id ``after``, at
        most ``limit`` (default: all)."""

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Remove a schedule; whether there was one."""

    async def due_schedules(self, now: float, limit: int = 100) -> list[ScheduleRecord]:
        """Active schedules whose ``next_at`` has come, earliest first."""

    async def advance_schedule(
        self,
        schedule_id: str,
        expected_next_at: float,
        next_at: float,
        *,
        at: float,
        last_tick: float | None = None,
        last_workflow_id: str | None = None,
        error: str | None = None,
    ) -> bool:
        """Compare-and-swap of an active schedule's next tick, from ``expected_next_at`` to
        ``next_at``; False (nothing written) when it moved on, was paused or removed."""

    async def pause_schedule(
        self, schedule_id: str, paused: bool, next_at: float, at: float
    ) -> ScheduleRecord | None:
        """Pause or resume a schedule (its next tick set to ``next_at``); None if absent."""


@runtime_checkable
class AlertOutbox(Protocol):
    """Alert delivery's state and outbox (:mod:`statewright.observability.delivery`)."""

    async def alert_states(self) -> list[AlertStateRecord]:
        """The alerts recorded as firing now."""

    async def record_alert_changes(
        self, changes: Sequence[AlertChange], receivers: Sequence[str], at: float
    ) -> list[AlertChange]:
        """In one transaction: record each change in ``alert_states`` (a firing alert is
        inserted unless it fires already; a resolved one deleted only if its firing started
        at ``starts_at``) and, for each change that took, queue its notification for every
        receiver in ``alert_outbox``. Returns the changes that took (a concurrent evaluator
        may have made the others)."""

    async def claim_alert_notifications(
        self, claim: str, now: float, until: float, limit: int
    ) -> list[OutboxRecord]:
        """Claim up to ``limit`` notifications due at ``now`` until ``until`` (then another
        deliverer may take them), oldest due first; concurrent claimers get disjoint rows."""

    async def finish_alert_notification(
        self,
        outbox_id: int,
        claim: str,
        *,
        at: float,
        delivered: bool,
        retry_at: float | None = None,
        error: str | None = None,
    ) -> bool:
        """Record a send of a claimed notification: delivered; else failed and due again at
        ``retry_at``; else (no ``retry_at``) dead-lettered. False, and nothing changed, when
        the claim is no longer held."""

    async def alert_notifications(self, after: int = 0, limit: int = 1000) -> list[OutboxRecord]:
        """The outbox in the order written, after id ``after``."""

    async def prune_alert_notifications(
        self, before: float, *, limit: int, dry_run: bool = False
    ) -> int:
        """Delete up to ``limit`` alert notifications delivered or dead-lettered and created
        before ``before``, oldest first; how many (with ``dry_run``: how many there are,
        nothing deleted). Pending ones are never deleted."""


@runtime_checkable
class Retention(Protocol):
    """Prune, archive and restore finished workflows (:mod:`statewright.engine.retention`;
    archive records as in :mod:`statewright.store.retention_sql`)."""

    async def prunable(
        self, before: float, *, tenant: str | None, after: tuple[float, str] | None, limit: int
    ) -> list[tuple[str, int, float]]:
        """``(id, version, state_entered_at)`` of finished workflows that entered their final
        state before ``before``, in ``(state_entered_at, id)`` order after ``after``."""

    async def export_workflows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Archive records of the workflows found: the row and its log, steps, timers, inbox
        and refused events."""

    async def delete_workflows(
        self, held: Sequence[tuple[str, int]], at: float | None = None
    ) -> tuple[list[str], dict[str, int]]:
        """Delete, in one short transaction through the log's sanctioned delete, each finished
        workflow of ``(id, version)`` still at that version, whole; the ids deleted and the
        rows deleted per table. A workflow another prune is deleting is skipped. Each one
        deleted leaves its tombstone (id, tenant, type, ``at``: default now) in the same
        transaction: :meth:`Store.create_workflow` of that id raises WorkflowPruned."""

    async def forget_pruned_ids(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        """Delete up to ``limit`` tombstones of workflows pruned before ``before`` (of one
        tenant, or all), oldest first: their ids may be started again. How many (with
        ``dry_run``: how many there are, nothing deleted)."""

    async def prune_rejections(
        self, before: float, *, tenant: str | None, limit: int, dry_run: bool = False
    ) -> int:
        """Delete up to ``limit`` refused events older than ``before``; how many (with
        ``dry_run``: how many there are, nothing deleted)."""

    async def restore_workflow(
        self,
        record: Mapping[str, Any],
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> bool:
        """Insert an archive record's rows in one transaction (and delete the tombstone its id
        may have: the id names a workflow again); False (nothing written) when a workflow of
        that id exists. In that transaction, before anything is written, the
        record must pass :func:`~statewright.store.retention_sql.check_restorable` (a finished
        workflow, unleased, not due, its id and tenant consistent, its columns of their
        types) and ``check`` (the engine's limits and replay): else what they raise, nothing
        written."""


@runtime_checkable
class Family(Protocol):
    """Child workflows' links read back (:mod:`statewright.engine.children`): a parent's
    children, and the live children an ended parent leaves. (Creating a child and its notice
    to the parent are the core's: :attr:`NewWorkflow.parent`, :attr:`TransitionWrite.notice`.)
    """

    async def children(
        self, parent_id: str, *, after: str = "", limit: int = 100
    ) -> list[WorkflowRow]:
        """The workflows ``parent_id`` started as its children (see :attr:`NewWorkflow.parent`),
        in id order, after the id ``after``, at most ``limit``."""

    async def orphans(
        self, limit: int = 100, after: tuple[str, str] | None = None
    ) -> list[WorkflowRow]:
        """Live children whose parent is terminal or gone (an ended parent's children are
        cancelled: see ``engine/children.py``), but those a worker holds with a cancel
        request pending (it delivers it), in ``(parent, id)`` order after ``after``, at most
        ``limit``."""


__all__ = ["AlertOutbox", "Family", "Retention", "Schedules"]
