"""Cancelling workflows: at once when idle, through the running handler when leased.

A cancel is the type's ``cancel_event`` (payload ``{"reason": ...}``). On a workflow no worker
holds it fires right away. On a leased one it becomes a request (``store.request_cancel``:
reason, requester, time, the workflow's version then, and the requester's idempotency key, as
columns) that the worker delivers: its handler sees it at ``run.check_cancel()``, before each
``run.step`` and in ``run.wait_input``, or has its task cancelled after the worker's
``cancel_grace``; either way the worker then fires the cancel event with the handler's partial
results as a context patch, in one transition that carries the request's idempotency key (see
:mod:`statewright.engine.outcome`, which also delivers a request to a workflow no worker will
claim soon).

The request stays until the workflow ends; the version it was made at tells a request already
delivered (a cancel edge into a non-terminal state) from a new one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from statewright.engine.compensation_names import intended
from statewright.engine.compensation_owed import hand_over
from statewright.engine.reads import get
from statewright.engine.transitions import Dispatched, Fire, same_json
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import (
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    StatewrightError,
    VersionConflict,
)
from statewright.types import CancelRequest, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

__all__ = ["CancelRequest", "cancel", "cancellable", "pending"]


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
    recorded: CancelRequest | None = None
    """The request this call recorded on a row its worker let go meanwhile (see below)."""
    for attempt in range(8):
        row = await get(rt, workflow_id)
        wtype = rt.registry.type_of(row.type, row.machine_version)
        event = wtype.cancel_event
        if recorded is not None:
            # Ours: delivered since by a worker that claimed the row (success, not a refusal
            # of the finished workflow), still with a worker that holds it again, or
            # stranded on a row nobody will claim (fired here, below).
            delivered = await _delivered(rt, row, recorded, event)
            if delivered is not None:
                return delivered
            if row.lease_owner is not None and _same(row.cancel, recorded):
                return Dispatched(row, False, row.version)
        elif key is not None:
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
                    declared = wtype.machine.events.get(event)  # (a machine may lack it)
                    try:
                        if declared is not None:
                            declared.validate_payload(payload)
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
            # next state may have no handler), so fire it ourselves (unless a worker claims
            # it first and delivers it: then that delivery is this cancel's).
            recorded = request
            continue
        request = CancelRequest(reason, actor, rt.clock.now(), row.version, key)
        handing = "fire"
        if wtype.compensates:  # compensations run under a worker's claim: see hand_over
            handing = await hand_over(rt, wtype, row, request, now=True)
            if handing == "handed":
                return Dispatched(row, False, row.version)
        fire = Fire(
            event,
            payload,
            actor,
            release_lease=False,
            # Fired only while no worker holds it: a worker that claimed it meanwhile gets
            # the request instead, so its handler can save partial results.
            require_unleased=True,
            idempotency_key=key,
            compensated=() if handing == "fire_compensated" else None,
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
        if prior.event != event or not same_json(intended(prior.payload), payload):
            raise IdempotencyKeyReused(row.id, key, f"event {prior.event!r}")
        return Dispatched(row, True, prior.version)
    if row.cancel is not None and row.cancel.idempotency_key == key:
        if row.cancel.reason != payload["reason"]:
            raise IdempotencyKeyReused(row.id, key, "a cancel with another reason")
        if row.lease_owner is not None:
            return Dispatched(row, True, row.version)  # still pending with the worker
        # Recorded on a row its worker had just let go: no worker may ever claim it (a
        # state without a handler), so the request would wait for good. Fired by the caller.
    return None


def _same(found: CancelRequest | None, request: CancelRequest) -> bool:
    """Whether the row's pending request is ``request`` (as recorded)."""
    return found is not None and (found.reason, found.version, found.idempotency_key) == (
        request.reason,
        request.version,
        request.idempotency_key,
    )


async def _delivered(
    rt: Runtime, row: WorkflowRow, request: CancelRequest, event: str | None
) -> Dispatched | None:
    """The cancel a worker fired for ``request`` (a cancel event logged since it was made),
    or None."""
    if event is None or request.version is None:
        return None
    later = await rt.store.history(row.id, after_version=request.version)
    fired = next((rec for rec in later if rec.event == event), None)
    return None if fired is None else Dispatched(row, False, fired.version)
