"""Dynamic and recurring timers: scheduling one on a workflow, cancelling it, re-arming.

A **dynamic timer** is armed on one workflow at run time (``Engine.schedule``, or
``run.schedule`` inside a handler) rather than by its state's definition. It belongs to the
*visit* of the state it was armed in: leaving the state clears it like the state's own
timers, unless it is ``keep`` (then only reaching a terminal state clears it). A timer has a
``key`` (by default its event's name): scheduling the same key again replaces the pending
timer, which extends a deadline and makes a client's retry harmless.

Scheduling on its own never changes the workflow's version, so a handler running meanwhile
still gets its result applied. It is conditioned, in the store's write, on the workflow still
being in the visit it was read in (same state, same entry time, not terminal); when a
transition got there first, the workflow is read again and the timer is armed in the visit
it is in now (:data:`MAX_SCHEDULE_ROUNDS` times at most). So a timer never survives into a
state it was not meant for: either the transition that leaves the state sees it (and clears
it), or the schedule sees the new visit.

A timer scheduled on someone's behalf (``Engine.schedule`` with an ``actor``: through
``Access``, HTTP or the CLI) keeps who scheduled it (``scheduled_by``), and the transition it
makes when it fires names them: its actor is ``timer for <who>`` (:func:`timer_actor`). A
timer the machine arms itself (``State.after``/``every``) or a handler's ``run.schedule`` is
the system's: its actor is ``timer``.

A **recurring timer** (``State.every``) re-arms itself when it fires and the workflow stays
in the state: next due is the first ``due_at + k * every`` after now (missed intervals are
skipped, never fired in a burst).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from statewright.definition.machine import Machine
from statewright.engine.reads import get
from statewright.errors import (
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    TimerNotFound,
    VersionConflict,
    WorkflowFinished,
    WorkflowNotFound,
)
from statewright.types import TimerRecord, TimerSpec, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

MAX_SCHEDULE_ROUNDS = 8
"""Re-reads a schedule may take while transitions keep moving the workflow to new visits."""

_TIMER_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
_SEGMENT = r"(?:[!-.0-~]{3,}|[!-\-0-~]|[!-\-0-~][!-.0-~]|\.[!-\-0-~])?"
TIMER_KEY_PATTERN = rf"^{_SEGMENT}(?:/{_SEGMENT})*$"
"""A new timer's key (with 1-200 characters): printable ASCII, no ``.`` or ``..`` between
slashes. Written without look-arounds so the OpenAPI document (and pydantic) can state it as
it is checked here."""
_NEW_TIMER_KEY = re.compile(TIMER_KEY_PATTERN)
TIMER_ACTOR = "timer"
"""The actor of a transition a timer of the system's makes."""


def timer_actor(timer: TimerRecord) -> str:
    """The actor of the transition ``timer`` makes when it fires: ``timer``, or
    ``timer for <who scheduled it>``."""
    if timer.scheduled_by is None:
        return TIMER_ACTOR
    return f"{TIMER_ACTOR} for {timer.scheduled_by}"


def check_key(key: object) -> str:
    """A timer's key: 1-200 printable ASCII characters, not ``.`` or ``..`` between slashes
    (a URL path addresses a key with ``/``, and clients rewrite such segments)."""
    if not isinstance(key, str) or not 0 < len(key) <= 200 or not _NEW_TIMER_KEY.match(key):
        raise InvalidInput(
            f"invalid timer key {key!r}: 1-200 printable ASCII characters, "
            "no '.' or '..' between slashes"
        )
    return key


def next_occurrence(due_at: float, every: float, now: float) -> float:
    """The first ``due_at + k * every`` (k >= 1) later than ``now``: a recurring timer's next
    due time, skipping the intervals missed while nobody looked (never a burst)."""
    k = max(1, math.floor((now - due_at) / every) + 1)
    nxt = due_at + k * every
    while nxt <= now:  # float rounding
        nxt += every
    return nxt


def rearmed(timer: TimerRecord, now: float) -> TimerSpec | None:
    """A fired recurring timer as re-armed for its next interval (None for a one-shot)."""
    if timer.every is None:
        return None
    return TimerSpec(
        next_occurrence(timer.due_at, timer.every, now),
        timer.event,
        timer.payload,
        key=timer.key,
        every=timer.every,
        keep=timer.keep,
    )


