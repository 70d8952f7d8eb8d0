"""Parameters only PostgreSQL's statements take: a write's timers as parallel arrays (unnested
in SQL: any number of timers, still one statement), and everything ``apply_transition``
binds (its compare-and-swap, log entry, timer changes, inbox consumption and carried step
outcome in one statement). The rest is shared: :mod:`statewright.store.params`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statewright.store import params
from statewright.store.params import POSTGRES, opt_float
from statewright.types import DeferWrite, StepFinish, TimerSpec, TransitionWrite


def timer_params(timers: Iterable[TimerSpec]) -> dict[str, list[Any]]:
    timers = list(timers)
    return {
        "timer_due": [float(t.due_at) for t in timers],
        "timer_event": [t.event for t in timers],
        "timer_payload": [POSTGRES.json(t.payload) for t in timers],
        "timer_key": [t.key for t in timers],
        "timer_every": [opt_float(t.every) for t in timers],
        "timer_keep": [bool(t.keep) for t in timers],
    }


def timer_change_params(w: TransitionWrite | DeferWrite) -> dict[str, Any]:
    """A write's timer changes: the timers to arm, the keys they replace or that are
    cancelled, and the fired timer.

    Every write also requires the row version its statement's snapshot saw (``xmin``, in
    ``apply_transition`` and ``defer_workflow``): each sets ``next_due_at`` from the pending
    timers that snapshot shows, and a timer armed meanwhile on its own (``schedule_timer``,
    or a child's end armed on its parent) commits with an update of the row that this write
    then waits for, and would overwrite with a due time that misses it, leaving the timer
    pending on a row no worker claims. Such a write matches nothing and runs again on a
    fresh snapshot (see ``_refusal``'s ``retryable``).
    """
    drop = params.dropped_keys(w)
    return {
        **timer_params(w.add_timers),
        "drop_keys": drop,
        "fired_timer_id": w.fired_timer_id,
    }


def transition_params(w: TransitionWrite) -> dict[str, Any]:
    """Everything ``apply_transition`` binds; raises InvalidInput before any I/O."""
    return {
        **params.transition(w, POSTGRES),
        **params.logged(w, POSTGRES),
        "clear_timers": bool(w.clear_timers),
        "inbox_ids": list(w.consume_inbox_ids),
        **timer_change_params(w),
        **step_finish_params(w.step_finish),
    } | ({"search": POSTGRES.json(w.search)} if w.search else {})


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
    return {f"step_{k}": v for k, v in params.step_finish(finish, POSTGRES).items()}
