"""Ready-made machines."""

from __future__ import annotations

from statewright.definition.builtin.agent_task import agent_task_machine

__all__ = ["agent_task_machine"]
