"""PostgreSQL rows to and from statewright's types: JSON for JSONB, parameters, row decoding."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from psycopg.rows import DictRow

from statewright import jsonvalue
from statewright.errors import InvalidInput
from statewright.types import (
    CancelRequest,
    DeferWrite,
    InboxItem,
    Lease,
    StepFinish,
    StepRecord,
    TimerRecord,
    TimerSpec,
    TransitionRecord,
    TransitionWrite,
    WorkflowRow,
)

# A JSON string (skipped whole) or a number written with an exponent.
_EXPONENT_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?[eE][-+]?\d+)')


def _positional(match: re.Match[str]) -> str:
    number = match.group(1)
    if number is None:
        return match.group(0)
    text = format(Decimal(number), "f")
    return text if "." in text else text + ".0"


def dumps(value: Any) -> str:
    """JSON text for a JSONB parameter; InvalidInput for what JSON cannot hold."""
    try:
        text = jsonvalue.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not JSON-serialisable: {exc}") from exc
    # JSONB keeps numbers as exact decimals without their notation: 1e16 would come back as
    # the int 10000000000000000 and 1e300 as an int unequal to the float. Written out with a
    # fraction digit, a float stays a float, and the same one.
    return _EXPONENT_NUMBER.sub(_positional, text) if "e" in text or "E" in text else text


def timer_params(timers: Iterable[TimerSpec]) -> dict[str, list[Any]]:
    # Parallel arrays, unnested in SQL: any number of timers, still one statement.
    timers = list(timers)
    return {
        "timer_due": [float(t.due_at) for t in timers],
        "timer_event": [t.event for t in timers],
        "timer_payload": [dumps(t.payload) for t in timers],
        "timer_key": [t.key for t in timers],
        "timer_every": [None if t.every is None else float(t.every) for t in timers],
        "timer_keep": [bool(t.keep) for t in timers],
    }


def timer_change_params(w: TransitionWrite | DeferWrite, clear: bool) -> dict[str, Any]:
    """A write's timer changes: the timers to arm, the keys they replace or that are
    cancelled, the fired timer, and whether the write must see every timer (see
    ``apply_transition``)."""
    drop = [*w.cancel_timer_keys, *(t.key for t in w.add_timers if t.key is not None)]
    return {
        **timer_params(w.add_timers),
        "drop_keys": drop,
        "fired_timer_id": w.fired_timer_id,
        "timers_exact": bool(clear or drop or w.fired_timer_id is not None),
    }


def timer_record(r: Mapping[str, Any]) -> TimerRecord:
    return TimerRecord(
        id=r["id"],
        workflow_id=r["workflow_id"],
        due_at=r["due_at"],
        event=r["event"],
        payload=r["payload"],
        key=r["key"],
        every=r["every"],
        keep=bool(r["keep"]),
        scheduled_by=r["scheduled_by"],
    )


def transition_params(w: TransitionWrite) -> dict[str, Any]:
    """Everything ``apply_transition`` binds; raises InvalidInput before any I/O."""
    return {
        "id": w.workflow_id,
        "expected_version": w.expected_version,
        "from_state": w.from_state,
        "to_state": w.to_state,
        "machine_version": w.machine_version,
        "event": w.event,
        "payload": dumps(w.payload),
        "actor": w.actor,
        "at": float(w.at),
        "context": dumps(w.context),
        "context_patch": None if w.context_patch is None else dumps(w.context_patch),
        "terminal": bool(w.terminal),
        "attempts": w.attempts,
        "run_at": None if w.run_at is None else float(w.run_at),
        "clear_timers": bool(w.clear_timers),
        "release_lease": bool(w.release_lease),
        "last_error": w.last_error,
        "inbox_ids": list(w.consume_inbox_ids),
        "require_unleased": bool(w.require_unleased),
        "total_attempts": w.total_attempts,
        "idempotency_key": w.idempotency_key,
        "trace": w.trace,
        **lease_params(w.lease),
        **timer_change_params(w, w.clear_timers),
        **step_finish_params(w.step_finish),
    }


_STEP_FINISH_KEYS = (
    "step_key",
    "step_attempt",
    "step_status",
    "step_result",
    "step_error",
    "step_outcome",
    "step_at",
)


def step_finish_params(finish: StepFinish | None) -> dict[str, Any]:
    """The step outcome a transition carries (all NULL when none)."""
    if finish is None:
        return dict.fromkeys(_STEP_FINISH_KEYS)
    return {
        "step_key": finish.key,
        "step_attempt": finish.attempt,
        "step_status": finish.status,
        "step_result": None if finish.result is None else dumps(finish.result),
        "step_error": finish.error,
        "step_outcome": finish.outcome,
        "step_at": float(finish.at),
    }


def lease_params(lease: Lease | None) -> dict[str, Any]:
    """The fencing parameters of a worker's write (NULL for anyone else's)."""
    return {
        "owner": None if lease is None else lease.owner,
        "fence": None if lease is None else lease.fence,
    }


def cancel_request(r: Mapping[str, Any]) -> CancelRequest | None:
    reason = r["cancel_requested"]
    if reason is None:
        return None
    return CancelRequest(
        reason, r["cancel_actor"], r["cancel_at"], r["cancel_version"], r["cancel_key"]
    )


def workflow_row(r: DictRow) -> WorkflowRow:
    return WorkflowRow(
        id=r["id"],
        type=r["type"],
        machine_version=r["machine_version"],
        state=r["state"],
        context=r["context"],
        version=r["version"],
        attempts=r["attempts"],
        terminal=r["terminal"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        state_entered_at=r["state_entered_at"],
        next_due_at=r["next_due_at"],
        lease_owner=r["lease_owner"],
        lease_expires_at=r["lease_expires_at"],
        last_error=r["last_error"],
        cancel=cancel_request(r),
        progress=r["progress"],
        tenant=r["tenant"],
        fence=r["fence"],
        total_attempts=r["total_attempts"],
        parked=r["parked"],
        trace=r["trace"],
    )


def transition_record(r: DictRow) -> TransitionRecord:
    return TransitionRecord(
        seq=r["seq"],
        workflow_id=r["workflow_id"],
        version=r["version"],
        from_state=r["from_state"],
        to_state=r["to_state"],
        event=r["event"],
        payload=r["payload"],
        actor=r["actor"],
        context_patch=r["context_patch"],
        at=r["at"],
        idempotency_key=r["idempotency_key"],
    )


def step_record(r: Mapping[str, Any]) -> StepRecord:
    return StepRecord(
        key=r["key"],
        workflow_id=r["workflow_id"],
        step=r["step"],
        status=r["status"],
        result=r["result"],
        error=r["error"],
        attempts=r["attempts"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        outcome=r["outcome"],
        fence=r["fence"],
    )


def inbox_item(r: Mapping[str, Any]) -> InboxItem:
    return InboxItem(
        id=r["id"],
        workflow_id=r["workflow_id"],
        name=r["name"],
        payload=r["payload"],
        posted_at=r["posted_at"],
        consumed_at=r["consumed_at"],
        idempotency_key=r["idempotency_key"],
    )
