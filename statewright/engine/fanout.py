"""The handler that starts a fan-out's children (:func:`fan_out`), apart from the rest of
:mod:`statewright.engine.children` so that a workflow type can bind it to a state that
declares its children (:class:`~statewright.definition.model.Spawn`) without importing the
engine's commands."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from statewright.definition.joins import GATHERED


def fan_out(
    child_type: str,
    over: str,
    *,
    key: Callable[[int, Any], str] = lambda i, item: str(i),
    input: Callable[[Any], Mapping[str, Any]] = lambda item: {"item": item},
    cap: int | None = None,
    into: str = GATHERED,
) -> Callable[[Any], Any]:
    """A handler for the state the parent waits in: starts a child of ``child_type`` for each
    element of ``context[over]`` (keyed ``key(index, element)``, its context
    ``input(element)``), at most ``cap`` running at once, and waits (returns None).

    It runs again on every child's end the state takes as a self-transition (with
    :func:`~statewright.definition.joins.gather`), starting the next. Children already
    started are started again as no-ops (their ids are derived), so a crash at any point
    starts none twice; the running ones are always the first ``cap`` of those not ended, in
    list order."""
    if cap is not None and cap < 1:
        raise ValueError("cap must be at least 1")

    async def handler(run: Any) -> None:  # a Run (steps imports the engine's commands)
        items = run.context.get(over) or []
        ended = run.context.get(into) or {}
        budget = len(items) if cap is None else cap
        for i, item in enumerate(items):
            if budget <= 0:
                break
            k = key(i, item)
            if k in ended:
                continue
            await run.start_child(child_type, k, input(item))
            budget -= 1
        return None

    handler.__name__ = f"fan_out_{child_type}"
    return handler
