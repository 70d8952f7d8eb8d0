"""Machine definitions: pure data and pure functions, no I/O.

Build a machine with :class:`MachineBuilder` (or load one with :func:`load_path`), ask it
what may happen next, save it, and draw it.
"""

from __future__ import annotations

from statewright.definition.builtin import agent_task_machine
from statewright.definition.formats import (
    dumps_json,
    dumps_yaml,
    from_dict,
    from_xstate,
    load_path,
    loads_json,
    loads_yaml,
    save_path,
    to_dict,
    to_xstate,
)
from statewright.definition.guards import compile_expression
from statewright.definition.machine import (
    Event,
    Guard,
    GuardFn,
    Machine,
    MachineBuilder,
    State,
    Transition,
)
from statewright.definition.model import Spawn
from statewright.definition.render import to_dot, to_mermaid

__all__ = [
    "Event",
    "Guard",
    "GuardFn",
    "Machine",
    "MachineBuilder",
    "Spawn",
    "State",
    "Transition",
    "agent_task_machine",
    "compile_expression",
    "dumps_json",
    "dumps_yaml",
    "from_dict",
    "from_xstate",
    "load_path",
    "loads_json",
    "loads_yaml",
    "save_path",
    "to_dict",
    "to_dot",
    "to_mermaid",
    "to_xstate",
]
