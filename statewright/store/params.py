"""Parameters of both SQL stores' statements, built once from statewright's records.

Both dialects bind named parameters (``:name`` on SQLite, ``%(name)s`` on PostgreSQL) from the
same dicts; a statement uses the names it needs. What differs is in an :class:`Encoding`: how a
JSON value is written, how a list is passed (a JSON array that ``json_each`` reads on SQLite,
an array on PostgreSQL) and what ``LIMIT`` takes for "no limit". Times are bound as floats
and flags as booleans on both (``sqlite3`` stores a boolean as 0 or 1).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from statewright import jsonvalue
from statewright.errors import InvalidInput
from statewright.types import (
    CancelRequest,
    DeferWrite,
    Lease,
    NewWorkflow,
    ScheduleRecord,
    StepFinish,
    StepOutcome,
    TimerSpec,
    TransitionWrite,
)

Params = dict[str, Any]


def _json_text(value: Any, *, ensure_ascii: bool) -> str:
    if type(value) is dict and not value:
        return "{}"  # an event's usual payload: no encoder call
    try:
        return jsonvalue.dumps(value, sort_keys=True, allow_nan=False, ensure_ascii=ensure_ascii)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"not JSON-serialisable: {exc}") from exc


def sqlite_json(value: Any) -> str:
    """JSON text for a TEXT column; InvalidInput for what JSON cannot hold."""
    text = _json_text(value, ensure_ascii=False)
    try:
        # A lone surrogate ("\ud800") would be stored, then break every read of the row as
        # UTF-8: refuse it here, like PostgreSQL's JSONB does.
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"not JSON-serialisable: {exc}") from exc
    return text


# A JSON string (skipped whole) or a number written with an exponent.
_EXPONENT_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?[eE][-+]?\d+)')


def _positional(match: re.Match[str]) -> str:
    number = match.group(1)
    if number is None:
        return match.group(0)
    text = format(Decimal(number), "f")
    return text if "." in text else text + ".0"


def postgres_json(value: Any) -> str:
    """JSON text for a JSONB parameter; InvalidInput for what JSON cannot hold."""
    text = _json_text(value, ensure_ascii=True)
    # JSONB keeps numbers as exact decimals without their notation: 1e16 would come back as
    # the int 10000000000000000 and 1e300 as an int unequal to the float. Written out with a
    # fraction digit, a float stays a float, and the same one.
    return _EXPONENT_NUMBER.sub(_positional, text) if "e" in text or "E" in text else text


def _json_array(values: Iterable[Any]) -> str:
    return json.dumps(list(values))


@dataclass(frozen=True)
class Encoding:
    """How a dialect binds what the named parameters cannot say alike."""

    json: Callable[[Any], str]
    """A JSON value's parameter."""
    array: Callable[[Iterable[Any]], Any]
    """A list's parameter."""
    no_limit: int | None
    """``LIMIT``'s parameter for "all rows"."""

    def limit(self, limit: int | None) -> int | None:
        return self.no_limit if limit is None else limit

    def optional_json(self, value: Any) -> str | None:
        return None if value is None else self.json(value)


SQLITE = Encoding(sqlite_json, _json_array, -1)
POSTGRES = Encoding(postgres_json, list, None)


def dropped_keys(w: TransitionWrite | DeferWrite) -> list[str]:
    """The keys whose pending timers a write deletes: those it cancels, and those it arms
    again (the new timer replaces the pending one)."""
    return [*w.cancel_timer_keys, *(t.key for t in w.add_timers if t.key is not None)]


def opt_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def lease(held: Lease | None) -> Params:
    """The fencing parameters of a worker's write (NULL for anyone else's)."""
    return {
        "owner": None if held is None else held.owner,
        "fence": None if held is None else held.fence,
    }


def step_start(
    key: str,
    workflow_id: str,
    step: str,
    at: float,
    held: Lease | None,
    compensation: str | None = None,
) -> Params:
    """The parameters of a step's start (``step_begin``, ``step_open``); ``compensation``:
    the name of the step's undo, recorded with it (None: none)."""
    return {
        "key": key,
        "workflow_id": workflow_id,
        "step": step,
        "at": float(at),
        "compensation": compensation,
    } | lease(held)


def step_finish(finish: StepFinish, enc: Encoding) -> Params:
    """The outcome of one step attempt."""
    return {
        "key": finish.key,
        "attempt": finish.attempt,
        "status": finish.status,
        "result": enc.optional_json(finish.result),
        "error": finish.error,
        "outcome": finish.outcome,
        "at": float(finish.at),
    }


def step_verdict(
    key: str,
    status: str,
    result: Any,
    outcome: StepOutcome | None,
    note: str,
    at: float,
    enc: Encoding,
) -> Params:
    """An operator's verdict on a step (``resolve_step``)."""
    return {
        "key": key,
        "status": status,
        "result": enc.optional_json(result),
        "outcome": outcome,
        "error": note,
        "at": float(at),
    }


def timer(workflow_id: str, t: TimerSpec, scheduled_by: str | None, enc: Encoding) -> Params:
    """One timer armed (``insert_timer``)."""
    return {
        "id": workflow_id,
        "due_at": float(t.due_at),
        "event": t.event,
        "payload": enc.json(t.payload),
        "key": t.key,
        "every": opt_float(t.every),
        "keep": bool(t.keep),
        "scheduled_by": scheduled_by,
    }


