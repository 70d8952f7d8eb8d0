"""Helpers for users' tests: a manual clock and an in-memory engine."""

from __future__ import annotations

from collections.abc import Iterable

from statewright.clock import ManualClock
from statewright.definition.machine import Machine
from statewright.engine.core import Engine
from statewright.engine.workflow_type import WorkflowType
from statewright.store.sqlite import SQLiteStore


def memory_engine(
    types: Iterable[WorkflowType | Machine] = (), clock: ManualClock | None = None
) -> Engine:
    """An engine on an in-memory SQLite store (open it with ``async with``)."""
    return Engine(SQLiteStore(":memory:"), types, clock=clock or ManualClock())


__all__ = ["ManualClock", "memory_engine"]
