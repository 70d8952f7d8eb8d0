"""Cancelling workflows: at once when idle, through the running handler when leased.

A cancel is the type's ``cancel_event`` (payload ``{"reason": ...}``). On a workflow no worker
holds it fires right away. On a leased one it becomes a request (``store.request_cancel``:
reason, requester, time, the workflow's version then, and the requester's idempotency key, as
columns) that the worker delivers: its handler sees it at ``run.check_cancel()``, before each
``run.step`` and in ``run.wait_input``, or has its task cancelled after the worker's
``cancel_grace``; either way the worker then fires the cancel event with the handler's partial
results as a context patch, in one transition that carries the request's idempotency key.

The request stays until the workflow ends; the version it was made at tells a request already
delivered (a cancel edge into a non-terminal state) from a new one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from statewright.engine.reads import get
from statewright.engine.transitions import Defer, Dispatched, Fire, same_json
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import (
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    LeaseLost,
    StatewrightError,
    VersionConflict,
)
from statewright.types import CancelRequest, Lease, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

__all__ = ["CancelRequest", "cancel", "cancellable", "deliver_pending", "fire_cancel", "pending"]


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
    rt: Runtime,
    wtype: WorkflowType,
    workflow_id: str,
    state: str,
    request: CancelRequest | None,
) -> CancelRequest | None:
    """The request to act on in ``state``, or None.

    A request waits while the state has no cancel edge (a cleanup state the cancel led to,
    say), and counts once: a cancel event logged since it was made means it was delivered.
    """
    if request is None or not cancellable(wtype, state):
        return None
    if request.version is not None:
        later = await rt.store.history(workflow_id, after_version=request.version)
        if any(rec.event == wtype.cancel_event for rec in later):
            return None
    return request


async def cancel(
    rt: Runtime,
    workflow_id: str,
    reason: str,
    actor: str,
    key: str | None,
    expected_version: int | None = None,
    if_allowed: bool = False,
) -> Dispatched:
    """See :meth:`statewright.engine.core.Engine.cancel`."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("a cancel needs a reason")
    payload = {"reason": reason}
    transitions = rt.transitions
    for attempt in range(8):
        row = await get(rt, workflow_id)
        wtype = rt.registry.type_of(row.type, row.machine_version)
        event = wtype.cancel_event
        if key is not None:
            replayed = await _replayed(rt, row, key, event, payload)
            if replayed is not None:
                return replayed  # a retry: the key decides, not the version its first try read
        if expected_version is not None and row.version != expected_version:
            conflict = VersionConflict(workflow_id, expected_version, row.version)
            await transitions.rejected(workflow_id, row, event or "cancel", conflict, actor)
            raise conflict
        if event is None or not wtype.machine.can(row.state, event):
            try:
                if event is None:
                    raise IllegalTransition(
                        row.state,
                        "cancel",
                        wtype.machine.allowed_events(row.state, row.context),
                        f"type {wtype.name!r} has no cancel event",
                        row.id,
                    )
                transitions.plan(row, Fire(event, payload, actor))  # raises, naming why
            except (IllegalTransition, InvalidPayload) as exc:
                if if_allowed and event is not None and isinstance(exc, IllegalTransition):
                    # Not allowed now (finished, no edge from this state): told, not refused,
                    # as for an event sent if_allowed; a payload its schema rejects still is.
                    refused: StatewrightError = exc
                    try:
                        wtype.machine.events[event].validate_payload(payload)
                    except InvalidPayload as bad:
                        refused = bad
                    else:
                        rt.observers.event_not_applied(row, event, exc, actor)
                        return Dispatched(row, False, row.version, applied=False, refusal=exc)
                    await transitions.rejected(workflow_id, row, event, refused, actor)
                    raise refused from None
                await transitions.rejected(workflow_id, row, event or "cancel", exc, actor)
                raise
        if row.lease_owner is not None and not row.terminal:
            request = CancelRequest(reason, actor, rt.clock.now(), row.version, key)
            requested = await rt.store.request_cancel(workflow_id, request)
            log.info(
                "cancel requested",
                extra={
                    "action": "cancel_requested",
                    "workflow_id": workflow_id,
                    "state": row.state,
                    "actor": actor,
                    "reason": reason,
                },
            )
            if requested.lease_owner is not None or attempt == 7:
                return Dispatched(requested, False, requested.version)
            # The worker let go between our read and the request: nobody may see it (its
            # next state may have no handler), so fire it ourselves.
            continue
        fire = Fire(
            event,
            payload,
            actor,
            release_lease=False,
            # Fired only while no worker holds it: a worker that claimed it meanwhile gets
            # the request instead, so its handler can save partial results.
            require_unleased=True,
            idempotency_key=key,
        )
        try:
            after = await transitions.fire(row, fire)
            return Dispatched(after, False, after.version)
        except (VersionConflict, IdempotencyKeyReused):
            continue  # a worker claimed it, or a concurrent writer won: look again
    raise VersionConflict(workflow_id, 0, None)


