"""statewright: durable, explicit state machines for AI-agent and backend workflows."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from statewright import _lazy
from statewright._version import __version__

if TYPE_CHECKING:
    from statewright.clock import ManualClock
    from statewright.definition.machine import (
        Assign,
        Event,
        Guard,
        Machine,
        MachineBuilder,
        State,
        Transition,
    )
    from statewright.engine import (
        Applied,
        Engine,
        Next,
        NotApplied,
        RetryPolicy,
        Run,
        Worker,
        WorkflowType,
    )
    from statewright.engine.syncrun import SyncRun
    from statewright.errors import (
        FatalError,
        IllegalTransition,
        InvalidInput,
        StatewrightError,
        TransientError,
        WorkflowNotFound,
    )
    from statewright.store import SQLiteStore, Store, store_from_url
    from statewright.sync import SyncEngine

# The public names are imported on first use (PEP 562), so that `import statewright` (and so
# `statewright --help`, which imports statewright.cli) loads no engine, store or definition
# code until something asks for it: `from statewright import Engine` works as before.
# The root names what a first workflow writes (a machine, a type with its handlers, an engine
# on a store, a worker) and the errors a caller routinely catches or a handler raises; every
# other name is imported from its module: all exceptions from statewright.errors, the rows and
# filters from statewright.types, Limits from statewright.jsonvalue...
_LAZY: dict[str, str] = {
    "Applied": "statewright.engine",
    "Assign": "statewright.definition.machine",
    "Engine": "statewright.engine",
    "Event": "statewright.definition.machine",
    "FatalError": "statewright.errors",
    "Guard": "statewright.definition.machine",
    "IllegalTransition": "statewright.errors",
    "InvalidInput": "statewright.errors",
    "Machine": "statewright.definition.machine",
    "MachineBuilder": "statewright.definition.machine",
    "ManualClock": "statewright.clock",
    "Next": "statewright.engine",
    "NotApplied": "statewright.engine",
    "RetryPolicy": "statewright.engine",
    "Run": "statewright.engine",
    "SQLiteStore": "statewright.store",
    "State": "statewright.definition.machine",
    "StatewrightError": "statewright.errors",
    "Store": "statewright.store",
    "SyncEngine": "statewright.sync",
    "SyncRun": "statewright.engine.syncrun",
    "TransientError": "statewright.errors",
    "Transition": "statewright.definition.machine",
    "Worker": "statewright.engine",
    "WorkflowNotFound": "statewright.errors",
    "WorkflowType": "statewright.engine",
    "store_from_url": "statewright.store",
}


if not TYPE_CHECKING:  # type checkers see the imports above, and flag unknown names
    __getattr__, __dir__ = _lazy.attributes(__name__, _LAZY)


# A library does not configure logging; this keeps Python's last-resort handler from printing
# our WARNINGs to stderr in scripts that never set logging up.
logging.getLogger("statewright").addHandler(logging.NullHandler())

__all__ = [
    "Applied",
    "Assign",
    "Engine",
    "Event",
    "FatalError",
    "Guard",
    "IllegalTransition",
    "InvalidInput",
    "Machine",
    "MachineBuilder",
    "ManualClock",
    "Next",
    "NotApplied",
    "RetryPolicy",
    "Run",
    "SQLiteStore",
    "State",
    "StatewrightError",
    "Store",
    "SyncEngine",
    "SyncRun",
    "TransientError",
    "Transition",
    "Worker",
    "WorkflowNotFound",
    "WorkflowType",
    "__version__",
    "store_from_url",
]
