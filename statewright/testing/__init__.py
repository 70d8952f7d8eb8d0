"""Helpers for users' tests: a manual clock, an in-memory engine, and model-based testing.

- :func:`memory_engine`, :class:`ManualClock`: an engine on in-memory SQLite whose time
  moves only when told to.
- :func:`simple_paths`, :func:`transition_cover`: enumerate a machine's paths (pure).
- :func:`check_machine`, :func:`check_cover`, :func:`legal_events`, :func:`payloads`:
  hypothesis-driven tests through a real engine (need ``hypothesis``, imported on first use).
- the pytest plugin (:mod:`statewright.testing.pytest_plugin`, registered on install):
  ``statewright_clock``, ``statewright_engine``, ``statewright_sqlite_engine`` fixtures.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from statewright.clock import ManualClock
from statewright.definition.machine import Machine
from statewright.testing.paths import Cover, Step, format_path, simple_paths, transition_cover

if TYPE_CHECKING:
    from statewright.engine.core import Engine
    from statewright.engine.workflow_type import WorkflowType
    from statewright.testing.cover import check_cover
    from statewright.testing.model import (
        Invariant,
        ModelCheckFailure,
        check_machine,
        legal_events,
        payloads,
    )


def memory_engine(
    types: Iterable[WorkflowType | Machine] = (), clock: ManualClock | None = None
) -> Engine:
    """An engine on an in-memory SQLite store (open it with ``async with``)."""
    from statewright.engine.core import Engine
    from statewright.store.sqlite import SQLiteStore

    return Engine(SQLiteStore(":memory:"), types, clock=clock or ManualClock())


_MODEL = {
    "Invariant",
    "ModelCheckFailure",
    "check_machine",
    "legal_events",
    "payloads",
}


def __getattr__(name: str) -> Any:
    # The hypothesis-based helpers load on first use: importing statewright.testing (the
    # pytest plugin does, in every session) must not need hypothesis.
    if name not in _MODEL and name != "check_cover":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from statewright.testing import cover, model
    except ModuleNotFoundError as exc:
        if exc.name != "hypothesis":
            raise
        raise ModuleNotFoundError(
            f"statewright.testing.{name} needs hypothesis: pip install 'statewright[testing]'",
            name=exc.name,
        ) from exc
    return cover.check_cover if name == "check_cover" else getattr(model, name)


__all__ = [
    "Cover",
    "Invariant",
    "ManualClock",
    "ModelCheckFailure",
    "Step",
    "check_cover",
    "check_machine",
    "format_path",
    "legal_events",
    "memory_engine",
    "payloads",
    "simple_paths",
    "transition_cover",
]
