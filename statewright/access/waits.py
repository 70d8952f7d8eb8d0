"""Bounded waits: read a workflow until it is in a wanted state, or its version moved past a
given one, or a timeout passes (HTTP's long-poll ``GET /v1/workflows/{id}?wait_for_state=``
and MCP's ``wait_for_state`` are this one wait).

The timeout is never an error: the wait then returns the workflow as it is, with
``timed_out``. A finished workflow ends the wait too (it will not move again). Between reads
the wait holds no store connection and does not block the event loop: it sleeps, growing the
pause from ``poll`` to ``max_poll``, and the store's wake-ups (:mod:`statewright.engine.wakeup`:
a transition that makes work due, an input, a cancel) cut a pause short, though never to
less than ``poll`` since the last read (a busy store wakes often). A wake-up is a hint: a
workflow moved to a state with nothing to run wakes nobody and is seen at the next poll.

The surfaces cap the timeout (HTTP: a server setting; MCP: at most 300 s) and check their own
arguments' shapes; the names of the states are checked here, against the workflow's machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from statewright.access.reads import Reads
from statewright.engine import wakeup
from statewright.errors import InvalidInput, UnknownState
from statewright.types import WorkflowRow

POLL = 0.1
"""The first pause between reads (seconds)."""
MAX_POLL = 1.0
"""The longest pause between reads: what a move no wake-up announces may wait to be seen."""
GROWTH = 1.5

Check = Callable[[WorkflowRow], Awaitable[bool]]
Seen = Callable[[WorkflowRow], Awaitable[None]]


@dataclass(frozen=True)
class Waited:
    """How a wait ended: the workflow as last read, and why."""

    row: WorkflowRow
    reached: bool
    """It was in a wanted state (or one within a wanted compound state), its version was past
    ``after_version``, or the surface's own condition held."""
    timed_out: bool
    """The timeout passed first (and it is not finished): ``row`` is its state now."""
    waited: float
    """Seconds the wait took."""

    def fields(self) -> dict[str, Any]:
        """What every surface adds to the workflow it answers with."""
        return {
            "reached": self.reached,
            "timed_out": self.timed_out,
            "waited": round(self.waited, 3),
        }


def check_states(reads: Reads, row: WorkflowRow, states: Collection[str]) -> None:
    """UnknownState naming the states ``row``'s machine lacks (leaves and compound states are
    known); a workflow whose machine version is not registered here takes any name."""
    machine = reads.known_machine(row)
    if machine is None:
        return
    known = set(machine.states)
    if machine.tree is not None:
        known |= set(machine.tree.compounds)
    unknown = [s for s in states if s not in known]
    if unknown:
        raise UnknownState(
            f"{row.type} has no state {', '.join(map(repr, unknown[:20]))}; "
            f"its states: {', '.join(machine.states)}",
            state=unknown[0][:200],
        )


def in_states(reads: Reads, row: WorkflowRow, states: Collection[str]) -> bool:
    """Whether ``row`` is in one of ``states`` (its leaf, or a compound state holding it)."""
    if row.state in states:
        return True
    machine = reads.known_machine(row)
    return machine is not None and any(s in states for s in machine.ancestors(row.state))


async def wait(
    reads: Reads,
    workflow_id: str,
    *,
    timeout: float,
    states: Collection[str] | None = None,
    after_version: int | None = None,
    until: Check | None = None,
    seen: Seen | None = None,
    poll: float = POLL,
    max_poll: float = MAX_POLL,
) -> Waited:
    """Read the workflow the caller knows as ``workflow_id`` until it is in one of ``states``,
    or its version is past ``after_version``, or ``until(row)`` (used only when neither is
    given; without it either, until its version moves past the one first read) holds, or it
    is finished, or ``timeout`` seconds (of real time, not the engine's clock) pass.
    ``seen(row)`` hears each read. Raises what :meth:`Reads.get` raises (another tenant's
    workflow is not found), and UnknownState for a state its machine lacks."""
    if timeout < 0:
        raise InvalidInput("'timeout' must be at least 0 seconds")
    if after_version is not None and after_version < 0:
        raise InvalidInput("'after_version' must be at least 0")
    wanted = frozenset(states or ())
    store = reads.runtime.store
    loop = asyncio.get_running_loop()
    began = loop.time()
    deadline = began + timeout
    pause = max(poll, 0.001)
    woken: asyncio.Task[None] | None = None
    first = True
    last = began
    try:
        while True:
            if woken is not None:
                # Listening since before the last read: a wake-up sent since ends the pause
                # at once instead of being lost.
                await woken
                # Busy stores wake often: never read more than once a ``poll``.
                await asyncio.sleep(min(last + poll, deadline) - loop.time())
                pause = min(pause * GROWTH, max(max_poll, poll))
            woken = await wakeup.listen(store, min(pause, max(0.0, deadline - loop.time())))
            last = loop.time()
            row = await reads.get(workflow_id)
            if first:
                if wanted:
                    check_states(reads, row, wanted)
                elif after_version is None and until is None:
                    after_version = row.version  # nothing named: its next move
            first = False
            if seen is not None:
                await seen(row)
            reached = await _reached(reads, row, wanted, after_version, until)
            if reached or row.terminal or loop.time() >= deadline:
                return Waited(row, reached, not (reached or row.terminal), loop.time() - began)
    finally:
        if woken is not None:
            woken.cancel()


async def _reached(
    reads: Reads,
    row: WorkflowRow,
    states: frozenset[str],
    after_version: int | None,
    until: Check | None,
) -> bool:
    if states and in_states(reads, row, states):
        return True
    if after_version is not None and row.version > after_version:
        return True
    if not states and after_version is None and until is not None:
        return await until(row)
    return False
