"""What a transition or a deferral is asked to do (:class:`Fire`, :class:`Defer`), what a send
did (:class:`Dispatched`), and the log's names for operators' transitions: the vocabulary of
:mod:`statewright.engine.transitions`, which plans and writes them (re-exported there).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statewright.errors import IllegalTransition
from statewright.types import (
    Lease,
    StepFinish,
    TimerSpec,
    TransactionalStep,
    WorkflowRow,
    quick_init,
)

MAX_SEND_ROUNDS = 32
"""Re-reads a send may take when concurrent writers keep moving the workflow."""
CONTEXT_EVENT = "$patch_context"
"""The log's name for an operator's explicit context patch (see ``Engine.patch_context``):
a self-transition that changes only the context, with the reason as its payload."""
RESUME_EVENT = "$resume"
"""An operator's resume (``Engine.resume``): a self-transition that makes the state's handler
run again, with the reason as its payload."""
MOVE_EVENT = "$move"
"""An admin's move to a named state (``Engine.move_to``), outside the machine's edges."""
MIGRATE_EVENT = "$migrate"
"""An operator's move of a workflow to another version of its machine (``Engine.migrate``)."""
FORK_EVENT = "$fork"
"""The first log entry of a workflow started from a past version of another (``fork``)."""
OPERATOR_EVENTS = frozenset({CONTEXT_EVENT, RESUME_EVENT, MOVE_EVENT, MIGRATE_EVENT})
"""Transitions people make outside the machine's events (no guard, no action); each is logged
with its actor and reason like any other, and replay accepts them."""


@quick_init
@dataclass(frozen=True)
class Fire:
    """A transition to make: which event, by whom, and what else changes with it."""

    event: str
    payload: Mapping[str, Any]
    actor: str
    context_patch: Mapping[str, Any] | None = None
    """Shallow update merged into the context in the same transaction."""
    attempts: int | None = None
    """The consecutive-failure counter after it (None: unchanged)."""
    total_attempts: int | None = None
    """The lifetime failure counter after it (None: unchanged)."""
    fired_timer: int | None = None
    """The timer this transition consumes."""
    rearm: TimerSpec | None = None
    """The fired timer's next interval, if it is recurring: armed when the workflow stays in
    its state (a self-transition keeps the state's timers); leaving the state drops it."""
    add_timers: tuple[TimerSpec, ...] = ()
    """A handler's schedules (``run.schedule``): armed with its outcome, after the clearing
    of the state it leaves, so they belong to the state it moves to (none at a terminal)."""
    cancel_timer_keys: tuple[str, ...] = ()
    """A handler's ``run.cancel_timer`` keys: deleted with its outcome."""
    messages: tuple[Mapping[str, Any], ...] = ()
    """A handler's ``run.emit`` messages: stored with the transition's log entry."""
    retry_delay: float | None = None
    """A transient failure's backoff: the handler (or the retry event) runs again after it."""
    last_error: str | None = None
    lease: Lease | None = None
    """A worker's write: applied only while this lease holds, and it releases the lease."""
    release_lease: bool = True
    """False for external events: a worker holding the workflow keeps its lease (its own
    result then loses the compare-and-swap and is dropped)."""
    require_unleased: bool = False
    """Refuse (as a conflict) while any worker holds the workflow (cancel uses it)."""
    idempotency_key: str | None = None
    consume_inputs: tuple[int, ...] = ()
    """Inbox items the handler run took: consumed in the same transaction."""
    target: str | None = None
    """For an operator's move (:data:`MOVE_EVENT`, :data:`MIGRATE_EVENT`): the state to move
    to."""
    machine_version: int | None = None
    """For a migration (:data:`MIGRATE_EVENT`): the machine version the workflow moves to."""
    if_allowed: bool = False
    """An external event that is not allowed in the workflow's state *now* (no edge from it,
    a terminal state, no guard passed: confirmed on a fresh read) is not applied and not a
    refusal: :meth:`Transitions.send` returns the row unchanged (``applied`` False)."""
    step_finish: StepFinish | None = None
    """A handler's last step outcome (its *done* record), committed with the transition."""
    keep_lease_if_due: bool = False
    """A worker's write that keeps its lease when the target state has a handler to run (the
    worker runs it next under the same claim); released as usual otherwise."""
    compensated: tuple[str, ...] | None = None
    """Set once the compensations ran (:mod:`~statewright.engine.compensation`): the steps
    undone, logged in the payload; a compensating edge is refused without it."""
    effects: tuple[TransactionalStep, ...] = ()
    """A handler's transactional steps (``run.transaction``), run in the write's transaction."""


@dataclass(frozen=True)
class Defer:
    """A write that keeps the state (no log entry); see :class:`~statewright.types.DeferWrite`."""

    attempts: int
    next_due_at: float | None = None
    last_error: str | None = None
    total_attempts: int | None = None
    parked: str | None = None
    lease: Lease | None = None
    consume_inputs: tuple[int, ...] = ()
    fired_timer: int | None = None
    """A timer consumed without a transition (a recurring timer whose event was refused)."""
    add_timers: tuple[TimerSpec, ...] = ()
    """Timers armed with it: a handler's schedules, a refused recurring timer re-armed."""
    cancel_timer_keys: tuple[str, ...] = ()
    wake_input: tuple[str | None, tuple[int, ...]] | None = None
    """A suspended wait for an input (see :attr:`~statewright.types.DeferWrite.wake_input`)."""


@dataclass(frozen=True)
class Dispatched:
    """What a send did: the workflow after it, and whether this was a retry of a request
    already applied under the same idempotency key (then nothing was applied now, ``row`` is
    the workflow as it is now, and ``applied_version`` the version the first request made)."""

    row: WorkflowRow
    replayed: bool
    applied_version: int
    applied: bool = True
    """False for an event sent ``if_allowed`` that was not allowed now: nothing changed."""
    refusal: IllegalTransition | None = None
    """Why it was not applied (its ``reason``, ``state`` and ``allowed`` events)."""


def canonical(value: Any) -> str:
    """A JSON value as text that compares equal for equal values (key order aside)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same_json(stored: Any, given: Any) -> bool:
    """Whether a value read back from the store is the one a caller gives again (an
    idempotent retry must repeat its request exactly)."""
    return canonical(stored) == canonical(given)
