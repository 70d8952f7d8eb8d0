"""Rows of both SQL stores as statewright's records, by column name.

A ``sqlite3.Row`` and a psycopg dict row both index by column name, so one mapping serves
both. They differ in JSON columns only: SQLite returns their text (decoded here with
``load``), PostgreSQL the value already decoded (``load`` is :func:`same`). Flags are read
with ``bool`` (SQLite keeps them as 0 and 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from statewright.store.alert_outbox import AlertStateRecord, OutboxRecord
from statewright.types import (
    CancelRequest,
    InboxItem,
    RejectionRecord,
    ScheduleRecord,
    StepRecord,
    TimerRecord,
    TransitionRecord,
    WorkflowRow,
)


class Row(Protocol):
    """A row read by column name (``sqlite3.Row``, psycopg's ``DictRow``)."""

    def __getitem__(self, key: str, /) -> Any: ...


def same(value: Any) -> Any:
    """A JSON column's value that the driver decoded already."""
    return value


def cancel_request(r: Row) -> CancelRequest | None:
    """The pending cancel request of a workflow row (or of a ``cancel_requests`` row)."""
    reason = r["cancel_requested"]
    if reason is None:
        return None
    return CancelRequest(
        reason, r["cancel_actor"], r["cancel_at"], r["cancel_version"], r["cancel_key"]
    )


class Rows:
    """Each table's rows as records, with JSON columns decoded by ``load``."""

    def __init__(self, load: Callable[[Any], Any]) -> None:
        self.load = load

    def _json(self, value: Any) -> Any:
        """A nullable JSON column."""
        return None if value is None else self.load(value)

    def workflow(self, r: Row) -> WorkflowRow:
        return WorkflowRow(
            id=r["id"],
            type=r["type"],
            machine_version=r["machine_version"],
            state=r["state"],
            context=self.load(r["context"]),
            version=r["version"],
            attempts=r["attempts"],
            terminal=bool(r["terminal"]),
            created_at=r["created_at"],
            updated_at=r["updated_at"],
            state_entered_at=r["state_entered_at"],
            next_due_at=r["next_due_at"],
            lease_owner=r["lease_owner"],
            lease_expires_at=r["lease_expires_at"],
            last_error=r["last_error"],
            cancel=cancel_request(r),
            progress=self._json(r["progress"]),
            tenant=r["tenant"],
            fence=r["fence"],
            total_attempts=r["total_attempts"],
            parked=r["parked"],
            trace=r["trace"],
            parent=r["parent_id"],
            parent_key=r["parent_key"],
            has_children=bool(r["has_children"]),
        )

    def transition(self, r: Row) -> TransitionRecord:
        return TransitionRecord(
            seq=r["seq"],
            workflow_id=r["workflow_id"],
            version=r["version"],
            from_state=r["from_state"],
            to_state=r["to_state"],
            event=r["event"],
            payload=self.load(r["payload"]),
            actor=r["actor"],
            context_patch=self._json(r["context_patch"]),
            at=r["at"],
            idempotency_key=r["idempotency_key"],
            messages=self._json(r["messages"]),
        )

    def step(self, r: Row) -> StepRecord:
        return StepRecord(
            key=r["key"],
            workflow_id=r["workflow_id"],
            step=r["step"],
            status=r["status"],
            result=self._json(r["result"]),
            error=r["error"],
            attempts=r["attempts"],
            started_at=r["started_at"],
            finished_at=r["finished_at"],
            outcome=r["outcome"],
            fence=r["fence"],
            compensation=r["compensation"],
        )

    def inbox(self, r: Row) -> InboxItem:
        return InboxItem(
            id=r["id"],
            workflow_id=r["workflow_id"],
            name=r["name"],
            payload=self.load(r["payload"]),
            posted_at=r["posted_at"],
            consumed_at=r["consumed_at"],
            idempotency_key=r["idempotency_key"],
        )

    def timer(self, r: Row) -> TimerRecord:
        return TimerRecord(
            id=r["id"],
            workflow_id=r["workflow_id"],
            due_at=r["due_at"],
            event=r["event"],
            payload=self.load(r["payload"]),
            key=r["key"],
            every=r["every"],
            keep=bool(r["keep"]),
            scheduled_by=r["scheduled_by"],
        )

    @staticmethod
    def rejection(r: Row) -> RejectionRecord:
        return RejectionRecord(
            seq=r["seq"],
            workflow_id=r["workflow_id"],
            type=r["type"],
            tenant=r["tenant"],
            state=r["state"],
            event=r["event"],
            code=r["code"],
            actor=r["actor"],
            message=r["message"],
            at=r["at"],
        )

    def schedule(self, r: Row) -> ScheduleRecord:
        return ScheduleRecord(
            id=r["id"],
            type=r["type"],
            cron=r["cron"],
            timezone=r["timezone"],
            catch_up=r["catch_up"],
            input=dict(self.load(r["input"])),
            tenant=r["tenant"],
            paused=bool(r["paused"]),
            next_at=float(r["next_at"]),
            created_at=float(r["created_at"]),
            updated_at=float(r["updated_at"]),
            last_tick=None if r["last_tick"] is None else float(r["last_tick"]),
            last_workflow_id=r["last_workflow_id"],
            last_error=r["last_error"],
            created_by=r["created_by"],
        )

    def alert_state(self, r: Row) -> AlertStateRecord:
        return AlertStateRecord(
            fingerprint=r["fingerprint"],
            rule=r["rule"],
            labels=self.load(r["labels"]),
            annotations=self.load(r["annotations"]),
            starts_at=r["starts_at"],
        )

    def outbox(self, r: Row) -> OutboxRecord:
        return OutboxRecord(
            id=int(r["id"]),
            receiver=r["receiver"],
            fingerprint=r["fingerprint"],
            status=r["status"],
            idempotency_key=r["idempotency_key"],
            alert=self.load(r["alert"]),
            created_at=r["created_at"],
            attempts=r["attempts"],
            next_at=r["next_at"],
            claim=r["claim"],
            delivered_at=r["delivered_at"],
            dead_at=r["dead_at"],
            last_error=r["last_error"],
            kind=r["kind"],
            subscription=r["subscription"],
            order_key=r["order_key"],
        )