async def _replayed(
    rt: Runtime, row: WorkflowRow, key: str, event: str | None, payload: dict[str, Any]
) -> Dispatched | None:
    """The workflow if a cancel with this key was applied or is pending; None if the key is
    new; IdempotencyKeyReused if it was used for something else."""
    prior = await rt.store.transition_by_key(row.id, key)
    if prior is not None:
        if prior.event != event or not same_json(prior.payload, payload):
            raise IdempotencyKeyReused(row.id, key, f"event {prior.event!r}")
        return Dispatched(row, True, prior.version)
    if row.cancel is not None and row.cancel.idempotency_key == key:
        if row.cancel.reason != payload["reason"]:
            raise IdempotencyKeyReused(row.id, key, "a cancel with another reason")
        return Dispatched(row, True, row.version)  # still pending with the worker
    return None


async def fire_cancel(
    rt: Runtime,
    row: WorkflowRow,
    wtype: WorkflowType,
    request: CancelRequest,
    actor: str,
    partial: dict[str, Any] | None = None,
    *,
    park: bool = True,
    lease: Lease | None = None,
    consume_inputs: tuple[int, ...] = (),
) -> WorkflowRow | None:
    """Fire the cancel event on ``row`` as read, with ``partial`` as the context patch.

    ``lease``: the worker's claim (the write is fenced by it and releases it); without one,
    it applies only while no worker holds the workflow. Without an edge for it, or when a
    guard or the payload schema refuses it, the workflow is parked with the error (``park``)
    or the refusal is raised. Returns the new row, or None if the workflow moved on or the
    lease is gone (a held lease is then released).
    """
    event = wtype.cancel_event
    reason = request.reason
    try:
        if event is None or not wtype.machine.can(row.state, event):
            allowed = wtype.machine.allowed_events(row.state, row.context)
            raise IllegalTransition(row.state, event or "cancel", allowed, None, row.id)
        return await rt.transitions.fire(
            row,
            Fire(
                event,
                {"reason": reason},
                actor,
                context_patch=partial or None,
                attempts=0,
                lease=lease,
                require_unleased=lease is None,
                idempotency_key=request.idempotency_key,
                consume_inputs=consume_inputs,
            ),
        )
    except (VersionConflict, IdempotencyKeyReused):
        if lease is not None:
            await rt.store.release_lease(row.id, lease)
        return None
    except LeaseLost:
        return None
    except (IllegalTransition, InvalidPayload, InvalidInput) as exc:
        if not park:
            raise
        error = f"cancelled ({reason}) but the cancel event was refused: {exc.message}"
    log.error(error, extra={"action": "workflow_parked", "workflow_id": row.id})
    try:
        return await rt.transitions.defer(
            row,
            Defer(
                attempts=row.attempts,
                last_error=error[:1000],
                parked="cancel_refused",
                lease=lease,
                consume_inputs=consume_inputs,
            ),
        )
    except (VersionConflict, LeaseLost):
        return None


async def deliver_pending(
    rt: Runtime, wtype: WorkflowType, row: WorkflowRow | None, actor: str
) -> None:
    """Deliver a request that arrived while a worker (or recovery) held the workflow.

    Called with the row a worker's write returned (its lease released). Needed only when no
    worker will claim the workflow soon (a state without a handler, a retry backoff): a claim
    delivers pending requests itself. The requester is the event's actor; ``actor`` if
    unknown.
    """
    if row is None or row.cancel is None or row.terminal:
        return
    if row.next_due_at is not None and row.next_due_at <= rt.clock.now():
        return
    try:
        request = await pending(rt, wtype, row.id, row.state, row.cancel)
        if request is not None:
            await fire_cancel(rt, row, wtype, request, request.actor or actor, park=False)
    except StatewrightError as exc:
        log.warning(
            "cancel request not delivered",
            extra={"action": "cancel_refused", "workflow_id": row.id, "error": exc.message},
        )
