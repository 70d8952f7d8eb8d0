"""The names of compensations (the saga pattern): stable across processes, reserved in the
ledger, and noted in the compensating transition's payload.

A step declared with ``run.step("charge", charge, compensate=refund)`` records the name of
``refund`` with its ledger entry; a compensating transition later runs it as the durable step
``undo.charge``, possibly in another process after a crash, where the name is resolved again
(:mod:`statewright.engine.compensation`). Pure: no I/O, nothing of the engine imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from statewright.errors import IllegalTransition, InvalidInput

if TYPE_CHECKING:
    from statewright.definition.model import Transition
    from statewright.types import WorkflowRow

UNDO_PREFIX = "undo."
"""A compensation's step name is ``undo.<step>``: reserved, refused as a user step's name."""

COMPENSATED = "compensated"
"""The key a compensating transition adds to its payload: the steps it undid, newest first."""


def undo_name(step: str) -> str:
    """The ledger name of ``step``'s compensation."""
    return UNDO_PREFIX + step


def callable_name(fn: Callable[..., Any]) -> str | None:
    """``module:qualname`` of a function importable by that name in another process; None for
    a lambda, a local function, a bound method (the name is its class's function) or anything
    without both names."""
    if inspect.ismethod(fn):
        return None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def compensated(
    row: WorkflowRow,
    by_policy: frozenset[str],
    edge: Transition,
    undone: tuple[str, ...] | None,
    payload: Mapping[str, Any],
) -> Mapping[str, Any]:
    """The payload the transition ``edge`` logs when it compensates (marked, or its event
    one of ``by_policy``, the type's ``compensating_events``): the event's, with the steps it
    undid under :data:`COMPENSATED`; else ``payload`` itself. Without them (``undone`` None:
    nobody ran the compensations, as for an event sent from outside) a compensating
    transition is refused: only the workflow's worker takes it (its handler, a timer, a
    cancel through ``Engine.cancel``), after it ran them."""
    if not edge.compensate and undone is None and edge.event not in by_policy:
        return payload
    if undone is None:
        raise IllegalTransition(
            row.state,
            edge.event,
            (),
            "a compensating transition is taken by the workflow's worker (its handler, a "
            "timer, a cancel through Engine.cancel), which runs the compensations first; it "
            "cannot be sent",
            row.id,
        )
    return {**payload, COMPENSATED: list(undone)}


def intended(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A logged payload as its sender gave it (without :data:`COMPENSATED`): what an
    idempotent retry of the event is compared with."""
    return {k: v for k, v in payload.items() if k != COMPENSATED}


SEEN: dict[str, Callable[..., Any]] = {}
"""Compensations passed to ``run.step`` in this process, by name: found without an import."""


def name_for(compensators: Mapping[str, Callable[..., Any]], fn: Callable[..., Any]) -> str:
    """The stable name ``fn`` is recorded under: its name among the type's ``compensations``,
    else its ``module:qualname``. A lambda or a local function the type does not name is
    refused (InvalidInput): no other process could find it after a crash."""
    for name, known in compensators.items():
        if known is fn or known == fn:  # a bound method is a new object each time
            return name
    if not callable(fn):
        raise InvalidInput(f"compensate must be a function, not {fn!r}")
    found = callable_name(fn)
    if found is None:
        raise InvalidInput(
            f"compensation {fn!r} cannot be found by another process after a crash: use a "
            "module-level function, or name it in WorkflowType(compensations={name: fn})"
        )
    SEEN.setdefault(found, fn)
    return found