def cancel(workflow_id: str, request: CancelRequest) -> Params:
    return {
        "id": workflow_id,
        "reason": request.reason,
        "actor": request.actor,
        "at": opt_float(request.at),
        "version": request.version,
        "key": request.idempotency_key,
    }


def progress(
    workflow_id: str, report: dict[str, Any], held: Lease | None, enc: Encoding
) -> Params:
    return {"id": workflow_id, "progress": enc.json(report), **lease(held)}


def new_workflow(new: NewWorkflow, enc: Encoding) -> Params:
    """A workflow's first row and log entry (``payload`` None: the log entry's is the
    context)."""
    return {
        "id": new.id,
        "type": new.type,
        "machine_version": new.machine_version,
        "state": new.state,
        "context": enc.json(new.context),
        "terminal": bool(new.terminal),
        "at": float(new.at),
        "run_at": opt_float(new.run_at),
        "actor": new.actor,
        "event": new.event,
        "payload": enc.optional_json(new.payload),
        "tenant": new.tenant,
        "idempotency_key": new.idempotency_key,
        "trace": new.trace,
        "parent_id": None if new.parent is None else new.parent.id,
        "parent_key": None if new.parent is None else new.parent.key,
    } | ({"search": enc.json(new.search)} if new.search else {})


def search_rows(workflow_id: str, search: Mapping[str, str | None]) -> list[Params]:
    """One row per search attribute written (SQLite's ``put_search_attribute``)."""
    return [{"id": workflow_id, "name": n, "value": v} for n, v in search.items()]


def parent_check(new: NewWorkflow) -> Params:
    """What a child's create checks of its parent (see :attr:`NewWorkflow.parent`)."""
    assert new.parent is not None
    lease = new.parent.lease
    return {
        "id": new.parent.id,
        "owner": None if lease is None else lease.owner,
        "fence": None if lease is None else lease.fence,
    }


def notice(w: TransitionWrite, enc: Encoding) -> Params:
    """A child's end armed on its parent (see :attr:`TransitionWrite.notice`)."""
    t = w.notice
    assert t is not None
    return {
        "child": w.workflow_id,
        "due_at": float(t.due_at),
        "event": t.event,
        "payload": enc.json(t.payload),
        "key": t.key,
        "scheduled_by": f"child {w.workflow_id}",
    }


def claim(worker_id: str, now: float, lease_seconds: float, limit: int) -> Params:
    return {
        "worker": worker_id,
        "until": float(now + lease_seconds),
        "now": float(now),
        "limit": limit,
    }


def transition(w: TransitionWrite, enc: Encoding) -> Params:
    """What a transition's compare-and-swap of the workflow row binds (each dialect adds the
    rest of its statement's)."""
    return {
        "id": w.workflow_id,
        "expected_version": w.expected_version,
        "to_state": w.to_state,
        "machine_version": w.machine_version,
        "context": enc.json(w.context),
        "attempts": w.attempts,
        "total_attempts": w.total_attempts,
        "terminal": bool(w.terminal),
        "at": float(w.at),
        "run_at": opt_float(w.run_at),
        "last_error": w.last_error,
        "release_lease": bool(w.release_lease),
        "require_unleased": bool(w.require_unleased),
        "trace": w.trace,
        **lease(w.lease),
    }


TRANSACTIONS_KEY = "$transactions"
"""The log entry's payload key naming the transactional steps that committed with it."""


def logged(w: TransitionWrite, enc: Encoding) -> Params:
    """A transition's log entry, as the compare-and-swap's parameters do not say it (with
    the names of its transactional steps, if any, under :data:`TRANSACTIONS_KEY`)."""
    payload = w.payload
    if w.effects:
        payload = {**payload, TRANSACTIONS_KEY: [step.name for step in w.effects]}
    return {
        "from_state": w.from_state,
        "event": w.event,
        "payload": enc.json(payload),
        "actor": w.actor,
        "context_patch": enc.optional_json(w.context_patch),
        "idempotency_key": w.idempotency_key,
        "messages": enc.json(list(w.messages)) if w.messages else None,
    }


def deferral(w: DeferWrite) -> Params:
    """What a deferral's compare-and-swap binds."""
    return {
        "id": w.workflow_id,
        "expected_version": w.expected_version,
        "attempts": w.attempts,
        "total_attempts": w.total_attempts,
        "next_due_at": opt_float(w.next_due_at),
        "last_error": w.last_error,
        "parked": w.parked,
        "at": float(w.at),
        **lease(w.lease),
        "wake": w.wake_input is not None,
        "wake_name": None if w.wake_input is None else w.wake_input[0],
    }


def schedule(s: ScheduleRecord, enc: Encoding) -> Params:
    return {
        "id": s.id,
        "type": s.type,
        "cron": s.cron,
        "timezone": s.timezone,
        "catch_up": s.catch_up,
        "input": enc.json(s.input),
        "tenant": s.tenant,
        "paused": bool(s.paused),
        "next_at": float(s.next_at),
        "at": float(s.updated_at),
        "created_by": s.created_by,
    }


def schedule_tick(
    schedule_id: str,
    expected_next_at: float,
    next_at: float,
    at: float,
    last_tick: float | None,
    last_workflow_id: str | None,
    error: str | None,
) -> Params:
    """A schedule's compare-and-swap to its next tick (``schedule_advance``)."""
    return {
        "id": schedule_id,
        "expected_next_at": float(expected_next_at),
        "next_at": float(next_at),
        "last_tick": opt_float(last_tick),
        "last_workflow_id": last_workflow_id,
        "message": error,
        "at": float(at),
    }
