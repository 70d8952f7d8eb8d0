"""Cancelling workflows: at once when idle, through the running handler when leased.

A cancel is the type's ``cancel_event`` (payload ``{"reason": ...}``). On a workflow no worker
holds it fires right away. On a leased one it becomes a request (``store.request_cancel``)
that the worker delivers: its handler sees it at ``run.check_cancel()``, before each
``run.step`` and in ``run.wait_input``, or has its task cancelled after the worker's
``cancel_grace``; either way the worker then fires the cancel event with the handler's partial
results as a context patch, in one transition.

The store keeps one string per request and clears it only when the workflow ends. Until the
protocol carries them, the requester and the time of the request ride in that string as a
small JSON object (see :class:`CancelRequest`): the actor belongs in the transition log, and
the workflow's version at the time tells a request already delivered (a cancel edge into a
non-terminal state) from a new one. A plain string (another writer's) reads as a reason.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statewright.engine.hooks import TransitionEvent
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import (
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    StatewrightError,
    StoreError,
    VersionConflict,
)
from statewright.types import TransitionWrite, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.core import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CancelRequest:
    """A pending cancel request, as decoded from ``WorkflowRow.cancel_requested``."""

    reason: str
    actor: str | None = None
    at: float | None = None
    """When it was requested (requester's clock), if known."""
    version: int | None = None
    """The workflow's version when it was requested: a cancel event logged after it means
    the request was delivered (versions, unlike clocks, agree across hosts)."""

    def dumps(self) -> str:
        fields = {"reason": self.reason, "actor": self.actor, "at": self.at, "v": self.version}
        return json.dumps(fields)

    @classmethod
    def parse(cls, raw: str) -> CancelRequest:
        """Decode a stored request; a string that is not ours is taken as a bare reason."""
        try:
            data = json.loads(raw)
        except ValueError:
            return cls(raw)
        if not isinstance(data, dict) or not isinstance(data.get("reason"), str):
            return cls(raw)
        actor, at, version = data.get("actor"), data.get("at"), data.get("v")
        return cls(
            data["reason"],
            actor if isinstance(actor, str) else None,
            float(at) if isinstance(at, int | float) else None,
            version if isinstance(version, int) else None,
        )


def cancel_reason(exc: BaseException) -> str | None:
    """The reason a :class:`~statewright.errors.Cancelled` carries (its first argument)."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str):
        return reason
    return exc.args[0] if exc.args and isinstance(exc.args[0], str) else None


def cancellable(wtype: WorkflowType, state: str) -> bool:
    """Whether the machine has an edge for the type's cancel event out of ``state``."""
    event = wtype.cancel_event
    return event is not None and wtype.machine.can(state, event)


async def pending(
    engine: Engine, wtype: WorkflowType, workflow_id: str, state: str, raw: str | None
) -> CancelRequest | None:
    """The request to act on in ``state``, or None.

    A request waits while the state has no cancel edge (a cleanup state the cancel led to,
    say), and counts once: a cancel event logged since it was made means it was delivered.
    """
    if raw is None or not cancellable(wtype, state):
        return None
    request = CancelRequest.parse(raw)
    if request.version is not None:
        later = await engine.store.history(workflow_id, after_version=request.version)
        if any(rec.event == wtype.cancel_event for rec in later):
            return None
    return request


class _Leased(StatewrightError):
    """A worker holds the workflow: the cancel goes to its handler as a request."""

    code = "leased"

    def __init__(self, row: WorkflowRow) -> None:
        self.row = row
        super().__init__()


async def cancel(engine: Engine, workflow_id: str, reason: str, actor: str) -> WorkflowRow:
    """See :meth:`statewright.engine.core.Engine.cancel`."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("a cancel needs a reason")
    for attempt in range(5):
        try:
            return await _fire_now(engine, workflow_id, reason, actor)
        except VersionConflict:
            if attempt == 4:
                raise
            continue  # a concurrent writer won: look again
        except _Leased as leased:
            at = engine.clock.now()
            raw = CancelRequest(reason, actor, at, leased.row.version).dumps()
            row = await engine.store.request_cancel(workflow_id, raw, at)
            log.info(
                "cancel requested",
                extra={
                    "action": "cancel_requested",
                    "workflow_id": workflow_id,
                    "state": leased.row.state,
                    "actor": actor,
                    "reason": reason,
                },
            )
            if row.lease_owner is not None or attempt == 4:
                return row
            # The worker let go between our read and the request: nobody may see the flag
            # (its next state may have no handler), so fire it ourselves.
    raise AssertionError("unreachable")


async def _fire_now(engine: Engine, workflow_id: str, reason: str, actor: str) -> WorkflowRow:
    seen: list[WorkflowRow] = []

    def plan(row: WorkflowRow) -> TransitionWrite:
        # Inside the store's write, on the row it just read: lease check and transition are
        # one atomic step, so a worker cannot claim the workflow in between.
        seen.append(row)
        wtype = engine.type_of(row.type, row.machine_version)
        event = wtype.cancel_event
        if event is None:
            raise IllegalTransition(
                row.state,
                "cancel",
                wtype.machine.allowed_events(row.state, row.context),
                f"type {wtype.name!r} has no cancel event",
                row.id,
            )
        if row.lease_owner is not None and not row.terminal:
            if not wtype.machine.can(row.state, event):
                allowed = wtype.machine.allowed_events(row.state, row.context)
                raise IllegalTransition(row.state, event, allowed, None, row.id)
            raise _Leased(row)
        return engine._plan(row, event, {"reason": reason}, actor, release_lease=False)

    try:
        before, after = await engine.store.apply_event(workflow_id, plan)
    except (IllegalTransition, InvalidPayload, VersionConflict) as exc:
        if seen:
            event = getattr(exc, "event", None) or "cancel"
            engine.observers.rejected_transition(workflow_id, seen[-1].state, event, exc)
        raise
    except StoreError as exc:
        engine.observers.persistence_failed(workflow_id, "cancel", exc)
        raise
    event = engine.type_of(after.type, after.machine_version).cancel_event or "cancel"
    engine.observers.transitioned(TransitionEvent(before, after, event, actor))
    return after


async def fire_cancel(
    engine: Engine,
    row: WorkflowRow,
    wtype: WorkflowType,
    reason: str,
    actor: str,
    partial: dict[str, Any] | None = None,
    *,
    park: bool = True,
) -> WorkflowRow | None:
    """Fire the cancel event on ``row`` as read, with ``partial`` as the context patch.

    Without an edge for it, or when a guard or the payload schema refuses it, the workflow
    is parked with the error (``park``) or the refusal is raised. Returns the new row, or
    None if the workflow moved on meanwhile (the lease is then released).
    """
    store = engine.store
    event = wtype.cancel_event
    try:
        if event is None or not wtype.machine.can(row.state, event):
            allowed = wtype.machine.allowed_events(row.state, row.context)
            raise IllegalTransition(row.state, event or "cancel", allowed, None, row.id)
        return await engine._fire(
            row, event, {"reason": reason}, actor, context_patch=partial or None, attempts=0
        )
    except VersionConflict:
        if row.lease_owner is not None:
            await store.release_lease(row.id, row.lease_owner)
        return None
    except (IllegalTransition, InvalidPayload, InvalidInput) as exc:
        if not park:
            raise
        error = f"cancelled ({reason}) but the cancel event was refused: {exc.message}"
    log.error(error, extra={"action": "workflow_parked", "workflow_id": row.id})
    try:
        return await store.defer(
            row.id,
            row.version,
            attempts=row.attempts,
            next_due_at=None,
            last_error=error[:1000],
            at=engine.clock.now(),
        )
    except VersionConflict:
        return None


async def deliver_pending(
    engine: Engine, wtype: WorkflowType, row: WorkflowRow | None, actor: str
) -> None:
    """Deliver a request that arrived while a worker (or recovery) held the workflow.

    Called with the row a worker's write returned. Needed only when no worker will claim the
    workflow soon (a state without a handler, a retry backoff): a claim delivers pending
    requests itself. The requester is the event's actor; ``actor`` if unknown.
    """
    if row is None or row.cancel_requested is None or row.terminal:
        return
    if row.next_due_at is not None and row.next_due_at <= engine.clock.now():
        return
    try:
        request = await pending(engine, wtype, row.id, row.state, row.cancel_requested)
        if request is not None:
            await fire_cancel(
                engine, row, wtype, request.reason, request.actor or actor, park=False
            )
    except StatewrightError as exc:
        log.warning(
            "cancel request not delivered",
            extra={"action": "cancel_refused", "workflow_id": row.id, "error": exc.message},
        )