def timer_spec(
    rt: Runtime,
    machine: Machine,
    state: str | None,
    event: str,
    *,
    after: float | None,
    at: float | None,
    payload: Mapping[str, Any] | None,
    key: str | None,
    keep: bool,
) -> TimerSpec:
    """Check a timer to schedule in ``state`` and build it (nothing is written).

    The event must be declared; a timer that is not ``keep`` fires in this state, so the event
    must also have an edge out of it (a keep timer may fire in a later state; with ``state``
    None, the state is not known yet and only the declaration is checked). The payload is
    checked against the event's schema and the engine's limits now, not at firing time.

    Raises IllegalTransition, InvalidPayload, InvalidInput (ValueTooDeep, ValueTooLarge).
    """
    if (after is None) == (at is None):
        raise InvalidInput("a timer needs exactly one of 'after' (seconds) or 'at' (a time)")
    when = after if after is not None else at
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when):
        raise InvalidInput(f"a timer's time must be a finite number, got {when!r}")
    if after is not None and after < 0:
        raise InvalidInput(f"'after' must not be negative, got {after!r}")
    if not isinstance(keep, bool):
        raise InvalidInput("'keep' must be true or false")
    key = check_key(event if key is None else key)
    ev = machine.events.get(event) if isinstance(event, str) else None
    if ev is None:
        raise IllegalTransition(state or "?", str(event), [], "the machine declares no such event")
    if state is not None and not keep and not machine.can(state, event):
        raise IllegalTransition(
            state,
            event,
            [e for e in machine.events if machine.can(state, e)],
            "a timer that is not kept fires in this state, and no transition on it leaves it",
        )
    body: Mapping[str, Any] = {} if payload is None else payload
    if not isinstance(body, Mapping):
        raise InvalidPayload(event, f"expected a JSON object, got {type(body).__name__}")
    rt.limits.check(dict(body), f"payload of timer {key!r}")
    ev.validate_payload(dict(body))
    due = rt.clock.now() + after if after is not None else float(at)  # type: ignore[arg-type]
    return TimerSpec(float(due), event, dict(body), key=key, keep=keep)


async def schedule(
    rt: Runtime,
    workflow_id: str,
    event: str,
    *,
    after: float | None = None,
    at: float | None = None,
    payload: Mapping[str, Any] | None = None,
    key: str | None = None,
    keep: bool = False,
    actor: str | None = None,
) -> TimerRecord:
    """Arm a durable timer on one workflow: fire ``event`` (with ``payload``) ``after``
    seconds from now or ``at`` an epoch time (exactly one of them).

    ``actor``: who schedules it, kept with the timer (``scheduled_by``); the transition
    it makes when it fires is logged with the actor ``timer for <actor>``. None (the
    default): a timer of the system's, logged as ``timer``. (The engine trusts its
    caller; :meth:`Access.schedule <statewright.access.Access.schedule>` first checks that
    the caller may fire ``event`` itself.)

    ``key`` (default: the event's name) names it: scheduling the same key again replaces
    the pending timer (extend a deadline; a retried call changes nothing more). It belongs
    to the workflow's current visit of its state: leaving the state clears it, unless
    ``keep`` (then only reaching a terminal state does). Scheduling does not change the
    workflow's version (a running handler's result still applies), and is atomic with the
    check that the workflow is still in the visit it was read in: a timer never survives
    into a state it was not meant for (a transition racing it moves it to the new visit,
    where it is checked again). At firing time it is a timer like the state's own: a
    refused event fails the workflow, as for ``after`` timers.

    Raises WorkflowNotFound, WorkflowFinished (terminal), IllegalTransition (the event is
    not declared, or a timer that is not kept has no edge out of the current state),
    InvalidPayload, InvalidInput (ValueTooDeep, ValueTooLarge; not exactly one of
    ``after``/``at``; a bad key), VersionConflict (the workflow kept moving).
    """
    row: WorkflowRow | None = None
    for _ in range(MAX_SCHEDULE_ROUNDS):
        row = await get(rt, workflow_id)
        if row.terminal:
            raise WorkflowFinished(workflow_id, row.state)
        machine = rt.registry.type_of(row.type, row.machine_version).machine
        spec = timer_spec(
            rt,
            machine,
            row.state,
            event,
            after=after,
            at=at,
            payload=payload,
            key=key,
            keep=keep,
        )
        record = await rt.store.schedule_timer(
            workflow_id,
            spec,
            state=row.state,
            entered_at=row.state_entered_at,
            at=rt.clock.now(),
            scheduled_by=actor,
        )
        if record is not None:
            log.info(
                "timer scheduled",
                extra={
                    "action": "timer_scheduled",
                    "workflow_id": workflow_id,
                    "event": event,
                    "key": record.key,
                    "due_at": record.due_at,
                    "keep": keep,
                    "actor": actor or "system",
                },
            )
            return record
        # A transition moved the workflow to another visit since the read: read it again.
    raise VersionConflict(workflow_id, row.version if row else 0, None)


async def cancel(rt: Runtime, workflow_id: str, key: str, *, actor: str = "system") -> bool:
    """Delete a workflow's pending timer by its key; True if there was one (it never
    fires). Raises WorkflowNotFound, InvalidInput (a bad key)."""
    if not isinstance(key, str) or not _TIMER_KEY.fullmatch(key):
        raise InvalidInput(f"invalid timer key {key!r}: 1-200 printable ASCII characters")
    removed = await rt.store.cancel_timer(workflow_id, key, at=rt.clock.now())
    if removed:
        log.info(
            "timer cancelled",
            extra={
                "action": "timer_cancelled",
                "workflow_id": workflow_id,
                "key": key,
                "actor": actor,
            },
        )
    return removed


async def cancel_or_raise(rt: Runtime, workflow_id: str, key: str, *, actor: str) -> None:
    """:func:`cancel`, raising TimerNotFound when there was no such timer."""
    if not await cancel(rt, workflow_id, key, actor=actor):
        raise TimerNotFound(workflow_id, key)


async def listing(rt: Runtime, workflow_id: str) -> list[TimerRecord]:
    """A workflow's pending timers (the state's own and scheduled ones), earliest first.
    Raises WorkflowNotFound."""
    if await rt.store.get_workflow(workflow_id) is None:
        raise WorkflowNotFound(workflow_id)
    return await rt.store.timers(workflow_id)
