"""Workflows parked for an operator: why, and what the operator should do.

A worker parks a workflow (``WorkflowRow.parked``, the reason) when it cannot go on safely by
itself: a step's outcome is unknown and nothing could tell it (``step_outcome_unknown``), a
fatal error or a spent retry budget without an error edge (``fatal_error``), an error event
the machine refused (``error_event_refused``), a cancel event it refused (``cancel_refused``).
Nothing runs it until an operator acts, so it counts as stuck from the moment it parks.

What to do depends on the reason: a step whose outcome is unknown is *resolved* (applied,
with its result, or not applied), which resumes the workflow; resuming instead would run the
handler into the same step and park it again (:func:`check_resumable` refuses it). For the
other reasons the operator fixes the cause and *resumes* it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from statewright.engine.failures import PARKED_FATAL, PARKED_REFUSED, PARKED_UNKNOWN
from statewright.errors import StepUnresolved
from statewright.types import WorkflowRow

if TYPE_CHECKING:
    from statewright.store.protocol import ReadModel

PARKED_CANCEL_REFUSED = "cancel_refused"
REASONS = (PARKED_UNKNOWN, PARKED_FATAL, PARKED_REFUSED, PARKED_CANCEL_REFUSED)
"""Every reason the runtime parks a workflow for (the only values of the metric's label)."""

Action = Literal["resolve_step", "resume", "investigate"]


def action(row: WorkflowRow, step: str | None) -> Action:
    """What an operator should do about a stuck ``row``: ``resolve_step`` (parked because the
    outcome of ``step`` is unknown), ``resume`` (parked for another reason, or that step was
    resolved meanwhile: fix the cause, then resume) or ``investigate`` (not parked: it has
    sat in its state past the threshold)."""
    if row.parked is None:
        return "investigate"
    if row.parked == PARKED_UNKNOWN and step is not None:
        return "resolve_step"
    return "resume"


def hint(row: WorkflowRow, step: str | None) -> str:
    """The same, as a sentence for people (no command names: each surface adds its own)."""
    todo = action(row, step)
    if todo == "resolve_step":
        return (
            f"the outcome of step {step!r} is unknown: check the external system, then "
            "resolve the step as applied (with its result) or not applied; that resumes it"
        )
    if todo == "resume":
        return f"parked ({row.parked}): fix the cause (see last_error), then resume it"
    return f"in {row.state!r} past its threshold: see why it has not moved"


async def unresolved_steps(store: ReadModel, rows: Sequence[WorkflowRow]) -> dict[str, list[str]]:
    """Per workflow parked with ``step_outcome_unknown`` among ``rows`` (by store id), the
    names of its steps whose outcome is unknown, in the order they started (one read for all
    of them; none for rows parked otherwise)."""
    wanted = [r.id for r in rows if r.parked == PARKED_UNKNOWN and not r.terminal]
    found: dict[str, list[str]] = {}
    for rec in await store.unresolved_steps(wanted):
        found.setdefault(rec.workflow_id, []).append(rec.step)
    return found


async def check_resumable(store: ReadModel, row: WorkflowRow) -> None:
    """Refuse (:class:`StepUnresolved`) to resume ``row`` while it is parked because a step's
    outcome is unknown and that step is still unresolved: its handler would meet the step
    again, ask the same reconcile hook and park again."""
    steps = (await unresolved_steps(store, [row])).get(row.id)
    if steps:
        raise StepUnresolved(row.id, steps)


__all__ = [
    "PARKED_CANCEL_REFUSED",
    "REASONS",
    "Action",
    "action",
    "check_resumable",
    "hint",
    "unresolved_steps",
]
